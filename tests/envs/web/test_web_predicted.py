"""Seeded and given-task resets on pages started ahead: the prediction, its hits and its misses.

A page's start depends on its task (page and instance seed) alone, so a reset with a seed or a given task takes
a page started for exactly its task, and shows and does what a reset that opened its own context shows and
does. A wrong prediction's page is closed, never shown, and no context is left behind.
"""

from __future__ import annotations

from typing import Any

import psutil
import pytest
from web_helpers import requires_browser, task

from agent_gym.envs.web import WebEnv
from agent_gym.envs.web.miniwob import SOLVABLE_PAGES

pytestmark = requires_browser

TASKS = [task(page, seed) for page in SOLVABLE_PAGES for seed in (0, 1, 2)]


@pytest.fixture(scope="module")
def cold(pool):
    env = WebEnv(TASKS, pool=pool, prepare_next=False, max_steps=6)
    yield env
    env.close()


def _ready(env: WebEnv) -> None:
    """Wait until the prepared context (and the task started in it, if any) is ready."""
    assert env.worker is not None and env._preparer._next is not None
    env.worker.wait(env._preparer._next.future, timeout=60)


def _same_episode(env: WebEnv, cold: WebEnv, seed: int | None, options: dict[str, Any] | None) -> None:
    """``env``'s reset equals ``cold``'s, and so does every oracle step after it, to the page's reward."""
    obs, info = env.reset(seed=seed, options=options)
    cold_obs, cold_info = cold.reset(seed=seed, options=options)
    assert obs == cold_obs and info == cold_info
    while True:
        action = cold.oracle_action()
        step = env.step(action)
        cold_step = cold.step(action)
        assert step[:4] == cold_step[:4]
        assert step[4].get("web") == cold_step[4].get("web")
        if step[2] or step[3]:
            assert step[4]["web"]["raw_reward"] == 1.0
            return


def test_the_same_seed_again_hits_from_the_third_reset(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    try:
        for i in range(4):  # a group of samples drawn from one seed
            _ready(env)
            _same_episode(env, cold, 7, None)
            assert env.started_reset == (i >= 2)  # the second is guessed as the generator's next draw
        assert env.reset_stats["started"] == 2
    finally:
        env.close()


def test_the_same_task_again_hits_with_any_seed(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    try:
        for i, page in enumerate(SOLVABLE_PAGES):  # a group per page, each sample with its own reset seed
            given = {"task": task(page, i % 3)}
            for sample in range(3):
                _ready(env)
                _same_episode(env, cold, 100 * i + sample, given)
                assert env.started_reset == (sample > 0), (page, sample)
    finally:
        env.close()


def test_a_hinted_reset_hits_and_a_wrong_hint_is_closed_never_shown(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    plan: list[tuple[int | None, dict[str, Any] | None]] = [
        (3, {"task": TASKS[5]}), (4, None), (None, {"task_index": 9}), (8, {"task": TASKS[20]}), (2, None)]
    try:
        for i, (seed, options) in enumerate(plan):
            if i + 1 < len(plan):
                env.expect_reset(*plan[i + 1])  # used by this reset's preparation: the next episode's task
            _ready(env)
            if seed is None:  # an unseeded reset draws from the env's generator: compare the task given instead
                obs, info = env.reset(seed=seed, options=options)
                cold_obs, _ = cold.reset(seed=5, options={"task": info["task"]})
                assert obs == cold_obs
            else:
                _same_episode(env, cold, seed, options)
            assert env.started_reset == (i > 0), i
            if env.episode_running:
                env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
        env.expect_reset(seed=1, options={"task": TASKS[0]})
        env.reset(seed=1, options={"task": TASKS[1]})  # this reset's page: not hinted, the hint is for the next
        _ready(env)
        hinted = env._preparer._next.session
        assert env._preparer.started_ahead and hinted.spec.setup_arg == TASKS[0]["seed"]
        obs, info = env.reset(seed=9, options={"task": TASKS[3]})  # not the hinted task
        assert not env.started_reset and hinted.context is None and env.session is not hinted
        assert obs == cold.reset(seed=9, options={"task": TASKS[3]})[0]
        env.expect_reset(seed=1, options={"task": {"page": "no such page!"}})  # an invalid hint is ignored
        env.reset(seed=9, options={"task": TASKS[3]})
        assert env.started_reset  # the same task again
        worker = env.worker
    finally:
        env.close()
    assert worker.contexts == set() and worker.prepared == set()


def test_a_page_only_guess_prepares_the_page_until_a_guess_is_exact_again(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    same_page = [t for t in TASKS if t["page"] == SOLVABLE_PAGES[0]]
    kinds = []
    try:
        for given in (same_page[0], same_page[0], same_page[1], same_page[2], same_page[0], same_page[0],
                      same_page[0]):
            _ready(env)
            _same_episode(env, cold, 0, {"task": given})
            kinds.append("started" if env.started_reset else "loaded" if env.prepared_reset else "cold")
        # 2: the same task (exact); 3, 4: other instances (the started pages closed); 5: after two of them, the
        # page only, loaded, is taken; 6: exact again, on the loaded page; 7: started again
        assert kinds[1:] == ["started", "cold", "cold", "loaded", "loaded", "started"]
        worker = env.worker
    finally:
        env.close()
    assert worker.contexts == set() and worker.prepared == set()


def test_a_browser_killed_before_a_started_hit_is_found_at_the_reset(pool, cold):
    env = WebEnv(TASKS, pool=pool, max_steps=6)
    try:
        env.reset(seed=1, options={"task": TASKS[4]})
        env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
        _ready(env)
        assert env._preparer.started_ahead  # the same task again, started and read: the reset needs no browser call
        dead, replaced = env.worker, pool.stats()["replaced"]
        procs = [psutil.Process(pid) for pid in dead.browser_pids()[1:]]
        for proc in procs:  # a crash between two episodes: the browser's processes are gone before the reset
            proc.kill()
        psutil.wait_procs(procs, timeout=10)
        obs, info = env.reset(seed=2, options={"task": TASKS[4]})  # found dead (asked of the OS), retried anew
        assert env.worker is not dead and not env.prepared_reset and pool.stats()["replaced"] == replaced + 1
        assert obs == cold.reset(seed=2, options={"task": TASKS[4]})[0] and dead.contexts == set()
        worker = env.worker
    finally:
        env.close()
    assert worker.contexts == set() and worker.prepared == set()
