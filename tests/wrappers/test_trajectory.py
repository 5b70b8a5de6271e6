import gymnasium as gym
import pytest
import torch

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.memory import MemoryConfig
from agent_gym.types import METRIC_KEYS, EpisodeStatus, PolicyOutput, StepTrajectory
from agent_gym.wrappers import TrajectoryWrapper

ENV_ID = "agent_gym/ToolUse-v0"


def run_oracle(env, seed=0, think=None):
    obs, info = env.reset(seed=seed)
    while True:
        action = env.unwrapped.oracle_action()
        if think is not None:
            action = f"<think>{think}</think>{action}"
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info


def test_oracle_episode_records_every_seed_field():
    env = TrajectoryWrapper(gym.make(ENV_ID), gamma=1.0)
    info = run_oracle(env, seed=3, think="plan")
    traj = info["trajectory"]
    assert isinstance(traj, StepTrajectory)
    assert traj.status == EpisodeStatus.ENV_DONE.value == info["status"]
    assert set(traj.metrics) == set(METRIC_KEYS)
    assert traj.metrics["steps"] == len(traj.steps) >= 2
    assert traj.metrics["res_reward"] == 1.0
    assert traj.trajectory_reward == pytest.approx(sum(s.reward for s in traj.steps))
    assert traj.trajectory_reward == pytest.approx(traj.metrics["res_reward"] + traj.metrics["toolcall_reward"])
    assert traj.steps[-1].done and not any(s.done for s in traj.steps[:-1])
    # mc_return with gamma 1: return-to-go
    running = 0.0
    for step in reversed(traj.steps):
        running += step.reward
        assert step.mc_return == pytest.approx(running)
    first = traj.steps[0]
    assert first.observation == traj.task["question"]
    assert first.thought == "plan"
    assert first.action is not None and '"name"' in first.action
    assert first.model_response.startswith("<think>plan</think>")
    assert first.chat_completions[-1] == {"role": "user", "content": traj.task["question"]}
    # Each step's context is the previous context + the previous reply + what it caused.
    for prev, step in zip(traj.steps, traj.steps[1:], strict=False):
        assert step.chat_completions[: len(prev.chat_completions)] == prev.chat_completions
        reply = {"role": "assistant", "content": prev.model_response}
        assert step.chat_completions[len(prev.chat_completions)] == reply
        caused = step.chat_completions[len(prev.chat_completions) + 1 :]
        assert caused and step.observation == "\n".join(m["content"] for m in caused)
    assert traj.steps[-1].action is None
    assert traj.chat_completions[-1] == {"role": "assistant", "content": traj.steps[-1].model_response}
    assert traj.rollout_id == env.rollout_id != ""
    # No tokenizer, no token ids: empty tensors, nothing claimed.
    assert traj.response_tokens.numel() == 0 and not traj.retokenized


def test_gamma_discounting():
    env = TrajectoryWrapper(gym.make(ENV_ID), gamma=0.5)
    traj = run_oracle(env, seed=1)["trajectory"]
    g = 0.0
    for step in reversed(traj.steps):
        g = step.reward + 0.5 * g
        assert step.mc_return == pytest.approx(g)


def test_reset_info_and_policy_tools():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    obs, info = env.reset(seed=0)
    assert isinstance(obs, tuple) and obs[-1]["role"] == "user"
    assert info["episode_id"] == env.rollout_id
    assert info["policy_tools"] == env.unwrapped.tool_schemas
    env2 = TrajectoryWrapper(gym.make(ENV_ID, tools_in_prompt=True))
    _, info2 = env2.reset(seed=0)
    assert info2["policy_tools"] is None


def test_string_actions_with_tokenizer_are_marked_retokenized(qwen_tokenizer):
    env = TrajectoryWrapper(gym.make(ENV_ID), tokenizer=qwen_tokenizer)
    traj = run_oracle(env, seed=2)["trajectory"]
    assert traj.retokenized
    assert len(traj.segments) == 1
    seg = traj.segments[0]
    full = seg.prompt_tokens.tolist() + seg.response_tokens.tolist()
    rendered = qwen_tokenizer.apply_chat_template(
        traj.chat_completions[:-1], tools=env.unwrapped.tool_schemas, tokenize=False, add_generation_prompt=True
    )
    assert qwen_tokenizer.decode(full) == rendered + traj.steps[-1].model_response + "<|im_end|>"
    masked = [t for t, m in zip(seg.response_tokens.tolist(), seg.response_masks.tolist(), strict=True) if m]
    expected = []
    for step in traj.steps:
        expected += qwen_tokenizer.encode(step.model_response, add_special_tokens=False) + [qwen_tokenizer.eos_token_id]
    assert masked == expected


def test_policy_output_tokens_are_used_exactly():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    a = PolicyOutput(text=env.unwrapped.oracle_action(), prompt_token_ids=[1, 2, 3], token_ids=[10, 11],
                     logprobs=[-0.5, -0.25], llm_time=0.5)
    env.step(a)
    b = PolicyOutput(text=env.unwrapped.oracle_action(), prompt_token_ids=[1, 2, 3, 10, 11, 7, 8], token_ids=[12],
                     logprobs=[-1.0], llm_time=0.25)
    _, _, terminated, truncated, info = env.step(b)
    while not (terminated or truncated):
        prev = env.steps[-1].info["num_prompt_tokens"] + env.steps[-1].info["num_sampled_tokens"]
        ids = list(range(1, prev + 1))  # deliberately inconsistent with the prefix: new segment
        _, _, terminated, truncated, info = env.step(
            PolicyOutput(text=env.unwrapped.oracle_action(), prompt_token_ids=ids, token_ids=[99], logprobs=[-2.0])
        )
    traj = info["trajectory"]
    seg = traj.segments[0]
    assert seg.prompt_tokens.tolist() == [1, 2, 3]
    assert seg.response_tokens.tolist()[:5] == [10, 11, 7, 8, 12]
    assert seg.response_masks.tolist()[:5] == [1, 1, 0, 0, 1]
    assert seg.response_logprobs.tolist()[:5] == [-0.5, -0.25, 0.0, 0.0, -1.0]
    assert torch.equal(traj.response_tokens, seg.response_tokens)
    assert traj.metrics["llm_time"] == pytest.approx(0.75)
    assert not traj.retokenized
    if len(traj.steps) > 2:
        assert len(traj.segments) == 2
        assert traj.steps[2].info["new_segment"] is True


def test_finish_without_steps_gives_valid_trajectory():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    traj = env.finish(EpisodeStatus.POLICY_ERROR, error="server down")
    assert traj.status == "POLICY_ERROR"
    assert len(traj.steps) == 1 and traj.steps[0].info["error"] == "server down"
    assert traj.steps[0].done
    assert env.finish("TIMEOUT") is traj  # idempotent once ended


def test_finish_after_steps_keeps_them():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    env.step(env.unwrapped.oracle_action())
    traj = env.finish("TIMEOUT", error="episode timeout")
    assert traj.status == "TIMEOUT" and len(traj.steps) == 1
    assert traj.steps[0].done and traj.steps[0].info["error"] == "episode timeout"
    with pytest.raises(gym.error.ResetNeeded):
        env.step("hello")


def test_max_steps_status():
    env = TrajectoryWrapper(gym.make(ENV_ID, max_steps=2))
    env.reset(seed=0)
    env.step("thinking about it")
    _, _, terminated, truncated, info = env.step("still thinking")
    assert truncated and not terminated
    assert info["trajectory"].status == "MAX_STEPS"


def test_truncated_policy_output_status():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(PolicyOutput(text="<tool_call>{\"na", finish_reason="length"))
    assert truncated
    assert info["trajectory"].status == "TRUNCATION"


def test_step_before_reset_and_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        TrajectoryWrapper(gym.make(ENV_ID), gamma=2.0)
    with pytest.raises(TypeError, match="memory"):
        TrajectoryWrapper(gym.make(ENV_ID), memory=42)
    env = TrajectoryWrapper(gym.make(ENV_ID))
    with pytest.raises(gym.error.ResetNeeded):
        env.step("hi")


def test_memory_view_elides_thinking_and_starts_segment(qwen_tokenizer):
    config = MemoryConfig(simplify_thinking=True, max_prompt_length=100_000)
    env = TrajectoryWrapper(gym.make(ENV_ID), memory=config, tokenizer=qwen_tokenizer)
    info = run_oracle(env, seed=4, think="a long plan")
    traj = info["trajectory"]
    # What the model saw at step 1 has its earlier thought elided.
    seen = traj.steps[1].chat_completions
    assistant = [m for m in seen if m["role"] == "assistant"]
    assert assistant and "Thinking process omitted." in assistant[0]["content"]
    # The full conversation keeps the original thought.
    assert "a long plan" in traj.chat_completions[2]["content"]
    # The rewritten history cannot extend the previous tokens: a new segment per rewrite.
    assert len(traj.segments) >= 2
    assert traj.segments[1].first_step == 1


def test_reward_time_is_measured_outside_info():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    info = run_oracle(env, seed=5)
    assert info["trajectory"].metrics["reward_time"] > 0.0
    assert "reward_time" not in info


def test_steps_use_the_env_parser():
    from agent_gym.parsers import HermesToolCallParser

    parser = HermesToolCallParser(think_tag="reasoning", tool_call_tag="call")
    env = TrajectoryWrapper(gym.make(ENV_ID, parser=parser))
    env.reset(seed=0)
    call = env.unwrapped.oracle_action().replace("tool_call>", "call>")
    _, reward, *_ = env.step(f"<reasoning>look it up</reasoning>{call}")
    step = env.steps[0]
    assert reward > 0
    assert step.thought == "look it up"
    assert step.action is not None and '"name"' in step.action


def test_list_of_calls_in_one_block_is_recorded_once():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    block = (
        '[{"name": "calculator", "arguments": {"expression": "1+1"}}, '
        '{"name": "calculator", "arguments": {"expression": "2+2"}}]'
    )
    env.step(f"<tool_call>{block}</tool_call>")
    assert env.steps[0].action == block


def test_finish_while_a_step_is_running_keeps_the_returned_trajectory():
    import threading

    env = TrajectoryWrapper(gym.make(ENV_ID))
    env.reset(seed=0)
    env.step(env.unwrapped.oracle_action())
    entered, release = threading.Event(), threading.Event()
    inner_step = env.env.step

    def slow_step(action):
        entered.set()
        release.wait(5)
        return inner_step(action)

    env.env.step = slow_step
    worker = threading.Thread(target=env.step, args=(env.unwrapped.oracle_action(),))
    worker.start()
    entered.wait(5)
    traj = env.finish("TIMEOUT", error="too slow")
    before = traj.to_dict()
    release.set()
    worker.join(5)
    assert traj.to_dict() == before
    assert len(traj.steps) == 1 and traj.status == "TIMEOUT"


def test_reset_takes_an_episode_id():
    env = TrajectoryWrapper(gym.make(ENV_ID))
    _, info = env.reset(seed=0, options={"episode_id": "ep-7"})
    assert info["episode_id"] == env.rollout_id == "ep-7"
    with pytest.raises(ValueError, match="episode_id"):
        env.reset(seed=0, options={"episode_id": 3})


def test_segment_boundaries_come_from_the_prompt_ids_only():
    # A policy's new_segment flag is informational: the wrapper's prefix check decides.
    env = TrajectoryWrapper(gym.make(ENV_ID, max_steps=3))
    env.reset(seed=0)
    env.step(PolicyOutput(text="<think>a</think>", prompt_token_ids=[1, 2], token_ids=[3], new_segment=True))
    # Extends [1, 2] + [3] although the policy says "new segment": same segment.
    env.step(PolicyOutput(text="<think>b</think>", prompt_token_ids=[1, 2, 3, 4], token_ids=[5], new_segment=True))
    assert env.steps[1].info["new_segment"] is False
    # Does not extend it although the policy says nothing: a new segment.
    _, _, terminated, truncated, info = env.step(
        PolicyOutput(text=env.unwrapped.oracle_action(), prompt_token_ids=[1, 9], token_ids=[6], new_segment=False)
    )
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
    traj = info["trajectory"]
    assert traj.steps[2].info["new_segment"] is True
    assert [s.prompt_tokens.tolist() for s in traj.segments] == [[1, 2], [1, 9]]
    assert traj.segments[0].response_tokens.tolist() == [3, 4, 5]
    assert (traj.segments[0].first_step, traj.segments[0].last_step, traj.segments[1].first_step) == (0, 1, 2)
