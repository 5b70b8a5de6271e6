"""How a subagent keeps its time limit (inline or on a thread), what the parent's step records about it,
and the ``delegate`` tool in the parent's tools and system message."""

from __future__ import annotations

import threading
import time

import pytest

from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.errors import ConfigError
from agent_gym.policy.base import AsyncPolicyBase
from agent_gym.subagents import DelegateWrapper, SubagentSpec
from agent_gym.tools import FunctionTool
from agent_gym.types import PolicyOutput
from agent_gym.wrappers.trajectory import TrajectoryWrapper

from .test_delegate import play, tool_messages

TASK = {"id": "t-1", "question": "What is 2 + 3?", "ground_truth": "5"}
DELEGATE = '<tool_call>{"name": "delegate", "arguments": {"task": "add 2 and 3"}}</tool_call>'
HANG = '<tool_call>{"name": "stuck", "arguments": {}}</tool_call>'
CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'


class TokenScript:
    """A token policy without a model: per session, a script of texts; each turn's prompt ids extend the
    session's previous prompt and sampled ids (so each agent is one segment)."""

    def __init__(self, parent, child, *, pause=0.0):
        self.script = {"parent": parent, "child": child}
        self.pause = pause
        self.ids: dict[str, list[int]] = {}
        self.turns: dict[str, int] = {}
        self.seen: dict[str, list] = {}

    def act(self, messages, *, session_id, tools=None):
        kind = "child" if "/" in session_id else "parent"
        turn = self.turns[session_id] = self.turns.get(session_id, 0) + 1
        self.seen.setdefault(session_id, []).append(list(messages))
        if kind == "child" and self.pause:
            time.sleep(self.pause)
        text = self.script[kind][min(turn, len(self.script[kind])) - 1]
        prompt = self.ids.get(session_id, [10, 11, 12]) + [7, 7]
        sampled = [100 + turn, 200 + turn, 2]
        self.ids[session_id] = prompt + sampled
        return PolicyOutput(text=text, prompt_token_ids=prompt, token_ids=sampled, logprobs=[-0.5] * 3,
                            sampling={"logprobs_mode": "raw_logprobs"})

    def close_session(self, session_id):
        self.ids.pop(session_id, None)


run_episode = play  # the env is built by each test here


class AsyncScript(AsyncPolicyBase):
    async def aact(self, messages, *, session_id, tools=None):
        return "<answer>5</answer>"

    def close_session(self, session_id):
        pass


def test_auto_runs_inline_for_agent_gym_policies_and_on_a_thread_for_others():
    spec = SubagentSpec()
    assert spec.deadline_for(AsyncScript()) == "inline"
    assert spec.deadline_for(TokenScript([], [])) == "thread"
    assert SubagentSpec(deadline="thread").deadline_for(AsyncScript()) == "thread"
    with pytest.raises(ConfigError):
        SubagentSpec(deadline="soon")


@pytest.mark.parametrize("deadline", ["inline", "thread"])
def test_child_segments_index_the_sub_episode_steps_and_the_parent_step_lists_the_run(deadline):
    policy = TokenScript([DELEGATE, "<answer>5</answer>"], [CALC, "<answer>five</answer>"])
    calculator = ToolUseEnv(tasks=[TASK]).tools["calculator"]
    env = TrajectoryWrapper(DelegateWrapper(ToolUseEnv(tasks=[TASK]), policy, role="helper", tools=[calculator],
                                            deadline=deadline))
    obs, trajectory = run_episode(env, policy)
    assert tool_messages(obs) == ["five"]
    parent, child = trajectory.segments
    # the parent's steps are its own: the delegate call is step 0, the answer step 1
    assert len(trajectory.steps) == 2 and (parent.first_step, parent.last_step) == (0, 1)
    # the subagent's segment indexes the sub-episode's two steps, spawned by the parent's step 0
    assert (child.role, child.parent_segment, child.spawn_step) == ("helper", 0, 0)
    assert (child.first_step, child.last_step) == (0, 1)
    assert child.response_masks.tolist() == [1, 1, 1, 0, 0, 1, 1, 1]
    (run,) = trajectory.steps[0].info["subagents"]
    assert run == {"role": "helper", "session_id": "ep/helper-1", "status": "ENV_DONE", "steps": 2, "segments": 1,
                   "sampled_tokens": 6}
    assert "subagents" not in trajectory.steps[1].info


def test_inline_the_deadline_is_checked_between_turns():
    # each subagent turn takes 0.4 s and calls a tool; after the limit (1 s) no new turn starts
    policy = TokenScript([DELEGATE, "<answer>5</answer>"], [CALC], pause=0.4)
    calculator = ToolUseEnv(tasks=[TASK]).tools["calculator"]
    env = TrajectoryWrapper(DelegateWrapper(ToolUseEnv(tasks=[TASK]), policy, role="helper", tools=[calculator],
                                            deadline="inline", timeout=1.0, max_steps=50))
    obs, trajectory = run_episode(env, policy)
    (message,) = tool_messages(obs)
    assert message.startswith("Error: subagent 'helper' ended with TIMEOUT"), message
    assert 2 <= policy.turns["ep/helper-1"] < 50
    (run,) = trajectory.steps[0].info["subagents"]
    assert run["status"] == "TIMEOUT" and run["steps"] == policy.turns["ep/helper-1"]
    child = trajectory.segments[1]  # the turns it took are kept
    assert child.last_step == run["steps"] - 1 and trajectory.status == "ENV_DONE"


def test_inline_a_hanging_tool_is_bounded_by_its_own_time_limit():
    release = threading.Event()

    def stuck() -> str:
        """A tool that does not return until released."""
        release.wait(60)
        return "late"

    policy = TokenScript([DELEGATE, "<answer>5</answer>"], [HANG, "<answer>five</answer>"])
    env = TrajectoryWrapper(DelegateWrapper(ToolUseEnv(tasks=[TASK]), policy, role="helper",
                                            tools=[FunctionTool(stuck, time_limit=0.5)], deadline="inline",
                                            timeout=120))
    started = time.perf_counter()
    try:
        obs, trajectory = run_episode(env, policy)
    finally:
        release.set()
    assert time.perf_counter() - started < 30
    assert tool_messages(obs) == ["five"]  # the subagent went on after the tool's time-limit error and answered
    second_prompt = policy.seen["ep/helper-1"][1]
    assert "did not finish within its 0.5 s time limit" in second_prompt[-1]["content"]
    assert trajectory.steps[0].info["subagents"][0]["status"] == "ENV_DONE"


class OwnEpisodeTools(ToolUseEnv):
    """An env whose episodes get tools of their own (the hook replaces the env's tools)."""

    def episode_tools(self, task):
        def lookup_key(key: str) -> str:
            """Look a key up."""
            return key.upper()

        return [lookup_key]


@pytest.mark.parametrize("env_type", [ToolUseEnv, OwnEpisodeTools])
def test_the_delegate_tool_is_in_the_tools_and_in_the_system_message(env_type):
    policy = TokenScript(["<answer>5</answer>"], [])
    described = TrajectoryWrapper(DelegateWrapper(env_type(tasks=[TASK], tools_in_prompt=True), policy, role="helper"))
    obs, info = described.reset(options={"task": TASK})
    assert info["policy_tools"] is None
    system = obs[0]["content"]
    assert "delegate" in system and "Hand a self-contained task to a helper agent" in system
    assert ("lookup_key" in system) == (env_type is OwnEpisodeTools)

    listed = TrajectoryWrapper(DelegateWrapper(env_type(tasks=[TASK]), policy, role="helper"))
    obs, info = listed.reset(options={"task": TASK})
    names = [t["function"]["name"] for t in info["policy_tools"]]
    assert names[-1] == "delegate" and names.count("delegate") == 1
    assert ("lookup_key" in names) == (env_type is OwnEpisodeTools)
    assert "delegate" not in obs[0]["content"]
    listed.reset(options={"task": TASK})  # a second episode: still once
    assert [t["function"]["name"] for t in listed.env.unwrapped.tool_schemas].count("delegate") == 1


def test_add_env_tools_adds_to_every_episode_once():
    def extra() -> str:
        """An extra tool."""
        return "x"

    env = ToolUseEnv(tasks=[TASK], tools_in_prompt=True)
    env.add_env_tools([extra])
    assert "extra" in env.system_prompt
    obs, _ = env.reset(options={"task": TASK})
    assert "An extra tool." in obs[0]["content"] and "extra" in env.episode_tools_by_name
    with pytest.raises(ValueError):
        env.add_env_tools([extra])
