"""The ``delegate`` subagent tool: lineage, limits, failures, and token-exactness against a real server."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.export import to_slime_samples
from agent_gym.parsers import ParsedResponse, ToolCall
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.subagents import DelegateWrapper, SubagentSpec
from agent_gym.types import Segment, Step
from agent_gym.wrappers.trajectory import TrajectoryWrapper
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

TASK = {"id": "t-1", "question": "What is 2 + 3?", "ground_truth": "5"}
DELEGATE = '<tool_call>{"name": "delegate", "arguments": {"task": "add 2 and 3"}}</tool_call>'


class ScriptedPolicy:
    """Answers by session: the parent delegates (``delegations`` times) then answers; subagents answer,
    raise or hang as told."""

    def __init__(self, *, delegations: int = 1, subagent: str = "answer") -> None:
        self.delegations, self.subagent = delegations, subagent
        self.calls: dict[str, int] = {}
        self.closed: list[str] = []
        self.release = threading.Event()

    def act(self, messages, *, session_id, tools=None):
        turn = self.calls[session_id] = self.calls.get(session_id, 0) + 1
        if "/" not in session_id:  # the parent
            return DELEGATE if turn <= self.delegations else "<answer>5</answer>"
        if self.subagent == "raise":
            raise RuntimeError("subagent policy broke")
        if self.subagent == "hang":
            self.release.wait(30)
        if session_id.count("/") == 1 and "delegate" in str(tools):  # a subagent that may delegate further
            return DELEGATE if turn == 1 else "<answer>five</answer>"
        return "<answer>five</answer>"

    def close_session(self, session_id):
        self.closed.append(session_id)


def play(env, policy, expect_tool=None):
    """Step a wrapped env with ``policy`` to the end; the last observation and the trajectory."""
    obs, info = env.reset(options={"task": TASK, "episode_id": "ep"})
    tools = info["policy_tools"]
    if expect_tool is not None:
        assert expect_tool in [t["function"]["name"] for t in tools]
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, session_id="ep", tools=tools))
        tools = info["policy_tools"]
        if terminated or truncated:
            return obs, info["trajectory"]


def run_episode(policy, **spec):
    return play(TrajectoryWrapper(DelegateWrapper(ToolUseEnv(tasks=[TASK]), policy, **spec)), policy, "delegate")


def tool_messages(obs):
    return [m["content"] for m in obs if m["role"] == "tool"]


def test_the_subagent_answer_is_the_tool_output_and_limits_hold():
    policy = ScriptedPolicy(delegations=3)
    obs, trajectory = run_episode(policy, role="helper", max_count=2)
    assert tool_messages(obs) == ["five", "five", "Error: delegate: at most 2 subagents per episode"]
    assert trajectory.status == "ENV_DONE" and trajectory.trajectory_reward > 0
    assert sorted(policy.closed) == ["ep/helper-1", "ep/helper-2"]


def test_depth_limit():
    nested = ScriptedPolicy(delegations=1)
    obs, _ = run_episode(nested, role="helper", max_depth=2)
    # the subagent (depth 1) delegated once more to a grand-subagent (depth 2), which may not delegate
    assert set(nested.calls) == {"ep", "ep/helper-1", "ep/helper-1/helper-1"}
    assert tool_messages(obs) == ["five"]
    flat = ScriptedPolicy(delegations=1)
    run_episode(flat, role="helper", max_depth=1)
    assert set(flat.calls) == {"ep", "ep/helper-1"}


@pytest.mark.parametrize("mode, expected", [("raise", "POLICY_ERROR"), ("hang", "TIMEOUT")])
def test_a_failing_or_hanging_subagent_is_an_error_observation(mode, expected):
    policy = ScriptedPolicy(subagent=mode)
    started = time.perf_counter()
    try:
        obs, trajectory = run_episode(policy, role="helper", timeout=1.0)
    finally:
        policy.release.set()
    (message,) = tool_messages(obs)
    assert message.startswith("Error: subagent 'helper' ended with " + expected), message
    assert trajectory.status == "ENV_DONE"  # the parent went on and answered
    assert trajectory.steps[0].info["tool_calls"][0]["error"]
    assert time.perf_counter() - started < 25  # the hang did not hold the parent until the policy returned


def test_the_builder_resolves_lineage_of_nested_agents():
    builder = TrajectoryBuilder("ep", role="main")
    builder.assembler.add_turn(0, [1, 2], [3], [-0.5])
    grandchild = Segment([7], [8], [1], [-0.1], role="b")
    child = [Segment([4], [5], [1], [-0.2], role="a"),
             Segment([6], [9], [1], [-0.3], role="b", parent_segment=0, spawn_step=0, agent_index=1)]
    builder.add_child(child, spawn_step=0)
    builder.add_child([grandchild], spawned=False)
    builder.set_role_rewards({"main": 1.0, "b": 0.25})
    builder.steps.append(Step(reward=1.0, done=True))
    segments = builder.build("ENV_DONE", conversation=[]).segments
    assert [(s.role, s.parent_segment, s.spawn_step, s.role_reward) for s in segments] == [
        ("main", -1, -1, 1.0), ("a", 0, 0, None), ("b", 1, 0, 0.25), ("b", -1, -1, 0.25)]
    assert [s.agent_index for s in segments] == [0, 1, 2, 3]  # each agent its own index


# ---------------------------------------------------------------------------------------------- real server
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=8, logprobs=0, seed=3,
                          stop_token_ids=list(range(0, 151643, 3)))


class FirstTurnDelegates:
    """The parent's format for the random tiny model: its first message delegates, its next one answers."""

    def parse(self, text):
        if not getattr(self, "delegated", False):
            self.delegated = True
            return ParsedResponse(text=text, tool_calls=[ToolCall("delegate", {"task": "look it up"}, raw=text)],
                                  content=text)
        return ParsedResponse(text=text, answer=text.strip() or "x", content=text)


class AnswerAll:
    """The subagent's format: any message is its answer."""

    def parse(self, text):
        return ParsedResponse(text=text, answer=f"found: {text}", content=text)


def test_a_delegating_episode_is_token_exact(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING, api="vllm_generate")
    spec = SubagentSpec(role="investigator", system_prompt="Investigate.", parser=AnswerAll(), timeout=120)

    def make_env():
        return DelegateWrapper(ToolUseEnv(tasks=[TASK], parser=FirstTurnDelegates(), max_steps=3), policy, spec)

    before = len(httpx.get(f"http://{reference_server}/debug/token_answers", timeout=30).json())
    try:
        (trajectory,) = collect(make_env, policy, num_episodes=1, seed=0, progress=False)
    finally:
        policy.close()
    sent = httpx.get(f"http://{reference_server}/debug/token_answers", timeout=30).json()[before:]
    assert trajectory.status == "ENV_DONE", trajectory.steps[-1].info
    parent, child = trajectory.segments
    assert (parent.role, parent.parent_segment, parent.spawn_step) == ("", -1, -1)
    assert (child.role, child.parent_segment, child.spawn_step) == ("investigator", 0, 0)

    def sampled(segment):
        ids = segment.response_tokens.tolist()
        return [t for t, m in zip(ids, segment.response_masks.tolist(), strict=True) if m]

    # the server's answers: the parent's first turn, the subagent's turn, the parent's second turn
    server_ids = [e["answer"]["choices"][0]["token_ids"] for e in sent]
    assert len(server_ids) == 3
    assert sampled(parent) == server_ids[0] + server_ids[2]
    assert sampled(child) == server_ids[1]
    # the subagent's answer reaches the parent as observation ids (mask 0) of the parent's segment
    child_ids = server_ids[1][:-1] if server_ids[1][-1] in SAMPLING.stop_token_ids else server_ids[1]
    answer = "found: " + qwen_tokenizer.decode(child_ids)
    (tool_message,) = [m["content"] for m in trajectory.chat_completions if m["role"] == "tool"]
    assert tool_message == answer
    observed = [t for t, m in zip(parent.response_tokens.tolist(), parent.response_masks.tolist(), strict=True)
                if not m]
    assert answer in qwen_tokenizer.decode(observed)
    assert len({s["rollout_id"] for s in to_slime_samples([trajectory])}) == 1
