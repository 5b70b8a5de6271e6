"""Tools that change during an episode reach the policy on the following turns."""

from __future__ import annotations

import json

from rollout_fakes import ScriptedPolicy, add, make_tasks

from agent_gym.env.core import AgentEnv
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus


class UnlockEnv(AgentEnv):
    """Starts with one tool, ``unlock``; calling it adds ``add`` for the rest of the episode."""

    def __init__(self) -> None:
        super().__init__(tasks=make_tasks(2), tools=[self.unlock], max_steps=4)

    def unlock(self) -> str:
        """Make the add tool available.

        Returns:
            A confirmation.
        """
        self.set_episode_tools([self.unlock, add])
        return "add is now available"


class ToolRecordingPolicy(ScriptedPolicy):
    """Turn 1 calls ``unlock``, turn 2 ``add``, turn 3 answers; records the tool names it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.tools_seen: dict[str, list[list[str] | None]] = {}

    async def aact(self, messages, *, session_id, tools=None):
        seen = self.tools_seen.setdefault(session_id, [])
        seen.append(None if tools is None else [t["function"]["name"] for t in tools])
        if len(seen) == 1:
            return '<tool_call>\n{"name": "unlock", "arguments": {}}\n</tool_call>'
        return await super().aact(
            [messages[0], messages[1]] if len(seen) == 2 else messages, session_id=session_id, tools=tools
        )


def test_tools_that_change_mid_episode_reach_the_policy():
    policy = ToolRecordingPolicy()
    result = collect(UnlockEnv, policy, tasks=make_tasks(2), n_parallel=2, progress=False)
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 2
    assert all(t.trajectory_reward > 1.0 for t in result)
    for turns in policy.tools_seen.values():
        assert turns[0] == ["unlock"]
        assert turns[1] == ["unlock", "add"] and turns[2] == ["unlock", "add"]
    calls = [json.loads(s.action) for s in result[0].steps[:2]]
    assert [c["name"] for c in calls] == ["unlock", "add"]
