"""``agent-gym eval``: ``kill -9`` at random moments then ``--resume``, and ``--reverify`` of 10,000 episodes.

(a) A seeded eval of ToolUse-v0 against the reference server in fake mode runs once
uninterrupted, then again killed with SIGKILL ``--kills`` times at random moments (uniform in
``[0, --max-delay]`` seconds after the process recorded its first episode), each kill followed by
``agent-gym eval --resume``; the last resume runs to the end. The final ``summary.json`` and
every key's scored episode (status, outcome, sampled ids) are compared with the uninterrupted
run's.

(b) An eval of ToolUse-v0 with ``--episodes`` episodes (a scripted policy answering at once,
right or wrong by a hash of the episode id) is written through the evaluation package; then
the time to re-read the directory for a resume (records parsed and pending keys found) and
the time of ``agent-gym eval --reverify`` (a fresh process; the command's own time is printed
as ``re-verified in``) are measured.

    python benchmarks/eval_resume.py --kills 20 --episodes 10000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_process import start_reference_server  # noqa: E402

ENV = "agent_gym/ToolUse-v0"


def _eval_argv(server: str, model: str, out: Path, tasks: int, k: int) -> list[str]:
    return [sys.executable, "-m", "agent_gym", "eval", ENV, "--server", server, "--model", model, "--k", str(k),
            "--tasks", str(tasks), "--max-steps", "2", "--max-tokens", "8", "--n-parallel", "8", "--seed", "3",
            "--no-progress", "--out", str(out)]


def _lines(log: Path) -> int:
    return log.read_bytes().count(b"\n") if log.exists() else 0


def _scored(out: Path) -> dict[tuple, Any]:
    from agent_gym.evaluation import EpisodeStore

    return {tuple(r["key"]): (r["status"], r["success"], r["res_reward"], r["trajectory"]["response_tokens"])
            for r in EpisodeStore(out).iter_scored()}


def kills(args: argparse.Namespace, work: Path) -> None:
    """Part (a): random kill -9s, each followed by a resume; compare with an uninterrupted run."""
    from agent_gym.models import default_model_path

    model = str(default_model_path())
    proc, server = start_reference_server(["--fake-tokens", "4", "--fake-latency-ms", str(args.latency_ms)])
    try:
        full = work / "full"
        started = time.perf_counter()
        subprocess.run(_eval_argv(server, model, full, args.tasks, args.k), check=True, capture_output=True)
        full_wall = time.perf_counter() - started
        rng = random.Random(args.seed)
        out = work / "killed"
        argv = _eval_argv(server, model, out, args.tasks, args.k)
        landed, lines_at_kill = 0, []
        started = time.perf_counter()
        for _ in range(args.kills):
            log = out / "episodes.jsonl"
            before = _lines(log)
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while process.poll() is None and _lines(log) <= before:  # this run is sampling: its first episode is in
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, args.max_delay))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                landed += 1
            process.wait()
            lines_at_kill.append(_lines(log))
            argv = [sys.executable, "-m", "agent_gym", "eval", "--resume", str(out), "--no-progress"]
        subprocess.run(argv, check=True, capture_output=True)
        killed_wall = time.perf_counter() - started
    finally:
        proc.kill()
        proc.wait()
    same_summary = json.loads((out / "summary.json").read_text()) == json.loads((full / "summary.json").read_text())
    same_episodes = _scored(out) == _scored(full)
    episodes = args.tasks * args.k
    print(f"(a) {episodes} episodes ({args.tasks} tasks x k={args.k}), fake server {args.latency_ms} ms per answer")
    print(f"    uninterrupted: {full_wall:.1f}s; with {args.kills} kill -9s ({landed} landed while running) "
          f"and resumes: {killed_wall:.1f}s")
    print(f"    episode lines on disk after each kill: {lines_at_kill}")
    print(f"    final summary.json equal: {same_summary}; every key's scored episode equal: {same_episodes}")


class _AnswerPolicy:
    """Answers ToolUse-v0 questions at once: right unless a hash of the episode id says otherwise."""

    def __init__(self) -> None:
        from agent_gym.envs.tool_use.tasks import shared_builtin_tasks

        self.truth = {t["question"]: str(t["ground_truth"]) for t in shared_builtin_tasks()}

    def act(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        wrong = int(hashlib.sha256(session_id.encode()).hexdigest()[:8], 16) % 10 < 4
        question = next(m["content"] for m in messages if m["role"] == "user")
        return f"<answer>{'-12345' if wrong else self.truth[question]}</answer>"

    def close_session(self, session_id: str) -> None:
        """Nothing to release."""


def reverify_time(args: argparse.Namespace, work: Path) -> None:
    """Part (b): write an eval of ``--episodes`` episodes, time a resume's re-read and ``--reverify``."""
    from agent_gym.evaluation import EpisodeStore, finish, pending_keys, prepare, run_pending

    tasks = 400
    k = -(-args.episodes // tasks)
    store = EpisodeStore(work / "big")
    config = {"envs": [ENV], "k": k, "tasks": tasks, "seed": 0, "split": None}
    plans = prepare(store, config)
    started = time.perf_counter()
    asyncio.run(run_pending(store, plans, _AnswerPolicy(), k=k, seed=0, n_parallel=16))
    write_wall = time.perf_counter() - started
    finish(store, plans, k)
    size = store.episodes_path.stat().st_size
    started = time.perf_counter()
    records = store.records()
    pending = pending_keys(plans, k, records)
    reread = time.perf_counter() - started
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "agent_gym", "eval", "--reverify", str(store.root)],
                            check=True, capture_output=True, text=True)
    reverify_wall = time.perf_counter() - started
    inner = re.search(r"re-verified in ([0-9.]+)s", result.stdout)
    print(f"(b) {len(records)} episodes ({tasks} tasks x k={k}), episodes.jsonl {size / 1e6:.1f} MB, written with "
          f"fsync per episode in {write_wall:.1f}s ({write_wall / len(records) * 1e3:.2f} ms per episode)")
    print(f"    resume re-read (parse every record, find pending keys): {reread:.2f}s, {len(pending)} pending")
    print(f"    --reverify: {inner.group(1) if inner else '?'}s in the command, {reverify_wall:.1f}s with process "
          f"start; output: {result.stdout.splitlines()[0]}")


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=80)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--max-delay", type=float, default=1.0)
    parser.add_argument("--episodes", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", choices=["kills", "reverify"], default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.skip != "kills":
            kills(args, Path(tmp))
        if args.skip != "reverify":
            reverify_time(args, Path(tmp))


if __name__ == "__main__":
    main()
