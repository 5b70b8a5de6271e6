"""Web-v0: the CPU time one preparation of a next episode costs (``python benchmarks/web.py --prep-cpu N``).

A preparation (:mod:`agent_gym.envs.web.prepared`) opens a fresh context, loads the task's page, starts the task
and reads its first snapshot. Here ``n_parallel`` browsers (one per worker, kept) each prepare a MiniWoB++ task
at once, N rounds, and the reset takes it (``PagePreparer.take``); the CPU seconds of this process's whole tree
(the browsers' processes, the Playwright drivers, and this process: its browser loops and the loopback page
server) are read with psutil before and after each round, and the same for closing the contexts afterwards. A
process that ends (a closed context's renderer) is counted through its parent's ``children_*`` times (its whole
life, less what was counted while it ran) once reaped: the close is read ``SETTLE_S`` after it, less what the idle
tree spends in as long. At n_parallel 1 the stages are also timed apart: the context (``open_blank``: the
context, its request filter and report binding, an empty page), the page load (``load``), and the task's start
and first snapshot (``start_ahead``).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import psutil

from agent_gym.envs.web.browser import BrowserWorker
from agent_gym.envs.web.miniwob import miniwob_page_spec, miniwob_tasks
from agent_gym.envs.web.pool import BrowserPool
from agent_gym.envs.web.prepared import PagePreparer, close_quietly

__all__ = ["prep_cpu", "tree_cpu"]

PAGES = ("click-button", "enter-text", "choose-list")
TIMEOUT_MS = 3000.0
SETTLE_S = 0.5


def _total(times: Any) -> float:
    return float(times.user + times.system + getattr(times, "children_user", 0.0)
                 + getattr(times, "children_system", 0.0))


def tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process (``python``), its Playwright drivers (``driver``) and their browsers."""
    me = psutil.Process(os.getpid())
    out = {"python": _total(me.cpu_times()), "driver": 0.0, "browser": 0.0}
    for proc in me.children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
            spent = _total(proc.cpu_times())
        except psutil.Error:
            continue
        out["driver" if "run-driver" in line else "browser"] += spent
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in before}


def _specs(round_: int, count: int) -> list[Any]:
    tasks = [t for t in miniwob_tasks("train") if t["page"] in PAGES]
    return [miniwob_page_spec(tasks[(7 * (round_ * count + i)) % len(tasks)]) for i in range(count)]


def _idle_cpu() -> float:
    """CPU seconds the tree spends in ``SETTLE_S`` with nothing to do."""
    before = tree_cpu()
    time.sleep(SETTLE_S)
    return sum(_delta(before, tree_cpu()).values())


def _close(sessions: list[Any], workers: list[BrowserWorker], idle: float) -> float:
    """Close the contexts; their CPU seconds (read ``SETTLE_S`` later, less ``idle``)."""
    before = tree_cpu()
    for session, worker in zip(sessions, workers, strict=True):
        worker.call(close_quietly, session, worker, timeout=60)
    time.sleep(SETTLE_S)
    return sum(_delta(before, tree_cpu()).values()) - idle


def _round(workers: list[BrowserWorker], round_: int, idle: float) -> tuple[dict[str, float], float, float]:
    """One preparation per worker, at once, taken as a reset takes it; then the contexts closed."""
    specs = _specs(round_, len(workers))
    preparers = [PagePreparer() for _ in workers]
    before, started = tree_cpu(), time.perf_counter()
    for preparer, worker, spec in zip(preparers, workers, specs, strict=True):
        preparer.prepare(worker, spec, action_timeout_ms=TIMEOUT_MS, load=True, start=True)
    sessions = [preparer.take(worker, spec, action_timeout_ms=TIMEOUT_MS, timeout=120)
                for preparer, worker, spec in zip(preparers, workers, specs, strict=True)]
    wall = time.perf_counter() - started
    prepared = tree_cpu()
    assert all(session is not None and session.first_snapshot for session in sessions), "a preparation failed"
    return _delta(before, prepared), _close(sessions, workers, idle), wall


def _stages(worker: BrowserWorker, rounds: int, idle: float) -> dict[str, float]:
    """CPU seconds per stage of a preparation, done one after another on one browser (medians over ``rounds``)."""
    from agent_gym.envs.web.page import PageSession

    spent: dict[str, list[float]] = {"context": [], "load": [], "start_and_snapshot": [], "close": []}
    for round_ in range(rounds):
        session = PageSession(_specs(round_, 1)[0], action_timeout_ms=TIMEOUT_MS)
        marks = [tree_cpu()]
        worker.call(session.open_blank, worker, timeout=60)
        marks.append(tree_cpu())
        worker.call(session.load, timeout=60)
        marks.append(tree_cpu())
        worker.call(session.start_ahead, timeout=60)
        marks.append(tree_cpu())
        for name, a, b in zip(spent, marks, marks[1:], strict=False):
            spent[name].append(sum(_delta(a, b).values()))
        spent["close"].append(_close([session], [worker], idle))
    return {name: statistics.median(values) for name, values in spent.items()}


def _point(n_parallel: int, rounds: int) -> dict[str, Any]:
    pool = BrowserPool(max_idle=n_parallel)
    workers = [pool.lease() for _ in range(n_parallel)]
    try:
        idle = _idle_cpu()
        _round(workers, -1, idle)  # each browser's first context and page load (caches, compiled code) left out
        idle = min(idle, _idle_cpu())
        preps, closes, walls = [], [], []
        for round_ in range(rounds):
            prep, close, wall = _round(workers, round_, idle)
            preps.append(prep)
            closes.append(close)
            walls.append(wall)
        stages = _stages(workers[0], rounds, idle) if n_parallel == 1 else None
    finally:
        for worker in workers:
            pool.give_back(worker)
        pool.close()
    count = rounds * n_parallel
    per = {key: sum(p[key] for p in preps) / count for key in preps[0]}
    row = {"n_parallel": n_parallel, "preparations": count, "cpu_s_per_prep": sum(per.values()),
           "cpu_s_per_prep_by_part": per, "cpu_s_per_close": sum(closes) / count, "idle_cpu_s_per_settle": idle,
           "wall_s_per_round_p50": statistics.median(walls), "stages_cpu_s": stages}
    parts = ", ".join(f"{key} {value * 1e3:.0f}" for key, value in per.items())
    print(f"  n_parallel {n_parallel}: {count} preparations, CPU per preparation {row['cpu_s_per_prep'] * 1e3:.0f} ms "
          f"({parts}), per context close {row['cpu_s_per_close'] * 1e3:.0f} ms; wall per round (all {n_parallel} "
          f"at once) p50 {row['wall_s_per_round_p50'] * 1e3:.0f} ms")
    if stages:
        print("    stages one after another (CPU ms, medians): "
              + ", ".join(f"{name} {value * 1e3:.0f}" for name, value in stages.items()))
    return row


def prep_cpu(rounds: int, parallel: tuple[int, ...] = (1, 16), turn_s: float = 0.5, cores: int = 2) -> dict[str, Any]:
    """CPU per preparation at each n_parallel, and whether ``n_parallel`` of them fit in one turn on ``cores``."""
    print(f"CPU time of one preparation (load average {os.getloadavg()[0]:.1f} at the start, "
          f"{os.cpu_count()} CPUs):")
    out: dict[str, Any] = {"load_start": os.getloadavg(), "points": [_point(n, rounds) for n in parallel]}
    for row in out["points"]:
        need = row["n_parallel"] * (row["cpu_s_per_prep"] + row["cpu_s_per_close"])
        row["fits_in_turn"] = need <= cores * turn_s
        print(f"  n_parallel {row['n_parallel']}: {row['n_parallel']} x ({row['cpu_s_per_prep'] * 1e3:.0f} + "
              f"{row['cpu_s_per_close'] * 1e3:.0f}) ms = {need:.2f} CPU-s per turn against {cores} cores x "
              f"{turn_s:g} s = {cores * turn_s:.2f}: {'fits' if row['fits_in_turn'] else 'does not fit'}")
    out["load_end"] = os.getloadavg()
    print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    return out
