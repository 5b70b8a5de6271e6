"""Web-v0 under a RolloutStream: each env is told its next group's task, so its resets take pages started ahead."""

from __future__ import annotations

from web_helpers import requires_browser, task

from agent_gym.envs.web import WebEnv
from agent_gym.rollout import RolloutStream
from agent_gym.types import EpisodeStatus

pytestmark = requires_browser

FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'


class FinishPolicy:
    """Ends every episode at its first turn."""

    async def aact(self, obs, session_id=None, tools=None):
        return FINISH

    def close_session(self, session_id):
        return None


def test_groups_of_given_tasks_in_a_stream_are_started_hits(pool):
    tasks = [task(page, seed) for page, seed in (("click-button", 1), ("enter-text", 2), ("click-button", 3),
                                                   ("choose-list", 0))]
    envs: list[WebEnv] = []

    def make_env() -> WebEnv:
        env = WebEnv(tasks, pool=pool, max_steps=2)
        envs.append(env)
        return env

    before = pool.stats()
    with RolloutStream(make_env, FinishPolicy(), tasks, samples_per_task=2, concurrency=2) as stream:
        groups = list(stream)
    after = pool.stats()
    assert sorted(g.task["id"] for g in groups) == sorted(t["id"] for t in tasks)
    assert all(t.status == EpisodeStatus.ENV_DONE for g in groups for t in g.trajectories)
    assert len(envs) == 2
    resets = 2 * len(tasks)
    # every reset but each env's first took the page its env was told of, started ahead (none without hints:
    # each group's task is another than the env's last)
    assert after["resets_started"] - before["resets_started"] == resets - len(envs)
    assert sum(env.reset_stats["started"] for env in envs) == resets - len(envs)
    assert after["contexts"] == 0
