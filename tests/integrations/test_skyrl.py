"""SkyRL adapters: agent_gym envs under skyrl-gym's own API, and the generator against a real HTTP server.

The generator's output is checked against SkyRL's documented ``GeneratorOutput`` rules
(``skyrl/train/utils/trainer_utils.py::validate_generator_output`` and its step-wise checks,
NovaSky-AI/SkyRL @ a9564572): the ``skyrl`` trainer package itself does not install beside
this project (it pins ``transformers<=5.8``, and its 0.3.0 release fails to import on Python
3.11 with pydantic 2.14), so the rules are restated in :func:`check_generator_output`.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import pytest
import torch

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.errors import ConfigError
from agent_gym.integrations.skyrl import AgentGymGenerator, TrajectoryKey, register, register_all, stop_reason
from agent_gym.memory import MemoryConfig, MemorySummary
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.types import Segment, Step, StepTrajectory

ENV_ID = "agent_gym/ToolUse-v0"
# The tiny random model rarely samples <|im_end|>: a third of the ids stop a turn, so turns stay short and
# episodes run several turns; a small prompt budget then makes the memory summarize (a new segment).
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=12, logprobs=0, seed=3,
                          stop_token_ids=list(range(0, 151643, 3)))


@dataclass(frozen=True)
class TrajectoryID:
    """The fields of SkyRL's ``TrajectoryID`` (``skyrl/train/generators/base.py``)."""

    instance_id: str
    repetition_id: int


class Recorder:
    """Wraps a policy and keeps every turn it returned, per session."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.turns: dict[str, list[Any]] = defaultdict(list)

    async def aact(self, messages, *, session_id, tools=None):
        out = await self.policy.aact(messages, session_id=session_id, tools=tools)
        self.turns[session_id].append(out)
        return out

    def close_session(self, session_id):
        self.policy.close_session(session_id)


def check_generator_output(out: dict[str, Any], num_prompts: int, *, step_wise: bool) -> None:
    """SkyRL's documented checks of a ``GeneratorOutput`` (validate_generator_output and the step-wise ones)."""
    n = len(out["response_ids"])
    assert n > 0 and len(out["prompt_token_ids"]) == n
    if not step_wise:
        assert n == num_prompts
    for key in ("loss_masks", "rewards", "rollout_logprobs", "stop_reasons", "trajectory_ids", "is_last_step"):
        assert len(out[key]) == n, key
    for response, mask, logprobs in zip(out["response_ids"], out["loss_masks"], out["rollout_logprobs"], strict=True):
        assert len(response) == len(mask) == len(logprobs) > 0  # SkyRL puts the reward on the last id
    assert all(isinstance(r, float) for r in out["rewards"])
    assert all(isinstance(x, int) for row in out["prompt_token_ids"] + out["response_ids"] for x in row)
    assert set(out["stop_reasons"]) <= {"stop", "length", "abort"}
    if step_wise:
        last = out["is_last_step"]
        assert last[-1] is True and all(type(x) is bool for x in last)
        # contiguous: a trajectory's rows are adjacent and only its last row ends it
        ended: set[Any] = set()
        for i, tid in enumerate(out["trajectory_ids"]):
            assert tid not in ended
            if i + 1 < n and out["trajectory_ids"][i + 1] != tid:
                assert last[i], f"row {i} ends trajectory {tid} without is_last_step"
            if last[i]:
                ended.add(tid)
        assert sum(last) == len(ended)


def segments_of(turns: list[Any]) -> list[list[Any]]:
    """A session's turns split where the policy started a new segment."""
    out: list[list[Any]] = []
    for turn in turns:
        if not out or turn.new_segment:
            out.append([])
        out[-1].append(turn)
    return out


def run(generator: AgentGymGenerator, batch: dict[str, Any]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        try:
            return await generator.generate(batch)
        finally:
            policy = getattr(generator.policy, "policy", generator.policy)
            await policy.aclose()

    return asyncio.run(main())


def summary_memory() -> MemorySummary:
    config = MemoryConfig(use_summary=True, max_prompt_length=250, max_summary_length=8, before_raw_message=1,
                          end_raw_message=-1, summary_system_prompt="Summarize in {max_summary_length} tokens.")
    return MemorySummary(config, chat_client=lambda messages, *, max_tokens: "notes so far")


@pytest.fixture(scope="module")
def tasks() -> list[dict[str, Any]]:
    env = gym.make(ENV_ID)
    try:
        return [dict(t) for t in env.unwrapped.tasks[:2]]
    finally:
        env.close()


@pytest.fixture(scope="module")
def http_run(reference_server, qwen_tokenizer, tasks):
    """Two prompts x two samples through the generator, a VLLMPolicy on a real reference server, memory on."""
    recorder = Recorder(VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING))
    generator = AgentGymGenerator(recorder, ENV_ID, max_steps=5, memory=summary_memory, n_parallel=4)
    ids = [TrajectoryID("uid-a", 0), TrajectoryID("uid-a", 1), TrajectoryID("uid-b", 0), TrajectoryID("uid-b", 1)]
    batch = {
        "prompts": [[{"role": "user", "content": "unused"}]] * 4,
        "env_classes": [ENV_ID] * 4,
        # a task as a dict and as the JSON text a Parquet column holds
        "env_extras": [{"task": tasks[0]}, {"task": tasks[0]}, {"task": json.dumps(tasks[1])},
                       {"task": json.dumps(tasks[1])}],
        "sampling_params": None,
        "trajectory_ids": ids,
        "batch_metadata": None,
    }
    return batch, run(generator, batch), recorder


# ---------------------------------------------------------------------------------------------- generator


def test_generator_output_follows_skyrl_rules_with_one_trajectory_id_per_episode(http_run, tasks):
    batch, out, _ = http_run
    check_generator_output(out, 4, step_wise=True)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, metrics in enumerate(out["env_metrics"]):
        rows_of[metrics["rollout_id"]].append(i)
    assert len(rows_of) == 4  # one rollout per input row
    for rows in rows_of.values():
        assert rows == list(range(rows[0], rows[-1] + 1))  # contiguous
        assert len({id(out["trajectory_ids"][i]) for i in rows}) == 1  # the input's own TrajectoryID object
        assert [out["is_last_step"][i] for i in rows] == [False] * (len(rows) - 1) + [True]
        assert [out["env_metrics"][i]["segment_index"] for i in rows] == list(range(len(rows)))
        assert all(out["env_metrics"][i]["loss_weight"] == pytest.approx(1 / len(rows)) for i in rows)
        episode_reward = out["env_metrics"][rows[0]]["episode_reward"]
        assert all(out["rewards"][i] == episode_reward for i in rows)  # the "episode" assignment
    # the input order is kept: the rows of input i carry trajectory_ids[i] and its task
    firsts = sorted(rows[0] for rows in rows_of.values())
    assert [out["trajectory_ids"][i] for i in firsts] == batch["trajectory_ids"]
    assert [out["env_metrics"][i]["group_key"] for i in firsts] == [tasks[0]["id"]] * 2 + [tasks[1]["id"]] * 2
    assert any(len(rows) >= 2 for rows in rows_of.values()), "expected a summarized episode (several rows)"
    assert out["rollout_metrics"]["agent_gym/episodes"] == 4.0
    assert out["rollout_metrics"]["agent_gym/rows"] == float(len(out["response_ids"]))


def test_generator_rows_are_the_ids_the_policy_sampled(http_run):
    _, out, recorder = http_run
    by_sampled = {}
    for turns in recorder.turns.values():
        key = tuple(tuple(i for t in seg for i in t.token_ids) for seg in segments_of(turns))
        by_sampled[key] = segments_of(turns)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, metrics in enumerate(out["env_metrics"]):
        rows_of[metrics["rollout_id"]].append(i)
    matched = set()
    for rows in rows_of.values():
        sampled = tuple(tuple(x for x, m in zip(out["response_ids"][i], out["loss_masks"][i], strict=True) if m)
                        for i in rows)
        assert sampled in by_sampled, "a row holds ids the policy did not sample"
        matched.add(sampled)
        for i, seg_turns in zip(rows, by_sampled[sampled], strict=True):
            prompt, response = out["prompt_token_ids"][i], out["response_ids"][i]
            assert prompt == seg_turns[0].prompt_token_ids
            assert prompt + response == seg_turns[-1].prompt_token_ids + seg_turns[-1].token_ids
            expected = [lp for t in seg_turns for lp in t.logprobs]
            got = [lp for lp, m in zip(out["rollout_logprobs"][i], out["loss_masks"][i], strict=True) if m]
            assert got == pytest.approx(expected, abs=1e-6)
            assert all(lp == 0.0 for lp, m in zip(out["rollout_logprobs"][i], out["loss_masks"][i], strict=True)
                       if not m)
    assert len(matched) == 4


def _trajectory(rollout_id: str, task_id: str, reward: float, status: str, segments: int = 1) -> StepTrajectory:
    segs = [Segment(prompt_tokens=torch.tensor([1, 2]), response_tokens=torch.tensor([3, 4, 5]),
                    response_masks=torch.tensor([1, 0, 1]), response_logprobs=torch.tensor([-0.5, 0.0, -0.25]))
            for _ in range(segments)]
    return StepTrajectory(prompt_tokens=segs[0].prompt_tokens, response_tokens=segs[0].response_tokens,
                          response_masks=segs[0].response_masks, trajectory_reward=reward, rollout_id=rollout_id,
                          group_id="g", status=status, task={"id": task_id, "question": "q", "ground_truth": "a"},
                          steps=[Step(reward=reward)], segments=segs)


def test_infrastructure_failures_are_masked_and_neutral_in_their_group(qwen_tokenizer):
    generator = AgentGymGenerator(VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer), ENV_ID)
    episodes = [_trajectory("a", "t", 1.0, "ENV_DONE"), _trajectory("b", "t", 0.0, "MAX_STEPS"),
                _trajectory("c", "t", 0.0, "POLICY_ERROR"), _trajectory("d", "u", 0.0, "ENV_ERROR")]
    out = generator.to_output(episodes)
    check_generator_output(out, 4, step_wise=False)
    assert out["loss_masks"] == [[1, 0, 1], [1, 0, 1], [0, 0, 0], [0, 0, 0]]
    assert out["rollout_logprobs"][2:] == [[0.0] * 3] * 2  # logprobs 0 where masked, as everywhere
    assert out["stop_reasons"] == ["stop", "stop", "abort", "abort"]
    assert out["rewards"] == [1.0, 0.0, 0.5, 0.0]  # c carries t's mean: a and b keep their baseline
    assert out["trajectory_ids"] == [TrajectoryKey("t", 0), TrajectoryKey("t", 1), TrajectoryKey("t", 2),
                                     TrajectoryKey("u", 0)]
    assert out["rollout_metrics"]["agent_gym/masked_episodes"] == 2.0
    assert out["rollout_metrics"]["agent_gym/mean_reward"] == 0.5


def test_split_reward_and_last_segment_mode(qwen_tokenizer):
    policy = VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer)
    episodes = [_trajectory("a", "t", 1.0, "ENV_DONE", segments=3), _trajectory("b", "t", 0.0, "TRUNCATION")]
    rows = AgentGymGenerator(policy, ENV_ID, reward_assignment="split").to_output(episodes)
    check_generator_output(rows, 2, step_wise=True)
    assert rows["rewards"] == pytest.approx([1 / 3] * 3 + [0.0])
    assert rows["is_last_step"] == [False, False, True, True]
    assert rows["stop_reasons"] == ["stop", "stop", "stop", "length"]
    last = AgentGymGenerator(policy, ENV_ID, multi_segment="last").to_output(episodes)
    check_generator_output(last, 2, step_wise=False)
    assert last["rewards"] == [1.0, 0.0] and last["is_last_step"] == [True, True]
    assert [m["segment_index"] for m in last["env_metrics"]] == [2, 0]


def test_server_down_and_rejected_task_give_masked_rows_never_a_hang(qwen_tokenizer):
    policy = VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer, SamplingParams(max_tokens=8, top_k=-1),
                        client_options={"max_retries": 0, "timeout": 2.0})
    generator = AgentGymGenerator(policy, ENV_ID, max_steps=2)
    batch = {"prompts": [[{"role": "user", "content": "q"}]] * 3, "env_classes": [ENV_ID] * 3,
             "env_extras": [{}, {}, {"task": {"id": "bad"}}], "sampling_params": None, "trajectory_ids": None}
    out = run(generator, batch)
    check_generator_output(out, 3, step_wise=False)
    assert [m["status"] for m in out["env_metrics"]] == ["POLICY_ERROR", "POLICY_ERROR", "ENV_ERROR"]
    assert all(set(mask) == {0} for mask in out["loss_masks"])
    assert out["stop_reasons"] == ["abort"] * 3
    assert len({m["rollout_id"] for m in out["env_metrics"]}) == 3  # the rejected task gets an id of its own
    errors = [m["error"] for m in out["env_metrics"]]
    assert "127.0.0.1:9" in errors[0] and "question" in errors[2]  # the reason travels with the masked row


def test_bad_batches_and_arguments_are_clear_errors(qwen_tokenizer):
    policy = VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer)
    with pytest.raises(ConfigError, match="env_id"):
        AgentGymGenerator(policy, "agent_gym/Nope-v0")
    with pytest.raises(ValueError, match="multi_segment"):
        AgentGymGenerator(policy, ENV_ID, multi_segment="first")
    with pytest.raises(ValueError, match="reward_assignment"):
        AgentGymGenerator(policy, ENV_ID, reward_assignment="mean")
    with pytest.raises(TypeError, match="samples_per_task"):
        AgentGymGenerator(policy, ENV_ID, seed=1, samples_per_task=2)
    with pytest.raises(TypeError):
        AgentGymGenerator(policy, ENV_ID, n_paralel=2)
    generator = AgentGymGenerator(policy)
    prompt = [{"role": "user", "content": "q"}]
    with pytest.raises(ConfigError, match="agent_gym/Nope-v0"):
        run(generator, {"prompts": [prompt], "env_classes": ["agent_gym/Nope-v0"], "env_extras": [{}]})
    with pytest.raises(ValueError, match="as many"):
        run(generator, {"prompts": [prompt] * 2, "env_classes": [ENV_ID], "env_extras": [{}, {}]})
    same = [TrajectoryID("x", 0), TrajectoryID("x", 1)]
    with pytest.raises(ValueError, match="different tasks"):
        run(generator, {"prompts": [prompt] * 2, "env_classes": [ENV_ID] * 2, "trajectory_ids": same,
                        "env_extras": [{"task": {"id": "1"}}, {"task": {"id": "2"}}]})
    with pytest.raises(ValueError, match="JSON"):
        run(generator, {"prompts": [prompt], "env_classes": [ENV_ID], "env_extras": [{"task": "{not json"}]})


def test_stop_reasons_of_statuses():
    assert [stop_reason(s) for s in ("ENV_DONE", "MAX_STEPS", "TRUNCATION", "PROMPT_TRUNCATION", "TIMEOUT",
                                     "ENV_ERROR", "POLICY_ERROR")] == ["stop", "stop", "length", "length", "abort",
                                                                       "abort", "abort"]


# ---------------------------------------------------------------------------------------------- env adapter


@pytest.fixture(scope="module")
def skyrl_gym():
    return pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (pip install 'agent-gym[skyrl]')")


def test_env_runs_under_skyrl_gym_api_with_the_oracle(skyrl_gym, tasks):
    assert register(ENV_ID) == ENV_ID
    assert ENV_ID in register_all()
    env = skyrl_gym.make(ENV_ID, env_config={}, extras={"task": tasks[0], "max_turns": 6})
    assert isinstance(env, skyrl_gym.envs.base_text_env.BaseTextEnv) and env.spec.id == ENV_ID
    chat, meta = env.init([{"role": "user", "content": "the dataset prompt, not used"}])
    assert [m["role"] for m in chat] == ["system", "user"] and meta["task_id"] == tasks[0]["id"]
    assert "<tool_call>" in chat[0]["content"]  # tools described in the prompt: SkyRL renders no tool schemas
    total, out = 0.0, {"done": False}
    for _ in range(6):
        out = env.step(env.env.unwrapped.oracle_action())
        total += out["reward"]
        assert all(m["role"] == "tool" for m in out["observations"])
        if out["done"]:
            break
    assert out["done"] and out["metadata"]["status"] == "ENV_DONE" and out["metadata"]["res_reward"] > 0
    assert env.get_metrics() == {"turns": env.turns, "reward": pytest.approx(total)}
    env.close()


def test_env_ends_at_max_turns_and_takes_its_config(skyrl_gym, tasks):
    register(ENV_ID)
    env = skyrl_gym.make(ENV_ID, env_config={"env_kwargs": {"max_tool_calls_per_step": 2}},
                         extras={"task": json.dumps(tasks[1]), "max_turns": 2})
    env.init([])
    first = env.step("I am not sure.")
    assert not first["done"] and first["observations"] and first["observations"][0]["role"] == "user"
    second = env.step("Still thinking.")
    assert second["done"] and second["metadata"]["status"] == "MAX_STEPS"
    assert env.env.unwrapped.max_tool_calls_per_step == 2


def test_env_bad_input_is_a_clear_error(skyrl_gym):
    with pytest.raises(ConfigError, match="env_id"):
        register("agent_gym/Nope-v0")
    register(ENV_ID)
    with pytest.raises(ConfigError, match="already registered"):
        register(ENV_ID, max_tool_calls_per_step=3)
    env = skyrl_gym.make(ENV_ID, env_config={}, extras={"task": {"id": "bad"}, "max_turns": 2})
    with pytest.raises(ValueError, match="question"):
        env.init([])
