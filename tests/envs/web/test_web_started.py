"""Tasks started ahead: the next episode's problem started, and its first snapshot read, before its reset.

Only a reset whose start is exactly the one prepared takes such a page; it then shows what a reset that opened
its own context shows, and the page's clock counts from the reset. Any other reset closes it (seeded and
given-task resets: test_web_predicted.py).
"""

from __future__ import annotations

import copy
import os
import signal
import time

import pytest
from gymnasium.utils import seeding
from web_helpers import requires_browser, task

from agent_gym.envs.web import WebEnv
from agent_gym.envs.web.miniwob import SOLVABLE_PAGES

pytestmark = requires_browser

FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'
TASKS = [task(page, seed) for page in SOLVABLE_PAGES for seed in (0, 1)]


@pytest.fixture(scope="module")
def cold(pool):
    env = WebEnv(TASKS, pool=pool, prepare_next=False)
    yield env
    env.close()


def _ready(env: WebEnv) -> None:
    """Wait until the prepared context (and the task started in it, if any) is ready."""
    assert env.worker is not None and env._preparer._next is not None
    env.worker.wait(env._preparer._next.future, timeout=60)


def _started(env: WebEnv) -> bool:
    prepared = env._preparer._next
    return prepared is not None and prepared.started


def _next_draw(env: WebEnv) -> dict:
    return TASKS[int(copy.deepcopy(env.np_random).integers(len(TASKS)))]


def test_a_started_reset_shows_what_a_cold_one_shows_and_the_page_pays(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    try:
        env.reset(seed=11)
        assert _started(env)  # after a seeded draw: the generator's next draw, exact for reset()
        cold.reset(seed=11)
        paid: dict[str, list[float]] = {}
        for i in range(60):
            obs, info = env.reset()
            if i < 8:  # the same draw on an env that opens a context and starts the task at every reset
                cold_obs, cold_info = cold.reset()
                assert obs == cold_obs and info == cold_info
            assert env.prepared_reset and env.started_reset and _started(env)
            while True:  # the oracle on the page started ahead: every reward path as on a fresh page
                _, _, terminated, truncated, step_info = env.step(env.oracle_action())
                if terminated or truncated:
                    break
            if env.started_reset:
                paid.setdefault(info["task"]["page"], []).append(step_info["web"]["raw_reward"])
            if len(paid) == len(SOLVABLE_PAGES):
                break
        assert sorted(paid) == sorted(SOLVABLE_PAGES)
        assert all(reward == 1.0 for rewards in paid.values() for reward in rewards), paid
        stats = env.reset_stats
        assert stats["started"] == stats["resets"] - 1  # all but the seeded reset
        assert pool.stats()["resets_started"] >= stats["started"]
    finally:
        env.close()


@pytest.mark.parametrize("how", ["seed", "task", "another draw", "page ended"])
def test_a_started_page_serves_only_its_start(pool, cold, how):
    env = WebEnv(TASKS, pool=pool)
    try:
        env.reset(seed=3)
        env.reset()
        env.step(FINISH)
        _ready(env)
        assert _started(env)
        started = env._preparer._next.session
        assert started.first_snapshot and started.instruction
        colds = env.reset_counts["cold"]
        if how == "seed":  # a seed that draws another task than the one started
            predicted = TASKS.index(_next_draw(env))
            seed = next(s for s in range(10_000) if seeding.np_random(s)[0].integers(len(TASKS)) != predicted)
            obs, info = env.reset(seed=seed)
            cold_obs, cold_info = cold.reset(seed=seed)
            assert info["task"] != TASKS[predicted]
        elif how == "task":  # another instance of the page started: only the page is the same
            predicted = _next_draw(env)
            other = next(t for t in TASKS if t["page"] == predicted["page"] and t != predicted)
            obs, info = env.reset(seed=5, options={"task": other})
            cold_obs, cold_info = cold.reset(seed=5, options={"task": other})
        elif how == "another draw":
            predicted = _next_draw(env)
            while _next_draw(env) == predicted:  # the generator used meanwhile: the reset draws another task
                env.np_random.integers(len(TASKS))
            drawn = _next_draw(env)
            obs, info = env.reset()
            assert info["task"] == drawn
            cold_obs, cold_info = cold.reset(options={"task": drawn})
            info, cold_info = {**info, "episode_id": ""}, {**cold_info, "episode_id": ""}
        else:  # the page ended its task by itself before the reset
            env.worker.call(started.page.evaluate, "() => core.endEpisode(1, false, 'test')")
            env.worker.call(started.settle)
            assert started.reports
            obs, info = env.reset()
            cold_obs, cold_info = obs, info
        assert not env.started_reset and not env.prepared_reset and env.reset_counts["cold"] == colds + 1
        assert started.context is None  # the started page was closed, never shown to this episode
        assert env.session is not started and env.session.reports == []
        assert obs == cold_obs and info == cold_info
        worker = env.worker
    finally:
        env.close()
    assert worker.contexts == set() and worker.prepared == set()


def test_the_clock_of_a_page_started_ahead_counts_from_the_reset(pool):
    env = WebEnv(TASKS, pool=pool)
    try:
        env.reset(seed=1)
        env.reset()
        _ready(env)
        started = env._preparer._next.session
        read_clock = "() => [core.ept0, core.EP_TIMER !== null, Date.now()]"
        started_at, running, _ = env.worker.call(started.page.evaluate, read_clock)
        assert running
        time.sleep(1.2)
        before_reset = env.worker.call(started.page.evaluate, "() => Date.now()")
        assert before_reset - started_at >= 1000
        env.reset()
        assert env.started_reset and env.session is started
        ept0, running, _ = env.worker.call(started.page.evaluate, read_clock)
        assert running and ept0 >= before_reset  # restarted at the take, before this evaluate ran
        # a page that ended its episode keeps its clock stopped: the restart leaves it alone
        env.worker.call(started.page.evaluate, "() => core.endEpisode(1, false, 'test')")
        env.worker.call(started.restart_clock)
        assert env.worker.call(started.page.evaluate, read_clock)[1] is False
    finally:
        env.close()


def test_a_crash_while_a_start_ahead_is_pending(pool, cold):
    env = WebEnv(TASKS, pool=pool, browser_timeout=5.0)
    try:
        env.reset(seed=2)
        env.reset()
        assert _started(env)  # (its start may be running now)
        dead, replaced = env.worker, pool.stats()["replaced"]
        drawn = _next_draw(env)
        for pid in dead.browser_pids()[1:]:  # the browser's processes (the driver's children)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        obs, info = env.reset()  # retried on a new browser, the task opened there
        assert env.worker is not dead and not env.prepared_reset and info["task"] == drawn
        assert pool.stats()["replaced"] == replaced + 1 and dead.contexts == set()
        cold_obs, _ = cold.reset(options={"task": drawn})
        assert obs == cold_obs
        env.step(FINISH)
        env.reset()  # the new browser's started page
        assert env.started_reset
        worker = env.worker
    finally:
        env.close()
    assert worker.contexts == set() and worker.prepared == set()
