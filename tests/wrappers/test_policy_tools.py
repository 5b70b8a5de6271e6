"""TrajectoryWrapper carries tool sets that change during an episode to the policy's next turns."""

from __future__ import annotations

import pytest
from tools_fixtures import add

from agent_gym.env.core import AgentEnv
from agent_gym.wrappers import TrajectoryWrapper

TASKS = [{"id": "t0", "question": "What is 1 + 2?", "ground_truth": "3"}]


def call(name: str, arguments: str = "{}") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


class ChangingToolsEnv(AgentEnv):
    """``unlock`` adds ``add``; ``lock`` removes every tool; ``noop`` changes nothing."""

    def __init__(self, tools_in_prompt: bool = False) -> None:
        super().__init__(tasks=TASKS, tools=[self.unlock, self.noop, self.lock], max_steps=8,
                         tools_in_prompt=tools_in_prompt)

    def unlock(self) -> str:
        """Make the add tool available.

        Returns:
            A confirmation.
        """
        self.set_episode_tools([self.unlock, self.noop, self.lock, add])
        return "add is now available"

    def noop(self) -> str:
        """Do nothing.

        Returns:
            A constant.
        """
        return "nothing happened"

    def lock(self) -> str:
        """Remove every tool.

        Returns:
            A confirmation.
        """
        self.set_episode_tools([])
        return "no tools left"


def names(tools):
    return None if tools is None else [t["function"]["name"] for t in tools]


def test_every_step_info_carries_the_current_policy_tools():
    env = TrajectoryWrapper(ChangingToolsEnv())
    _, info = env.reset(seed=0)
    assert names(info["policy_tools"]) == ["unlock", "noop", "lock"]

    _, _, _, _, info = env.step(call("noop"))
    assert names(info["policy_tools"]) == ["unlock", "noop", "lock"] and "tools" not in info

    _, _, _, _, info = env.step(call("unlock"))
    assert info["tool_calls"][0]["ok"]
    assert names(info["tools"]) == ["unlock", "noop", "lock", "add"]
    assert info["policy_tools"] == info["tools"]

    _, _, _, _, info = env.step(call("add", '{"a": 1, "b": 2}'))
    assert info["tool_calls"][0]["ok"] and "tools" not in info
    assert names(info["policy_tools"]) == ["unlock", "noop", "lock", "add"]

    _, _, _, _, info = env.step(call("lock"))
    assert info["policy_tools"] == []  # removed explicitly: not None, which a policy reads as "unchanged"

    _, _, terminated, _, info = env.step("<answer>3</answer>")
    assert terminated and info["policy_tools"] == []
    # The recorded steps keep the env's info only.
    assert all("policy_tools" not in step.info for step in info["trajectory"].steps)

    # A new episode starts again from the env's first tools.
    _, info = env.reset(seed=1)
    assert names(info["policy_tools"]) == ["unlock", "noop", "lock"]
    _, _, _, _, info = env.step(call("noop"))
    assert names(info["policy_tools"]) == ["unlock", "noop", "lock"]


def test_tools_in_prompt_keeps_policy_tools_none():
    env = TrajectoryWrapper(ChangingToolsEnv(tools_in_prompt=True))
    _, info = env.reset(seed=0)
    assert info["policy_tools"] is None
    _, _, _, _, info = env.step(call("unlock"))
    assert info["tools"] == [] and info["policy_tools"] is None
    _, _, _, _, info = env.step(call("add", '{"a": 1, "b": 2}'))
    assert info["tool_calls"][0]["ok"] and info["policy_tools"] is None


def test_retokenized_turns_are_rendered_with_the_new_tools(qwen_tokenizer):
    env = TrajectoryWrapper(ChangingToolsEnv(), tokenizer=qwen_tokenizer)
    _, info = env.reset(seed=0)
    first_tools = info["policy_tools"]
    obs, _, _, _, info = env.step(call("unlock"))
    new_tools = info["policy_tools"]
    obs, _, _, _, info = env.step(call("add", '{"a": 1, "b": 2}'))
    obs, _, _, _, info = env.step(call("lock"))
    _, _, terminated, _, info = env.step("<answer>3</answer>")
    assert terminated
    traj = info["trajectory"]
    steps = traj.steps

    def rendered(step, tools):
        return qwen_tokenizer.apply_chat_template(
            step.chat_completions, tools=tools, tokenize=False, add_generation_prompt=True
        )

    # The system message of Qwen's template lists the tools: a change of tools re-renders the
    # prompt, which no longer extends the previous one, so the next turn starts a segment.
    assert [s.first_step for s in traj.segments] == [0, 1, 3]
    assert [s.info["new_segment"] for s in steps] == [False, True, False, True]
    assert qwen_tokenizer.decode(traj.segments[0].prompt_tokens) == rendered(steps[0], first_tools)
    assert qwen_tokenizer.decode(traj.segments[1].prompt_tokens) == rendered(steps[1], new_tools)
    assert "add" in qwen_tokenizer.decode(traj.segments[1].prompt_tokens)
    # After the tools were removed, the prompt has no tool section at all.
    assert qwen_tokenizer.decode(traj.segments[2].prompt_tokens) == rendered(steps[3], None)
    assert "<tools>" not in qwen_tokenizer.decode(traj.segments[2].prompt_tokens)


@pytest.mark.parametrize("tools_in_prompt", [False, True])
def test_unchanged_tools_keep_one_segment(qwen_tokenizer, tools_in_prompt):
    env = TrajectoryWrapper(ChangingToolsEnv(tools_in_prompt=tools_in_prompt), tokenizer=qwen_tokenizer)
    env.reset(seed=0)
    env.step(call("noop"))
    env.step(call("noop"))
    *_, info = env.step("<answer>3</answer>")
    assert len(info["trajectory"].segments) == 1
