"""BaseEngineWrapper validation (seed ranges) and GymEngineWrapper against a reference server."""

from __future__ import annotations

import pytest

from agent_gym.errors import ConfigError, ServerError
from agent_gym.integrations.engine import BaseEngineWrapper, GymEngineWrapper, validate_server_address
from agent_gym.policy.completions import ServerCompletions
from agent_gym.types import EpisodeStatus, Trajectory


class MockEngine(BaseEngineWrapper):
    def initialize(self):
        self.ready = True

    async def generate_agent_trajectories_async(self, tasks):
        return [Trajectory(prompt_tokens=[7, 8, 9], response_tokens=[10], response_masks=[1])]


def test_seed_example_constructs(qwen_tokenizer):
    engine = MockEngine(agent_name="mock_agent_name", tokenizer=qwen_tokenizer,
                        sampling_params={"mock": "sampling_params"}, max_prompt_length=128 * 1024,
                        max_response_length=8 * 1024, n_parallel_agents=16, max_steps=8)
    assert engine.max_prompt_length == 131072 and engine.n_parallel_agents == 16
    assert engine.server_addresses == [] and engine.completions == []
    engine.initialize()
    assert engine.ready


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"agent_name": ""}, ConfigError, "agent_name"),
        ({"agent_name": "1abc"}, ConfigError, "agent_name"),
        ({"agent_name": "a-b"}, ConfigError, "agent_name"),
        ({"agent_name": 3}, TypeError, "agent_name"),
        ({"tokenizer": None}, TypeError, "tokenizer"),
        ({"tokenizer": "Qwen/Qwen3"}, TypeError, "PreTrainedTokenizer"),
        ({"sampling_params": [1]}, TypeError, "sampling_params"),
        ({"max_prompt_length": 0}, ConfigError, r"\[1, 131072\]"),
        ({"max_prompt_length": 128 * 1024 + 1}, ConfigError, "max_prompt_length"),
        ({"max_response_length": 8 * 1024 + 1}, ConfigError, r"\[1, 8192\]"),
        ({"n_parallel_agents": 65}, ConfigError, r"\[1, 64\]"),
        ({"n_parallel_agents": 0}, ConfigError, "n_parallel_agents"),
        ({"max_steps": 11}, ConfigError, r"\[1, 10\]"),
        ({"max_steps": 2.0}, TypeError, "max_steps"),
        ({"max_steps": True}, TypeError, "max_steps"),
        ({"server_addresses": ["localhost"]}, ConfigError, "IP:PORT"),
        ({"server_addresses": ["127.0.0.1:70000"]}, ConfigError, "65535"),
        ({"server_addresses": "127.0.0.1:8000"}, TypeError, "list"),
    ],
)
def test_validation(qwen_tokenizer, kwargs, error, match):
    args = {"agent_name": "agent_1", "tokenizer": qwen_tokenizer, **kwargs}
    with pytest.raises(error, match=match):
        MockEngine(**args)


def test_bounds_are_inclusive(qwen_tokenizer):
    engine = MockEngine("a", qwen_tokenizer, None, 1, 1, 1, 1)
    assert (engine.max_prompt_length, engine.max_response_length, engine.n_parallel_agents, engine.max_steps) == (
        1, 1, 1, 1)
    MockEngine("_a", qwen_tokenizer, None, 128 * 1024, 8 * 1024, 64, 10)


def test_abstract_methods_are_required(qwen_tokenizer):
    class Incomplete(BaseEngineWrapper):
        def initialize(self):
            pass

    with pytest.raises(TypeError):
        Incomplete("a", qwen_tokenizer)


@pytest.mark.parametrize(
    "address, expected",
    [("127.0.0.1:8000", "127.0.0.1:8000"), ("http://10.0.0.2:80/", "10.0.0.2:80"), ("[::1]:9", "[::1]:9"),
     ("node-1.cluster:8000", "node-1.cluster:8000")],
)
def test_server_address_forms(address, expected):
    assert validate_server_address(address) == expected


async def test_completions_call_each_server(start_servers, qwen_tokenizer):
    a, b = start_servers({"fake_tokens": 3}, {"fake_tokens": 3})
    engine = MockEngine("agent", qwen_tokenizer, server_addresses=[str(a), str(b), "127.0.0.1:1"])
    assert len(engine.completions) == 3
    # The same callable VLLMPolicy.completions hands out, with the engine's timeout and default budget.
    assert all(isinstance(fn, ServerCompletions) for fn in engine.completions)
    assert engine.completions[0].client.options.timeout == engine.request_timeout
    assert engine.completions[0].default_max_tokens == engine.max_response_length
    for fn in engine.completions[:2]:
        result = await fn({"prompt": [1, 2, 3], "return_token_ids": True})
        assert len(result["choices"][0]["token_ids"]) == 3
    with pytest.raises(ServerError):
        await engine.completions[2]({"prompt": "hi"})
    with pytest.raises(ValueError, match="prompt"):
        await engine.completions[0]({"max_tokens": 3})


async def test_gym_engine_runs_tasks(start_server, qwen_tokenizer):
    server = start_server(fake_tokens=5)
    engine = GymEngineWrapper("tool_use", qwen_tokenizer, {"temperature": 0.7, "max_tokens": 8},
                              max_response_length=512, n_parallel_agents=4, max_steps=2,
                              env_id="agent_gym/ToolUse-v0", server_addresses=[str(server)], samples_per_task=2)
    tasks = [{"id": f"t{i}", "question": f"What is {i} + 1?", "ground_truth": str(i + 1)} for i in range(3)]
    with pytest.raises(ValueError, match="ground_truth"):
        await engine.generate_agent_trajectories_async([{"id": 1, "question": "q"}])
    try:
        engine.initialize()
        result = await engine.generate_agent_trajectories_async(tasks)
        assert len(result) == 6
        assert all(isinstance(t, Trajectory) for t in result)
        assert [t.task["id"] for t in result] == ["t0", "t0", "t1", "t1", "t2", "t2"]
        assert result[0].group_id == result[1].group_id != result[2].group_id
        assert all(t.status == EpisodeStatus.MAX_STEPS and int(t.response_masks.sum()) == 10 for t in result)
        sync = engine.generate_agent_trajectories(tasks[:1])
        assert len(sync) == 2
        # After initialize, the seed's completions are the policy's pooled, retrying callables.
        assert engine.completions == engine.policy.completions
        assert engine.policy.max_model_len == engine.max_prompt_length + engine.max_response_length
        answer = await engine.completions[0]({"prompt": [1, 2, 3], "max_tokens": 3, "return_token_ids": True})
        assert len(answer["choices"][0]["token_ids"]) == 3
    finally:
        engine.close()


def test_gym_engine_needs_servers(qwen_tokenizer):
    engine = GymEngineWrapper("a", qwen_tokenizer, env_id="agent_gym/ToolUse-v0")
    with pytest.raises(ConfigError, match="server_addresses"):
        engine.initialize()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"gamma": 1.5}, ConfigError, "gamma"),
        ({"episode_timeout": 0}, ConfigError, "episode_timeout"),
        ({"seed": "1"}, TypeError, "seed"),
    ],
)
def test_gym_engine_validates_episode_settings(qwen_tokenizer, kwargs, error, match):
    with pytest.raises(error, match=match):
        GymEngineWrapper("a", qwen_tokenizer, env_id="agent_gym/ToolUse-v0", **kwargs)


def _two_segment_episode():
    from agent_gym.types import Segment, Step, StepTrajectory

    segments = [
        Segment(prompt_tokens=[1, 2], response_tokens=[3, 4, 5], response_masks=[1, 0, 1],
                response_logprobs=[-0.5, 0.0, -0.25], first_step=0, last_step=1),
        Segment(prompt_tokens=[1, 9], response_tokens=[6], response_masks=[1], response_logprobs=[-1.0],
                first_step=2, last_step=2),
    ]
    first = segments[0]
    return StepTrajectory(
        prompt_tokens=first.prompt_tokens, response_tokens=first.response_tokens, response_masks=first.response_masks,
        response_logprobs=first.response_logprobs, idx=4, trajectory_reward=1.0, rollout_id="r", group_id="g",
        status="ENV_DONE", task={"id": "t"}, steps=[Step(reward=r) for r in (0.0, 0.0, 1.0)], segments=segments,
    )


def test_split_segments_one_record_per_segment():
    from agent_gym.segments import split_segments, trajectory_segments

    episode = _two_segment_episode()
    single = Trajectory(prompt_tokens=[1], response_tokens=[2], response_masks=[1])
    records = split_segments([episode, single])
    assert len(records) == 3 and records[2] is single
    a, b = records[:2]
    assert a.prompt_tokens.tolist() == [1, 2] and a.response_tokens.tolist() == [3, 4, 5]
    assert a.response_masks.tolist() == [1, 0, 1] and a.response_logprobs.tolist() == [-0.5, 0.0, -0.25]
    assert b.prompt_tokens.tolist() == [1, 9] and b.response_tokens.tolist() == [6]
    assert [len(a.steps), len(b.steps)] == [2, 1] and b.steps[0].reward == 1.0
    assert a.segments == [episode.segments[0]] and b.segments == [episode.segments[1]]
    for record in (a, b):
        assert (record.rollout_id, record.group_id, record.idx, record.status) == ("r", "g", 4, "ENV_DONE")
        assert record.trajectory_reward == 1.0 and record.task == {"id": "t"}
    # The expansion the slime export uses is the same function.
    assert trajectory_segments(episode) == episode.segments
    [only] = trajectory_segments(single)
    assert only.prompt_tokens.tolist() == [1] and only.response_logprobs.tolist() == [0.0]


@pytest.mark.parametrize(
    "address", ["localhost", "127.0.0.1:70000", "127.0.0.1:80/path", "user@127.0.0.1:80", "", "http://:80"]
)
def test_server_address_rejects(address):
    with pytest.raises(ConfigError, match="IP:PORT"):
        validate_server_address(address)


def test_training_records_mask_failures_with_a_reward_neutral_in_their_task():
    import dataclasses

    from agent_gym.integrations.engine import training_records
    from agent_gym.types import Step, StepTrajectory

    solved = _two_segment_episode()
    wrong = dataclasses.replace(solved, rollout_id="w", trajectory_reward=0.0)
    lost = dataclasses.replace(solved, rollout_id="l", trajectory_reward=0.1, status="POLICY_ERROR")
    down = StepTrajectory(prompt_tokens=[], response_tokens=[], response_masks=[], rollout_id="d", task={"id": "u"},
                          status="POLICY_ERROR", steps=[Step(info={"error": "policy raised ServerError"})])
    records = training_records([solved, wrong, lost, down], pad_token_id=7)
    assert [r.rollout_id for r in records] == ["r", "r", "w", "w", "l", "l", "d"]
    assert [r.response_masks.tolist() for r in records[:2]] == [[1, 0, 1], [1]]  # healthy records as they were
    for record in records[4:6]:  # lost: every id masked, the task's mean reward over the episodes that ran
        assert set(record.response_masks.tolist()) == {0} and set(record.response_logprobs.tolist()) == {0.0}
        assert record.segments[0].response_masks.tolist() == record.response_masks.tolist()
        assert record.trajectory_reward == 0.5 and record.status == "POLICY_ERROR"
    assert lost.trajectory_reward == 0.1 and lost.segments[0].response_masks.tolist() == [1, 0, 1]  # not changed
    [empty] = records[6:]  # down before its first turn: a well-formed masked record, no reward to compare with
    assert empty.prompt_tokens.tolist() == [7] and empty.response_tokens.tolist() == [7]
    assert empty.response_masks.tolist() == [0] and empty.trajectory_reward == 0.0
