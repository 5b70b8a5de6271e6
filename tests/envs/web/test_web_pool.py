"""The browser pool under faults: crashed and hung browsers, cancelled episodes, process exit; nothing leaks."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from web_helpers import browser_processes, requires_browser, task

from agent_gym.envs.web import BrowserPool, WebEnv
from agent_gym.rollout import collect, collect_async
from agent_gym.types import EpisodeStatus

pytestmark = requires_browser


@pytest.fixture(scope="module")
def pool():
    pool = BrowserPool(max_idle=4)
    yield pool
    pool.close()


def _signal_browser(env: WebEnv, sig: int) -> None:
    """Send ``sig`` to the env's browser processes (the driver's children), as a crash or a hang would.

    A SIGKILL returns once the processes are gone (a crash that happened: a reset that takes a page started
    ahead asks the OS whether the browser runs, and a process still dying of the signal runs).
    """
    assert env.worker is not None
    procs = []
    for pid in env.worker.browser_pids()[1:]:
        try:
            os.kill(pid, sig)
            procs.append(psutil.Process(pid))
        except (ProcessLookupError, psutil.Error):
            continue
    if sig == signal.SIGKILL:
        psutil.wait_procs(procs, timeout=10)


def _click_first_button(text: str) -> str:
    match = re.search(r'button "[^"]*" \[ref=(\w+)\]', text)
    name, arguments = ("click", {"ref": match.group(1)}) if match else ("finish", {})
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_crashed_browser_ends_the_episode_env_error_and_is_replaced(pool):
    env = WebEnv(pool=pool)
    try:
        obs, _ = env.reset(options={"task": task("click-test", 0)})
        dead_worker, replaced = env.worker, pool.stats()["replaced"]
        _signal_browser(env, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(_click_first_button(obs[-1]["content"]))
        assert truncated and info["status"] == EpisodeStatus.ENV_ERROR and info["end_reason"] == "browser_crashed"
        assert reward <= 0 and info["res_reward"] == 0.0 and "browser_error" in info["web"]
        obs, _ = env.reset(options={"task": task("click-test", 0)})
        assert env.worker is not dead_worker and pool.stats()["replaced"] == replaced + 1
        _, _, terminated, _, info = env.step(_click_first_button(obs[-1]["content"]))
        assert terminated and info["res_reward"] > 0
    finally:
        env.close()


def test_hung_browser_ends_the_episode_env_error_and_is_killed(pool):
    env = WebEnv(pool=pool, browser_timeout=2.0)
    try:
        obs, _ = env.reset(options={"task": task("click-test", 1)})
        hung = env.worker.browser_pids()
        _signal_browser(env, signal.SIGSTOP)
        _, _, _, truncated, info = env.step(_click_first_button(obs[-1]["content"]))
        assert truncated and info["status"] == EpisodeStatus.ENV_ERROR and info["end_reason"] == "browser_hung"
        obs, _ = env.reset(options={"task": task("click-test", 1)})  # releases (kills) the hung browser
        assert not [pid for pid in hung if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    finally:
        env.close()


def test_browser_crash_during_reset_is_retried_on_a_new_browser(pool):
    env = WebEnv(pool=pool)
    try:
        env.reset(options={"task": task("click-test", 2)})
        _signal_browser(env, signal.SIGKILL)
        obs, info = env.reset(options={"task": task("click-test", 2)})
        assert "[ref=e" in obs[-1]["content"] and env.worker.dead is None
    finally:
        env.close()


class FaultyWebEnv(WebEnv):
    """Web-v0 with browser faults injected by task seed: 3 crash before a step, 5 before a reset, 6 hang."""

    def reset(self, *, seed=None, options=None):
        if options and options.get("task", {}).get("seed", 0) % 10 == 5 and self.worker is not None:
            _signal_browser(self, signal.SIGKILL)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        fault = {3: signal.SIGKILL, 6: signal.SIGSTOP}.get(self.task["seed"] % 10) if self.task else None
        if fault is not None and self.step_count == 0 and self.worker is not None:
            _signal_browser(self, fault)
        return super().step(action)


class ClickPolicy:
    """Clicks the first button it sees."""

    async def aact(self, obs, session_id=None, tools=None):
        return _click_first_button(obs[-1]["content"])

    def close_session(self, session_id):
        return None


class StallingPolicy(ClickPolicy):
    """Never answers; sets ``stalled`` once ``count`` episodes wait on it."""

    def __init__(self, count: int) -> None:
        self.count, self.waiting, self.stalled = count, 0, asyncio.Event()

    async def aact(self, obs, session_id=None, tools=None):
        self.waiting += 1
        if self.waiting == self.count:
            self.stalled.set()
        await asyncio.sleep(3600)


def _wait_for_no_contexts(pool: BrowserPool) -> dict:
    deadline = time.monotonic() + 60  # an env cancelled mid-call closes once its call returns
    while pool.stats()["contexts"] and time.monotonic() < deadline:
        time.sleep(0.2)
    return pool.stats()


@pytest.mark.timeout(300)
def test_faulty_and_cancelled_episodes_all_return_and_leave_no_browser():
    """Crashes before a step (seed 3 mod 10) and a reset (5), hangs (6), then a run cancelled in flight."""
    others = {p.pid for p in browser_processes()}  # the module's pool's
    pool = BrowserPool(max_idle=4)
    tasks = [task("click-test", seed) for seed in range(10)]
    try:
        result = collect(lambda: FaultyWebEnv(pool=pool, browser_timeout=3.0, max_steps=3), ClickPolicy(),
                         tasks=tasks, n_parallel=4, progress=False)
        assert len(result) == 10
        for trajectory, spec in zip(result, tasks, strict=True):
            expected = {3: EpisodeStatus.ENV_ERROR, 6: EpisodeStatus.ENV_ERROR}.get(spec["seed"] % 10,
                                                                                   EpisodeStatus.ENV_DONE)
            assert trajectory.status == expected, (spec["id"], trajectory.status)
            if expected == EpisodeStatus.ENV_DONE:
                assert trajectory.trajectory_reward > 0
        stats = _wait_for_no_contexts(pool)
        assert stats["contexts"] == 0 and stats["replaced"] >= 2  # the crash and the hang at least

        async def cancelled_run() -> None:
            policy = StallingPolicy(4)
            run = asyncio.ensure_future(collect_async(lambda: WebEnv(pool=pool, max_steps=3), policy,
                                                      tasks=tasks[:4], n_parallel=4, progress=False))
            await asyncio.wait_for(policy.stalled.wait(), 120)
            deadline = time.monotonic() + 60  # each env also opens its next episode's context in the background
            while pool.stats()["prepared"] < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            stats = pool.stats()  # four episodes open, each in its own context, and four prepared ones
            assert stats["contexts"] == 8 and stats["prepared"] == 4
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run

        asyncio.run(cancelled_run())
        assert _wait_for_no_contexts(pool)["contexts"] == 0
    finally:
        pool.close()
    assert pool.stats() == {**pool.stats(), "browsers": 0, "contexts": 0, "prepared": 0, "processes": 0}
    deadline = time.monotonic() + 10
    while [p for p in browser_processes() if p.pid not in others] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in browser_processes() if p.pid not in others]


EXIT_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from agent_gym.envs.web import WebEnv
    env = WebEnv()
    env.reset(options={"task": {"id": "t", "question": "q", "ground_truth": "", "page": "click-test", "seed": 0}})
    print(json.dumps(env.worker.browser_pids()), flush=True)
    if sys.argv[1] == "hang":
        time.sleep(600)
""")


@pytest.mark.parametrize("how", ["exit", "killed"])
def test_no_browser_outlives_its_process(how):
    proc = subprocess.Popen([sys.executable, "-c", EXIT_SCRIPT, "exit" if how == "exit" else "hang"],
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(proc.stdout.readline())
        assert len(pids) >= 2
        if how == "killed":
            proc.kill()
        proc.wait(60)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20

    def alive() -> list[int]:
        return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive()
