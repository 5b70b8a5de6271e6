"""Web-v0 benchmark: oracles, latency, the pool against a fresh browser, leaks under faults, a model baseline.

Run:  python benchmarks/web.py [--oracle N] [--latency N] [--think S] [--resets N] [--seeded N] [--pause S]
                               [--parallel N [N ...]] [--prep-cpu N] [--stream N] [--leak N] [--baseline N]
                               [--json OUT]

--oracle N    the oracle on N instances of every solvable MiniWoB++ page and every synthetic site
              (success must be 100%), and an empty ``finish`` on each (success must be 0%).
--latency N   N oracle episodes per worker at n_parallel 1 and 16, with prepared contexts and without
              (``prepare_next=False``, every reset opens its context and loads its page): reset p50/p95 (all,
              and those that started on a prepared context apart from those that did not), the hit rate,
              tool-step p50/p95, episodes/s, peak PSS per browser (driver and browser processes); then N
              episodes with the pool (one browser per env, kept) against a fresh browser per episode, side by
              side; and the reset of a kept MiniWoB++ page (``core.startEpisodeReal()`` alone).
--think S     seconds the oracle "thinks" before each action in --latency (a model's turn; 0: back to back,
              so a reset may wait for the rest of its context's preparation).
--resets N    in one process, interleaved (so the machine's load hits all alike): N resets whose task was
              started ahead (``reset()`` drawing from the env's tasks, the draw predicted: no round trip),
              N that start on a prepared context (same page as the episode before, given as the task), N
              that miss it (another page), N on the old path (``prepare_next=False``) and N kept-page
              starts; each reset after a 0.5 s pause, the time a model's last turn takes at least. The first
              three of each kind are left out (the hit env's first two resets of other instances of the same
              page make it prepare that page only, not a task started ahead).
--seeded N    seeded and given-task resets on a kept browser, at n_parallel 1 and 16 (one env and browser per
              thread), N resets per env, each after a 0.5 s pause (a model's last turn): ``group`` resets the same
              task given in ``options`` four times, each with its own seed (a GRPO group), then the next task;
              ``hinted`` resets with a new seed each time (a seeded draw of another task) after telling the env that
              reset one episode ahead (``expect_reset``, what ``collect`` does). Then the same through ``collect``
              without a model (a policy that waits 0.5 s and calls ``finish``): 4 samples per task given, and seeded
              draws (``num_episodes``), at n_parallel 1 and 16, each reset timed inside the env. Reset p50/p95 of
              all, the started hits' share and their p50.
--parallel N [N ...]  the n_parallel values of --seeded and --prep-cpu (default 1 16).
--stream N    N episodes per env through a ``RolloutStream`` (4 samples per given task, concurrency n_parallel, a
              policy that waits --pause and calls ``finish``), without the stream's hints across groups and with them:
              reset p50/p95, the started hits' share.
--prep-cpu N  the CPU seconds one preparation of a next episode costs (a fresh context, the page load, the task's
              start and its first snapshot), N rounds of one preparation per browser at once, at each n_parallel:
              the browsers' processes, the drivers and this process, read with psutil before and after (see
              ``benchmarks/web_prep_cpu.py``); at n_parallel 1 also per stage. Then whether n_parallel of them (and
              their contexts' closes) fit in one model turn (--pause, default 0.5 s) on 2 cores.
--pause S     the pause before each reset in --seeded (default 0.5; at n_parallel 16 a preparation takes longer
              than that on 2 cores, and a reset waits for the rest of it).
--leak N      N episodes through ``collect`` at n_parallel 16, 10% of them with a fault: browser killed before
              a step, browser killed before a reset, browser hung (SIGSTOP), episode cancelled by its timeout.
              Every episode must come back with a status; afterwards 0 contexts and 0 browser processes, and
              this process's RSS is printed every 100 episodes (flat).
--baseline N  the embedded default model (TransformersPolicy, temperature 1) on N test-split tasks: its
              success rate (it was not trained for this env: a baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import threading
import time
from typing import Any

import psutil
from web_prep_cpu import prep_cpu

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.web import BrowserPool, WebEnv
from agent_gym.envs.web.miniwob import SOLVABLE_PAGES, miniwob_tasks
from agent_gym.envs.web.sites import site_tasks
from agent_gym.rollout import RolloutStream, collect
from agent_gym.types import EpisodeStatus


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def play(env: WebEnv, task: dict[str, Any], resets: list[float] | None = None,
         steps: list[float] | None = None, think: float = 0.0,
         prepared: list[bool] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    env.reset(options={"task": task})
    if resets is not None:
        resets.append(time.perf_counter() - started)
    if prepared is not None:
        prepared.append(env.prepared_reset)
    while True:
        action = env.oracle_action()
        time.sleep(think)
        started = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        if steps is not None:
            steps.append(time.perf_counter() - started)
        if terminated or truncated:
            return info


def oracle(n: int) -> dict[str, Any]:
    pool = BrowserPool()
    env = WebEnv(pool=pool, max_steps=10)
    tasks = ([t for t in miniwob_tasks("train") if t["seed"] < n] + [t for t in site_tasks("train") if t["seed"] < n])
    solved, failures, empty_paid = 0, [], 0
    for task in tasks:
        info = play(env, task)
        if info["res_reward"] > 0:
            solved += 1
        else:
            failures.append(task["id"])
        env.reset(options={"task": task})
        _, _, _, _, info = env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
        empty_paid += info["res_reward"] > 0
    env.close()
    pool.close()
    result = {"tasks": len(tasks), "pages": len(SOLVABLE_PAGES), "sites": 3, "oracle_success": solved / len(tasks),
              "empty_finish_success": empty_paid / len(tasks), "failures": failures}
    print(f"oracle: {solved}/{len(tasks)} solved ({len(SOLVABLE_PAGES)} MiniWoB++ pages + 3 sites, {n} instances "
          f"each); empty finish paid {empty_paid}/{len(tasks)}; failures: {failures or 'none'}")
    return result


def _pss(pids: list[int]) -> int:
    """Proportional set size of ``pids`` (shared pages split among their users, so a sum is not inflated)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total


def latency_point(n_parallel: int, episodes: int, prepare: bool = True, think: float = 0.0) -> dict[str, Any]:
    pool = BrowserPool(max_idle=n_parallel)
    envs = [WebEnv(pool=pool, max_steps=10, prepare_next=prepare) for _ in range(n_parallel)]
    tasks = [t for t in miniwob_tasks("train") if t["page"] in ("click-button", "enter-text", "choose-list")]
    resets: list[float] = []
    steps: list[float] = []
    hits: list[bool] = []
    peak: list[int] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        my_resets: list[float] = []
        my_steps: list[float] = []
        my_hits: list[bool] = []
        for i in range(episodes):
            play(envs[index], tasks[(index * episodes + i) % len(tasks)], my_resets, my_steps, think, my_hits)
            if i % 5 == 0:
                worker_pids = envs[index].worker.browser_pids() if envs[index].worker else []
                with lock:
                    peak.append(_pss(worker_pids))
        with lock:
            resets.extend(my_resets)
            steps.extend(my_steps)
            hits.extend(my_hits)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    for env in envs:
        env.close()
    pool.close()
    on_prepared = [r for r, hit in zip(resets, hits, strict=True) if hit]
    opened = [r for r, hit in zip(resets, hits, strict=True) if not hit]
    row = {"n_parallel": n_parallel, "prepare_next": prepare, "think_s": think, "episodes": episodes * n_parallel,
           "reset_p50_ms": pct(resets, 0.5) * 1e3, "reset_p95_ms": pct(resets, 0.95) * 1e3,
           "hit_rate": len(on_prepared) / len(resets), "hit_reset_p50_ms": pct(on_prepared, 0.5) * 1e3,
           "hit_reset_p95_ms": pct(on_prepared, 0.95) * 1e3, "miss_reset_p50_ms": pct(opened, 0.5) * 1e3,
           "miss_reset_p95_ms": pct(opened, 0.95) * 1e3, "step_p50_ms": pct(steps, 0.5) * 1e3,
           "step_p95_ms": pct(steps, 0.95) * 1e3, "episodes_per_s": episodes * n_parallel / wall,
           "peak_pss_per_browser_mb": max(peak) / 2**20 if peak else float("nan")}
    print(f"n_parallel {n_parallel:>2} ({'prepared contexts' if prepare else 'old path'}, think {think:g} s): "
          f"reset p50 {row['reset_p50_ms']:.0f} ms p95 {row['reset_p95_ms']:.0f} ms (hits {len(on_prepared)}/"
          f"{len(resets)}: p50 {row['hit_reset_p50_ms']:.0f} p95 {row['hit_reset_p95_ms']:.0f} ms; others p50 "
          f"{row['miss_reset_p50_ms']:.0f} p95 {row['miss_reset_p95_ms']:.0f} ms), step p50 {row['step_p50_ms']:.0f}"
          f" ms p95 {row['step_p95_ms']:.0f} ms, {row['episodes_per_s']:.2f} episodes/s, peak PSS per browser "
          f"{row['peak_pss_per_browser_mb']:.0f} MiB")
    return row


def reset_compare(n: int, pause: float = 0.5) -> dict[str, Any]:
    """Started hits, prepared hits, misses, the old path and kept-page starts, interleaved in one process."""
    pool = BrowserPool()
    pages = ("click-button", "enter-text")
    tasks = {page: [t for t in miniwob_tasks("train") if t["page"] == page] for page in pages}
    started_env = WebEnv(tasks["click-button"], pool=pool)
    started_env.reset(seed=0)
    hit_env, miss_env = WebEnv(pool=pool), WebEnv(pool=pool)
    old_env = WebEnv(pool=pool, prepare_next=False)
    kept = WebEnv(pool=pool, prepare_next=False)
    kept.reset(options={"task": tasks["click-button"][0]})
    times: dict[str, list[float]] = {"started": [], "hit": [], "miss": [], "old": [], "kept_page": []}
    wrong: list[str] = []
    for i in range(n):
        started_env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
        time.sleep(pause)
        started = time.perf_counter()
        started_env.reset()  # the env's next draw, started ahead
        times["started"].append(time.perf_counter() - started)
        if i > 2 and not started_env.started_reset:
            wrong.append("started")
        for name, env, task in (("hit", hit_env, tasks["click-button"][i % 48]),
                                ("miss", miss_env, tasks[pages[i % 2]][i % 48]),
                                ("old", old_env, tasks["click-button"][i % 48])):
            time.sleep(pause)
            started = time.perf_counter()
            env.reset(options={"task": task})
            times[name].append(time.perf_counter() - started)
            if i > 2 and (env.prepared_reset != (name == "hit") or env.started_reset):
                wrong.append(name)
            env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
        time.sleep(pause)
        started = time.perf_counter()
        kept.worker.call(kept.session.page.evaluate,
                         "(s) => { Math.seedrandom(String(s)); core.startEpisodeReal(); }", i)
        times["kept_page"].append(time.perf_counter() - started)
    for env in (started_env, hit_env, miss_env, old_env, kept):
        env.close()
    pool.close()
    result = {name: {"p50_ms": pct(values[3:], 0.5) * 1e3, "p95_ms": pct(values[3:], 0.95) * 1e3,
                     "n": len(values) - 3} for name, values in times.items()}
    result["unexpected"] = wrong
    print(f"resets in one process ({n - 3} each, {pause:g} s before each): " + "; ".join(
        f"{name} p50 {row['p50_ms']:.1f} ms p95 {row['p95_ms']:.1f} ms" for name, row in result.items()
        if name != "unexpected") + f"; unexpected hit/miss: {wrong or 'none'}")
    return result


def pool_vs_fresh(episodes: int) -> dict[str, Any]:
    tasks = [t for t in miniwob_tasks("train") if t["page"] == "click-button"]
    pool = BrowserPool()
    env = WebEnv(pool=pool)
    started = time.perf_counter()
    for i in range(episodes):
        play(env, tasks[i % len(tasks)])
    kept = (time.perf_counter() - started) / episodes
    env.close()
    pool.close()
    started = time.perf_counter()
    for i in range(episodes):
        fresh_pool = BrowserPool(max_idle=0)
        env = WebEnv(pool=fresh_pool)
        play(env, tasks[i % len(tasks)])
        env.close()
        fresh_pool.close()
    fresh = (time.perf_counter() - started) / episodes
    print(f"per episode: kept browser (pool) {kept * 1e3:.0f} ms, fresh browser each episode {fresh * 1e3:.0f} ms "
          f"({fresh / kept:.1f}x)")
    return {"kept_browser_ms": kept * 1e3, "fresh_browser_ms": fresh * 1e3, "ratio": fresh / kept}


def kept_page_reset(episodes: int) -> dict[str, Any]:
    pool = BrowserPool()
    env = WebEnv(pool=pool)
    env.reset(options={"task": miniwob_tasks("train")[0]})
    page = env.session.page
    times = []
    for seed in range(episodes):
        started = time.perf_counter()
        env.worker.call(page.evaluate, "(s) => { Math.seedrandom(String(s)); core.startEpisodeReal(); }", seed)
        times.append(time.perf_counter() - started)
    env.close()
    pool.close()
    print(f"reset of a kept page (startEpisodeReal only, no fresh context): p50 {pct(times, 0.5) * 1e3:.1f} ms, "
          f"p95 {pct(times, 0.95) * 1e3:.1f} ms")
    return {"p50_ms": pct(times, 0.5) * 1e3, "p95_ms": pct(times, 0.95) * 1e3}


FINISH = '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'


def _kind(env: WebEnv) -> str:
    return "started" if env.started_reset else "prepared" if env.prepared_reset else "cold"


def _summary(name: str, records: list[tuple[float, str, bool]]) -> dict[str, Any]:
    """p50/p95 of all resets, of the started hits, and of the started hits whose preparation was done at the reset."""
    times = [t for t, _, _ in records]
    started = [t for t, kind, _ in records if kind == "started"]
    ready = [t for t, kind, was_ready in records if kind == "started" and was_ready]
    row = {"resets": len(records), "p50_ms": pct(times, 0.5) * 1e3, "p95_ms": pct(times, 0.95) * 1e3,
           "started_share": len(started) / len(records) if records else float("nan"),
           "started_p50_ms": pct(started, 0.5) * 1e3, "cold": sum(kind == "cold" for _, kind, _ in records),
           "ready_started": len(ready), "ready_started_p50_ms": pct(ready, 0.5) * 1e3,
           "ready_started_p95_ms": pct(ready, 0.95) * 1e3}
    print(f"  {name}: {row['resets']} resets, p50 {row['p50_ms']:.1f} ms p95 {row['p95_ms']:.1f} ms; started hits "
          f"{row['started_share']:.0%} (p50 {row['started_p50_ms']:.1f} ms; the {len(ready)} whose preparation was "
          f"done: p50 {row['ready_started_p50_ms']:.1f} ms p95 {row['ready_started_p95_ms']:.1f} ms), "
          f"cold {row['cold']}")
    return row


def seeded_point(n_parallel: int, resets: int, mode: str, pause: float = 0.5) -> dict[str, Any]:
    """``group`` or ``hinted`` resets (see the module's --seeded) on ``n_parallel`` envs, one thread each."""
    pool = BrowserPool(max_idle=n_parallel)
    tasks = [t for t in miniwob_tasks("train") if t["page"] in ("click-button", "enter-text", "choose-list")]
    envs = [WebEnv(tasks, pool=pool, max_steps=4) for _ in range(n_parallel)]
    records: list[tuple[float, str, bool]] = []
    lock = threading.Lock()

    def plan(index: int, i: int) -> tuple[int, dict[str, Any] | None]:
        if mode == "group":  # four samples of a task, each with its own seed
            return 1000 * index + i, {"task": tasks[(index * 7 + i // 4) % len(tasks)]}
        return 1000 * index + i, None  # a seeded draw: another task (most times) at every reset

    def worker(index: int) -> None:
        env, mine = envs[index], []
        for i in range(resets):
            hook = getattr(env, "expect_reset", None)
            if mode == "hinted" and hook is not None:
                hook(*plan(index, i + 1))  # the reset after this one
            time.sleep(pause)
            seed, options = plan(index, i)
            ready = getattr(env, "next_ready", False)
            started = time.perf_counter()
            env.reset(seed=seed, options=options)
            mine.append((time.perf_counter() - started, _kind(env), ready))
            env.step(FINISH)
        with lock:
            records.extend(mine[1:])  # the first reset of an env has nothing prepared for it

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for env in envs:
        env.close()
    pool.close()
    return {"n_parallel": n_parallel, "mode": mode, **_summary(f"{mode}, n_parallel {n_parallel}", records)}


class TimedWebEnv(WebEnv):
    """Records each reset's wall time and kind (started hit, prepared hit, cold) in ``records``."""

    def __init__(self, records: list[tuple[float, str, bool]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.records = records
        self.first = True

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        ready = getattr(self, "next_ready", False)
        started = time.perf_counter()
        result = super().reset(seed=seed, options=options)
        if not self.first:  # the first reset of an env has nothing prepared for it
            self.records.append((time.perf_counter() - started, _kind(self), ready))
        self.first = False
        return result


class ThinkPolicy:
    """Waits ``think`` seconds (a model's turn), then calls ``finish``."""

    def __init__(self, think: float) -> None:
        self.think = think

    async def aact(self, obs: Any, session_id: str | None = None, tools: Any = None) -> str:
        await asyncio.sleep(self.think)
        return FINISH

    def close_session(self, session_id: str) -> None:
        return None


def collect_point(n_parallel: int, episodes: int, given: bool, think: float = 0.5) -> dict[str, Any]:
    """``episodes`` episodes per env through ``collect``: 4 samples of each task given, or seeded draws."""
    pool = BrowserPool(max_idle=n_parallel)
    tasks = [t for t in miniwob_tasks("train") if t["page"] in ("click-button", "enter-text", "choose-list")]
    records: list[tuple[float, str, bool]] = []
    groups = max(1, episodes * n_parallel // 4)
    started = time.perf_counter()
    if given:
        collect(lambda: TimedWebEnv(records, tasks=tasks, pool=pool, max_steps=4), ThinkPolicy(think),
                tasks=[tasks[(7 * g) % len(tasks)] for g in range(groups)], samples_per_task=4,
                n_parallel=n_parallel, progress=False)
    else:
        collect(lambda: TimedWebEnv(records, tasks=tasks, pool=pool, max_steps=4), ThinkPolicy(think),
                num_episodes=episodes * n_parallel, n_parallel=n_parallel, seed=100, progress=False)
    wall = time.perf_counter() - started
    pool.close()
    name = f"collect, {'4 samples per given task' if given else 'seeded draws'}, n_parallel {n_parallel}"
    row = {"n_parallel": n_parallel, "given_tasks": given, "wall_s": wall, **_summary(name, records)}
    return row


def stream_point(n_parallel: int, episodes: int, think: float = 0.5, hints: bool = True) -> dict[str, Any]:
    """``episodes`` episodes per env through a ``RolloutStream`` (concurrency ``n_parallel``), 4 samples per task."""
    pool = BrowserPool(max_idle=n_parallel)
    tasks = [t for t in miniwob_tasks("train") if t["page"] in ("click-button", "enter-text", "choose-list")]
    records: list[tuple[float, str, bool]] = []
    groups = max(1, episodes * n_parallel // 4)
    started = time.perf_counter()
    given = [tasks[(7 * g) % len(tasks)] for g in range(groups)]
    # an iterator is not read ahead: hints within a group only, as before the stream gave hints across groups
    with RolloutStream(lambda: TimedWebEnv(records, tasks=tasks, pool=pool, max_steps=4), ThinkPolicy(think),
                       given if hints else iter(given), samples_per_task=4, concurrency=n_parallel) as stream:
        handed = list(stream)
    wall = time.perf_counter() - started
    pool.close()
    assert len(handed) == groups
    name = f"stream, 4 samples per given task, {'with' if hints else 'without'} hints, n_parallel {n_parallel}"
    return {"n_parallel": n_parallel, "hints": hints, "wall_s": wall, **_summary(name, records)}


def seeded(resets: int, pause: float = 0.5, parallel: tuple[int, ...] = (1, 16)) -> dict[str, Any]:
    print(f"seeded and given-task resets on a kept browser, {pause:g} s before each ({os.getloadavg()[0]:.1f} load "
          "average at the start):")
    out: dict[str, Any] = {"load_start": os.getloadavg(), "pause_s": pause}
    out["direct"] = [seeded_point(n_parallel, resets if n_parallel == 1 else max(4, resets // 4), mode, pause)
                     for n_parallel in parallel for mode in ("group", "hinted")]
    out["collect"] = [collect_point(n_parallel, resets if n_parallel == 1 else max(4, resets // 4), given, pause)
                      for n_parallel in parallel for given in (True, False)]
    out["load_end"] = os.getloadavg()
    print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    return out


class FaultyWebEnv(WebEnv):
    """Faults by task seed: 1 kills the browser before the first step, 3 before the reset, 5 hangs it."""

    def _signal(self, sig: int) -> None:
        """Send ``sig`` to the browser's processes; a SIGKILL (a crash) returns once they are gone."""
        procs = []
        for pid in (self.worker.browser_pids()[1:] if self.worker else []):
            try:
                os.kill(pid, sig)
                procs.append(psutil.Process(pid))
            except (ProcessLookupError, psutil.Error):
                continue
        if sig == signal.SIGKILL:
            psutil.wait_procs(procs, timeout=10)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        if options and options["task"]["seed"] % 40 == 3:
            self._signal(signal.SIGKILL)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        fault = {1: signal.SIGKILL, 5: signal.SIGSTOP}.get(self.task["seed"] % 40) if self.task else None
        if fault is not None and self.step_count == 0:
            self._signal(fault)
        return super().step(action)


class ClickPolicy:
    """Clicks the first button; stalls (cancelled by the episode timeout) on seeds 7 mod 40."""

    async def aact(self, obs: Any, session_id: str | None = None, tools: Any = None) -> str:
        if int((session_id or "x/0-").split("/")[1].split("-")[0]) % 40 == 7:
            await asyncio.sleep(3600)
        match = re.search(r'button "[^"]*" \[ref=(\w+)\]', obs[-1]["content"])
        name, args = ("click", {"ref": match.group(1)}) if match else ("finish", {})
        return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'

    def close_session(self, session_id: str) -> None:
        return None


def leak(episodes: int) -> dict[str, Any]:
    pool = BrowserPool(max_idle=16)
    me = psutil.Process()
    rss: list[float] = []
    statuses: dict[str, int] = {}
    started = time.perf_counter()
    for first in range(0, episodes, 100):
        tasks = [{"id": f"click-test/{s}", "question": "q", "ground_truth": "", "source": "miniwob",
                  "page": "click-test", "seed": s} for s in range(first, min(episodes, first + 100))]
        result = collect(lambda: FaultyWebEnv(pool=pool, browser_timeout=5.0, max_steps=3), ClickPolicy(),
                         tasks=tasks, n_parallel=16, episode_timeout=20.0, progress=False)
        assert len(result) == len(tasks)
        for trajectory in result:
            statuses[str(trajectory.status)] = statuses.get(str(trajectory.status), 0) + 1
        rss.append(me.memory_info().rss / 2**20)
        print(f"  {first + len(tasks)} episodes: statuses {statuses}, pool {pool.stats()}, RSS {rss[-1]:.0f} MiB")
    wall = time.perf_counter() - started
    deadline = time.monotonic() + 60
    while pool.stats()["contexts"] and time.monotonic() < deadline:
        time.sleep(0.5)
    before_close = pool.stats()
    pool.close()
    time.sleep(1)
    left = [p for p in me.children(recursive=True) if "chrom" in " ".join(p.cmdline()) or "run-driver" in
            " ".join(p.cmdline())]
    result = {"episodes": episodes, "statuses": statuses, "wall_s": wall, "contexts_after": before_close["contexts"],
              "browsers_replaced": before_close["replaced"], "browser_processes_left": len(left),
              "rss_mb_every_100": rss}
    print(f"leak: {episodes} episodes in {wall:.0f} s, statuses {statuses}; contexts left "
          f"{before_close['contexts']}, browsers replaced {before_close['replaced']}, browser processes left after "
          f"close {len(left)}; RSS (MiB) every 100 episodes {[round(r) for r in rss]}")
    return result


def baseline(n: int) -> dict[str, Any]:
    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams, TransformersPolicy

    tasks = (miniwob_tasks("test") + site_tasks("test"))
    tasks = [tasks[i * len(tasks) // n] for i in range(n)]
    pool = BrowserPool()
    policy = TransformersPolicy(str(default_model_path()), sampling=SamplingParams(max_tokens=160, temperature=1.0),
                                max_model_len=4096)
    try:
        result = collect("agent_gym/Web-v0", policy, tasks=tasks, n_parallel=4, max_steps=4,
                         env_kwargs={"pool": pool}, progress=False)
    finally:
        policy.close()
        pool.close()
    solved = sum(t.status == EpisodeStatus.ENV_DONE and t.trajectory_reward > 0.5 for t in result)
    statuses: dict[str, int] = {}
    for t in result:
        statuses[str(t.status)] = statuses.get(str(t.status), 0) + 1
    print(f"embedded default model: {solved}/{n} solved ({solved / n:.0%}); statuses {statuses}")
    return {"episodes": n, "success": solved / n, "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oracle", type=int, default=0)
    parser.add_argument("--latency", type=int, default=0)
    parser.add_argument("--think", type=float, default=0.0)
    parser.add_argument("--resets", type=int, default=0)
    parser.add_argument("--seeded", type=int, default=0)
    parser.add_argument("--pause", type=float, default=0.5)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--prep-cpu", type=int, default=0)
    parser.add_argument("--stream", type=int, default=0)
    parser.add_argument("--leak", type=int, default=0)
    parser.add_argument("--baseline", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.oracle:
        out["oracle"] = oracle(args.oracle)
    if args.latency:
        out["latency"] = [latency_point(n_parallel, episodes, prepare, args.think)
                          for n_parallel, episodes in ((1, args.latency), (16, max(1, args.latency // 4)))
                          for prepare in (True, False)]
        out["pool_vs_fresh"] = pool_vs_fresh(max(4, args.latency // 2))
        out["kept_page_reset"] = kept_page_reset(50)
        out["latency_medians"] = {"reset_p50_ms": statistics.median(
            r["reset_p50_ms"] for r in out["latency"] if r["prepare_next"])}
    if args.resets:
        out["resets"] = reset_compare(args.resets)
    if args.seeded:
        out["seeded"] = seeded(args.seeded, args.pause, tuple(args.parallel))
    if args.stream:
        print(f"RolloutStream over Web-v0, {args.pause:g} s per turn (load {os.getloadavg()[0]:.1f} at the start):")
        out["stream"] = [stream_point(n, args.stream, args.pause, hints)
                         for n in args.parallel for hints in (False, True)]
        print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    if args.prep_cpu:
        out["prep_cpu"] = prep_cpu(args.prep_cpu, tuple(args.parallel), turn_s=args.pause)
    if args.leak:
        out["leak"] = leak(args.leak)
    if args.baseline:
        out["baseline"] = baseline(args.baseline)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
