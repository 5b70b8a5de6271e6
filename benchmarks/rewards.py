"""Rewards beyond rules: the cost of an LLM judge, what its cache saves, the reward service's throughput.

Run:  python benchmarks/rewards.py [--tasks 4] [--samples 8] [--requests 512] [--check-tasks 20] [--skip PART]

One reference server (``python -m agent_gym.reference_server``, the embedded default model) is both the
policy and the local judge, as one inference server serving the actor and the reward model at once.

(a) Rule-graded ``collect`` of ``--tasks`` x ``--samples`` ToolUse-v0 episodes (groups of ``--samples``),
    then the same episodes scored by a rubric with the LLM judge (:func:`agent_gym.judges.judge_trajectories`):
    the judge's added wall time, its calls per episode with and without the verdict cache, and how many
    episodes ended ``JUDGE_ERROR`` (the tiny embedded model rarely writes a valid verdict).
(b) The cache on groups of 8 with repeated answers: judge calls per episode with and without it.
(c) ``agent-gym serve-reward --env agent_gym/ToolUse-v0`` (rule-graded; its own process): requests/s of
    slime-shaped ``POST /reward`` at 16 and 64 in flight.
(d) ``judge-check`` of the default judge (the embedded model) on ``--check-tasks`` ToolUse-v0 tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from typing import Any

from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric, judge_trajectories
from agent_gym.judges.check import format_check, judge_check
from agent_gym.models import default_model_path
from agent_gym.models.evaluate_tiny_agent import held_out_tasks
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect


def _judge(address: str, model: str, cache: bool) -> LLMJudge:
    return LLMJudge.from_server(address, tokenizer=model, max_tokens=64, timeout=120, cache=cache)


def judged_collect(address: str, model: str, tasks: int, samples: int) -> dict[str, Any]:
    """(a) and (b): rule-graded collect, then the same episodes judged with and without the cache."""
    chosen = held_out_tasks(max(1, -(-tasks // 4)))[:tasks]
    policy = VLLMPolicy(address, model, SamplingParams(temperature=1.0, top_k=-1, max_tokens=128, seed=0))
    try:
        started = time.perf_counter()
        episodes = collect("agent_gym/ToolUse-v0", policy, tasks=chosen, samples_per_task=samples, n_parallel=16,
                           progress=False, max_steps=6)
        rule_s = time.perf_counter() - started
    finally:
        policy.close()
    out: dict[str, Any] = {"episodes": len(episodes), "rule_collect_s": rule_s}
    for cache in (True, False):
        copies = [type(e).from_dict(e.to_dict()) for e in episodes]
        judge = _judge(address, model, cache)
        try:
            started = time.perf_counter()
            report = judge_trajectories(copies, Rubric([JudgeCriterion("judge", judge)]))
            judge_s = time.perf_counter() - started
        finally:
            judge.close()
        answers = {(str(e.task["id"]), e.steps[-1].model_response) for e in episodes}
        out["cache" if cache else "no_cache"] = {
            "judge_s": judge_s, "added_vs_rule": judge_s / rule_s, "calls": report.usage.get("calls", 0),
            "calls_per_episode": report.usage.get("calls", 0) / len(copies),
            "cache_hits": report.usage.get("cache_hits", 0), "distinct_answers": len(answers),
            "scored": report.scored, "judge_errors": report.failed, "failures": report.failures}
    return out


async def _load(url: str, requests: int, in_flight: int) -> float:
    import httpx

    bodies = [{"prompt": "What is 6 times 7?", "response": f"<answer>{40 + i % 5}</answer>", "label": "42"}
              for i in range(requests)]
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for body in bodies:
            queue.put_nowait(body)

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                reply = await client.post(f"{url}/reward", json=body)
                assert reply.status_code == 200, reply.text

        await client.post(f"{url}/reward", json=bodies[0])  # warm-up
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return requests / (time.perf_counter() - started)


def service_throughput(requests: int) -> dict[str, float]:
    """(c): requests/s of the reward service at 16 and 64 in flight."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent_gym", "serve-reward", "--env", "agent_gym/ToolUse-v0",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
            time.sleep(0.2)
        return {str(n): asyncio.run(_load(url, requests, n)) for n in (16, 64)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--check-tasks", type=int, default=20)
    parser.add_argument("--skip", action="append", default=[], choices=["collect", "check", "service"],
                        help="leave a part out: collect (a, b), check (d), service (c)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = str(default_model_path())
    report: dict[str, Any] = {}
    proc, address = start_reference_server(["--model", model])
    try:
        if "collect" not in args.skip:
            report["judged_collect"] = judged_collect(address, model, args.tasks, args.samples)
            a = report["judged_collect"]
            print(f"(a) {a['episodes']} episodes: rule-graded collect {a['rule_collect_s']:.2f}s", flush=True)
            for name in ("cache", "no_cache"):
                r = a[name]
                print(f"    judged ({name}): +{r['judge_s']:.2f}s ({r['added_vs_rule']:.2f}x the collect), "
                      f"{r['calls_per_episode']:.2f} judge calls/episode ({r['calls']} calls, {r['cache_hits']} "
                      f"cache hits, {r['distinct_answers']} distinct answers), scored {r['scored']}, JUDGE_ERROR "
                      f"{r['judge_errors']} {r['failures']}", flush=True)
        if "check" not in args.skip:
            judge = _judge(address, model, True)
            try:
                report["judge_check"] = judge_check(judge, "agent_gym/ToolUse-v0", tasks=args.check_tasks)
            finally:
                judge.close()
            print("(d) judge-check, default judge (embedded model):\n    " +
                  format_check(report["judge_check"]).replace("\n", "\n    "), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if "service" in args.skip:
        return
    report["service_requests_per_s"] = service_throughput(args.requests)
    print(f"(c) serve-reward (rule-graded), {args.requests} requests: " +
          ", ".join(f"{n} in flight {v:.0f} req/s" for n, v in report["service_requests_per_s"].items()))
    if args.json:
        print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
