"""Long tails: an episode over its turn/time budget is parked (resumed later) or ended with a status."""

from __future__ import annotations

import pytest
from rollout_fakes import ScriptedPolicy, make_add_env, make_tasks

from agent_gym.errors import AgentGymError, ConfigError
from agent_gym.rollout import collect
from agent_gym.rollout.long_tail import LongTail, LongTailGate
from agent_gym.types import EpisodeStatus


class _OrderedPolicy(ScriptedPolicy):
    """The scripted policy, recording (session, turn) in the order the turns are taken."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[tuple[str, int]] = []
        self._count: dict[str, int] = {}

    async def aact(self, messages, *, session_id, tools=None):
        self._count[session_id] = self._count.get(session_id, 0) + 1
        self.turns.append((session_id, self._count[session_id]))
        return await super().aact(messages, session_id=session_id, tools=tools)


def test_the_budget_is_checked():
    with pytest.raises(AgentGymError, match="max_turns, max_seconds"):
        LongTail()
    with pytest.raises(ConfigError, match="action"):
        LongTail(max_turns=2, action="drop")
    with pytest.raises(ConfigError, match="parking needs"):
        collect(make_add_env, ScriptedPolicy(), num_episodes=1, backend="ray", long_tail=LongTail(max_turns=1))
    with pytest.raises(TypeError, match="long_tail"):
        collect(make_add_env, ScriptedPolicy(), num_episodes=1, long_tail=3)


def test_an_episode_over_its_budget_ends_with_timeout_when_asked():
    trajectories = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), n_parallel=2, progress=False,
                           long_tail=LongTail(max_turns=1, action="end"))
    for trajectory in trajectories:
        assert trajectory.status == EpisodeStatus.TIMEOUT
        assert len(trajectory.steps) == 1  # the tool call ran; the answer turn never started
        assert "long tail" in trajectory.steps[-1].info["error"]


def test_parked_episodes_give_their_slot_away_and_resume_where_they_stopped():
    policy = _OrderedPolicy()
    tasks = make_tasks(3)
    trajectories = collect(make_add_env, policy, tasks=tasks, n_parallel=1, progress=False,
                           long_tail=LongTail(max_turns=1, action="park"))
    # one slot: each episode took its first turn, parked, and the next one started in its place;
    # once none was left to start, the parked ones took their second turns
    assert [turn for _, turn in policy.turns] == [1, 1, 1, 2, 2, 2]
    for task, trajectory in zip(tasks, trajectories, strict=True):
        assert trajectory.status == EpisodeStatus.ENV_DONE and trajectory.steps[-1].reward == 1.0
        assert trajectory.task["id"] == task["id"] and len(trajectory.steps) == 2
        assert trajectory.steps[1].info["long_tail"]["resumed"] is True
        assert trajectory.steps[1].info["long_tail"]["parked_s"] >= 0
        assert "long_tail" not in trajectory.steps[0].info


def test_episodes_within_their_budget_never_park():
    policy = _OrderedPolicy()
    gate = LongTailGate(LongTail(max_turns=5, action="park"))
    trajectories = collect(make_add_env, policy, tasks=make_tasks(2), n_parallel=2, progress=False, long_tail=gate)
    assert gate.parks == 0 and all(t.status == EpisodeStatus.ENV_DONE for t in trajectories)
    assert all("long_tail" not in step.info for t in trajectories for step in t.steps)
