"""Prepared contexts: the next episode's context and page, opened while the last one ends.

A reset that fits starts on them and sees nothing of an earlier episode; one that does not closes them;
they are closed with the env and die with a crashed or hung browser.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from web_helpers import play_oracle, requires_browser, task

from agent_gym.envs.web import WebEnv

pytestmark = requires_browser

FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'
LEAVE_TRACES = """() => {
  localStorage.setItem('trace', 'local'); sessionStorage.setItem('trace', 'session');
  document.cookie = 'trace=cookie; max-age=3600'; window.traceGlobal = 1;
  const marker = document.createElement('div'); marker.id = 'trace-marker'; document.body.appendChild(marker);
}"""
READ_TRACES = """() => [localStorage.getItem('trace'), sessionStorage.getItem('trace'), document.cookie,
  typeof window.traceGlobal, document.getElementById('trace-marker') !== null, history.length]"""


def _episode_contexts(env: WebEnv) -> int:
    """The env's open contexts that are not prepared ones, once the ended episodes' background closes are done."""
    assert env.worker is not None
    deadline = time.monotonic() + 30
    while len(env.worker.contexts - env.worker.prepared) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(env.worker.contexts - env.worker.prepared)


def test_a_prepared_reset_sees_nothing_of_the_episode_before(pool):
    env = WebEnv(pool=pool)
    cold = WebEnv(pool=pool, prepare_next=False)
    try:
        env.reset(options={"task": task("click-test", 0)})
        assert env._preparer.pending  # the next episode's context is being prepared while this one runs
        before = env.session
        env.worker.call(before.page.evaluate, LEAVE_TRACES)
        _, _, terminated, _, _ = env.step(FINISH)
        assert terminated
        env.worker.call(before.page.evaluate, LEAVE_TRACES)  # traces left after the episode's end too
        # the same task again (the next sample of a group): its page was prepared, the task started on it
        obs, info = env.reset(options={"task": task("click-test", 0)})
        assert env.prepared_reset and "prepared" not in info.get("web", {})  # (the info depends on the seed alone)
        assert env.session is not before and env.session.context is not before.context
        traces = env.worker.call(env.session.page.evaluate, READ_TRACES)
        assert traces[:5] == [None, None, "", "undefined", False]
        assert env.worker.call(env.session.context.cookies) == []
        assert len(env.session.context.pages) == 1 and env.session.reports == []
        # what a reset that opens its own context sees: the same page state and first observation
        cold_obs, cold_info = cold.reset(options={"task": task("click-test", 0)})
        assert not cold.prepared_reset and obs == cold_obs and cold_info.keys() == info.keys()
        assert cold.worker.call(cold.session.page.evaluate, READ_TRACES) == traces
        env.step(FINISH)
        _, info = play_oracle(env, {"task": task("click-test", 0)})
        assert env.prepared_reset and info["web"]["raw_reward"] == 1.0
        assert env.reset_stats["prepared"] >= 2 and 0 < env.reset_stats["hit_rate"] <= 1
        assert _episode_contexts(env) == 1  # the ended episodes' contexts are closed
    finally:
        env.close()
        cold.close()


def test_a_miss_closes_the_prepared_context_and_loads_the_page(pool):
    env = WebEnv(pool=pool)
    try:
        play_oracle(env, {"task": task("click-button", 0)})
        prepared_for = env._preparer._next.session
        counts = dict(env.reset_counts)
        _, info = play_oracle(env, {"task": task("enter-text", 0)})  # another page: a miss
        assert not env.prepared_reset and env.reset_counts["cold"] == counts["cold"] + 1
        assert prepared_for.context is None and info["web"]["raw_reward"] == 1.0
        # a synthetic site: a fresh context with an empty page is prepared; the next site task starts on it
        env.reset(options={"task": {"id": "shop/1", "question": "q", "ground_truth": "", "source": "site",
                                    "site": "shop", "seed": 1}})
        env.step(FINISH)
        _, info = play_oracle(env, {"task": {"id": "settings/2", "question": "q", "ground_truth": "", "source": "site",
                                             "site": "settings", "seed": 2}})
        assert env.prepared_reset and info["res_reward"] > 0
        # a drawn task: the next draw is prepared
        env.reset(seed=3)
        env.step(FINISH)
        env.reset()
        assert env.prepared_reset
        env.worker.wait(env._preparer._next.future, timeout=60)
        assert _episode_contexts(env) == 1 and len(env.worker.prepared) == 1
    finally:
        env.close()
    stats = pool.stats()
    assert stats["contexts"] == 0 and stats["resets_prepared"] > 0 and stats["resets_cold"] > 0


def test_prepared_contexts_are_closed_with_the_env(pool):
    env = WebEnv(pool=pool)  # a new env prepares its first task's page at once
    worker = env.worker
    assert env._preparer.pending  # (its context may still be opening: closing the env waits for it)
    env.close()
    assert worker.contexts == set() and worker.dead is None and pool.stats()["contexts"] == 0
    env = WebEnv(pool=pool)
    env.reset(options={"task": task("click-test", 0)})
    env.step(FINISH)
    worker = env.worker
    assert env._preparer.pending
    worker.wait(env._preparer._next.future, timeout=60)
    assert len(worker.contexts) == 2 and len(worker.prepared) == 1  # the ended episode's and the prepared one
    env.close()  # every context closed first, so the browser is kept for the next env
    assert worker.contexts == set() and worker.dead is None and pool.stats()["contexts"] == 0


def _browser_pids(env: WebEnv) -> list[int]:
    assert env.worker is not None
    return env.worker.browser_pids()


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("fault", ["crash", "hang"])
def test_a_prepared_context_goes_with_a_failed_browser(pool, fault):
    env = WebEnv(pool=pool, browser_timeout=3.0)
    try:
        env.reset(options={"task": task("click-test", 0)})
        env.step(FINISH)
        assert env._preparer.pending
        dead, pids, replaced = env.worker, _browser_pids(env), pool.stats()["replaced"]
        for pid in pids[1:]:  # the browser's processes (the driver's children)
            try:
                os.kill(pid, signal.SIGKILL if fault == "crash" else signal.SIGSTOP)
            except ProcessLookupError:
                continue
        obs, info = env.reset(options={"task": task("click-test", 1)})  # retried on a new browser
        assert env.worker is not dead and not env.prepared_reset and "[ref=e" in obs[-1]["content"]
        assert pool.stats()["replaced"] == replaced + 1 and dead.contexts == set()
        deadline = time.monotonic() + 20
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pids)
        assert json.loads(json.dumps(env.reset_stats))["resets"] == 2
    finally:
        env.close()
    assert pool.stats()["contexts"] == 0
