"""What goes into a batch: the task sampler's cost per episode, and stream throughput with and without the filter.

Three measurements in one process, repeated ``--rounds`` times with the variants alternating, medians printed
side by side:

* **sampler alone**: ``TaskSampler.sample`` + ``observe`` over a ToolUse-v0 (480 tasks) and RAG-v0 (640 tasks)
  mixture with a curriculum, fed recorded episodes: microseconds per draw and per observed episode;
* **stream, tasks vs sampler**: a ``RolloutStream`` of ``--groups`` groups of ``--samples`` ToolUse-v0 episodes at
  ``--concurrency``, given a task list or a sampler over the same tasks: client CPU per episode (no server: a fast
  fake async policy, a calculator call then an answer right or wrong by a hash of the episode id), so the
  difference is the sampler's share of the client's work;
* **stream, filter off / on / on with early cancel**: the same stream (a sampler over the same tasks, primed with
  one full pass so every task has a pass rate) without and with ``DynamicSampling``, and with its
  ``early_cancel=0.05``: episodes per wall-second, groups handed per second and informative groups per second
  (without the filter, the handed groups whose outcomes differ), the dropped and the cancelled. Here a task is
  hard (answered right 3% of the time), easy (97%) or even (50%), by a hash of its id, and each turn waits
  ``--latency-ms`` times 1 to 4 (by a hash of the episode id; asyncio) to stand in for a server, so the first
  siblings to finish are not always the same;
* **collect, filter on / on with early cancel** (``--collect``): ``collect`` with the same primed sampler asked for
  ``--groups // 4`` informative groups at ``n_parallel=--concurrency``, with ``DynamicSampling`` and with its
  ``early_cancel=0.05``: wall time, groups sampled, informative groups per second, the cancelled.

Usage:
    python benchmarks/batches.py
    python benchmarks/batches.py --groups 200 --samples 8 --concurrency 32 --rounds 5
    python benchmarks/batches.py --collect --groups 100 --samples 8 --concurrency 32 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import zlib
from typing import Any

__all__ = ["main", "measure_collect", "measure_sampler", "measure_stream"]

_CALL = json.dumps({"name": "calculator", "arguments": {"expression": "1 + 2"}})


class HashPolicy:
    """A calculator call, then the answer: right when a hash of the episode id falls under the task's share.

    Args:
        answers: Question -> ground truth.
        p_right: Share of episodes answered right (None: 3%, 97% or 50% by a hash of the question).
        latency_s: Seconds each turn waits (asyncio), standing in for a server, times 1 to 4 by a hash of the
            episode id.
    """

    def __init__(self, answers: dict[str, str], p_right: float | None, latency_s: float = 0.0) -> None:
        self.answers, self.p_right, self.latency_s = answers, p_right, latency_s

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> str:
        if self.latency_s:
            await asyncio.sleep(self.latency_s * (1 + zlib.crc32(session_id.encode()) % 4))
        if messages[-1]["role"] != "tool":
            return f"<tool_call>\n{_CALL}\n</tool_call>"
        question = next(m["content"] for m in messages if m["role"] == "user").strip()
        share = self.p_right
        if share is None:
            share = (0.03, 0.97, 0.5)[zlib.crc32(question.encode()) % 3]
        right = (zlib.crc32(session_id.encode()[::-1]) % 1000) / 1000 < share
        return f"<answer>{self.answers.get(question, '0') if right else '-987654.5'}</answer>"

    def close_session(self, session_id: str) -> None:
        pass


def _tool_use_tasks(count: int) -> list[dict[str, Any]]:
    from agent_gym.envs.tool_use.tasks import generate_tasks

    pool = generate_tasks(per_family=max(1, count // 4 + 1), seed=1)
    return pool[:count]


def measure_sampler(draws: int = 20000) -> dict[str, float]:
    """Microseconds per ``sample`` and per observed episode over a two-env mixture with a curriculum."""
    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.envs.rag.tasks import builtin_tasks
    from agent_gym.envs.tool_use.tasks import builtin_tasks as tool_use_tasks
    from agent_gym.rollout import Curriculum, EnvSource, RolloutStream, TaskSampler

    tool_tasks = list(tool_use_tasks())
    sampler = TaskSampler([EnvSource("agent_gym/ToolUse-v0", tool_tasks, weight=2.0),
                           EnvSource("agent_gym/RAG-v0", list(builtin_tasks()))], curriculum=Curriculum(), seed=0)
    answers = {t["question"]: t["ground_truth"] for t in tool_tasks}
    with RolloutStream("agent_gym/ToolUse-v0", HashPolicy(answers, 0.5), tool_tasks[:8], samples_per_task=8,
                       concurrency=16, max_steps=4) as stream:
        groups = [g.trajectories for g in stream]  # recorded episodes to observe
    started = time.perf_counter()
    picked = [sampler.sample() for _ in range(draws)]
    sample_s = time.perf_counter() - started
    started = time.perf_counter()
    for i, draw in enumerate(picked):
        sampler.observe(draw, groups[i % len(groups)])
    observe_s = time.perf_counter() - started
    episodes = sum(len(groups[i % len(groups)]) for i in range(draws))
    return {"us_per_draw": 1e6 * sample_s / draws, "us_per_observed_episode": 1e6 * observe_s / episodes,
            "us_per_episode_groups_of_8": 1e6 * (sample_s / draws + observe_s / draws) / 8}


_PRIMED: dict[tuple[int, int], list[Any]] = {}


def _primed_sampler(pool: list[dict[str, Any]], samples: int, p_right: float | None) -> Any:
    """A sampler over ``pool`` that observed one full group of every task (recorded once per shape)."""
    from agent_gym.rollout import EnvSource, SampledTask, TaskSampler, collect

    env = "agent_gym/ToolUse-v0"
    if (len(pool), samples) not in _PRIMED:
        policy = HashPolicy({t["question"]: t["ground_truth"] for t in pool}, p_right)
        _PRIMED[len(pool), samples] = collect(env, policy, tasks=pool, samples_per_task=samples, n_parallel=32,
                                              max_steps=4, progress=False)
    episodes = _PRIMED[len(pool), samples]
    sampler = TaskSampler([EnvSource(env, pool)], seed=0)
    for i, task in enumerate(pool):
        sampler.observe(SampledTask(env, f"{env}/{task['id']}", task, env, None),
                        episodes[i * samples:(i + 1) * samples])
    return sampler


def measure_stream(groups: int, samples: int, concurrency: int, *, use_sampler: bool = False,
                   use_filter: bool = False, early_cancel: float | None = None, p_right: float | None = 0.5,
                   latency_s: float = 0.0) -> dict[str, float]:
    """One stream: CPU per episode, wall time, episodes/s, groups handed/s, informative groups/s, filter counters."""
    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.rollout import DynamicSampling, EnvSource, RolloutStream, TaskSampler
    from agent_gym.rollout.dynamic_sampling import judge_group

    pool = _tool_use_tasks(max(groups, 4))
    tasks = [pool[i % len(pool)] for i in range(groups)]
    policy = HashPolicy({t["question"]: t["ground_truth"] for t in pool}, p_right, latency_s)
    dynamic = DynamicSampling(early_cancel=early_cancel) if use_filter else None
    source: dict[str, Any] = {"tasks": tasks}
    env: Any = "agent_gym/ToolUse-v0"
    if use_sampler:
        sampler = (_primed_sampler(pool, samples, p_right) if latency_s
                   else TaskSampler([EnvSource("agent_gym/ToolUse-v0", pool)], seed=0))
        env, source = None, {"sampler": sampler, "max_groups": groups}
    episodes = handed = informative = 0
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    with RolloutStream(env, policy, **source, samples_per_task=samples, concurrency=concurrency,
                       n_parallel=samples, max_steps=4, dynamic_sampling=dynamic) as stream:
        for group in stream:
            handed += 1
            informative += judge_group(group.trajectories) == "kept"
        filtered = stream.stats.filtered
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
    cancelled = dynamic.stats.cancelled_episodes if dynamic is not None else 0
    episodes = (handed + filtered) * samples - cancelled
    row = {"episodes": episodes, "cpu_ms_per_episode": 1000 * cpu / episodes, "wall_s": wall,
           "episodes_per_s": episodes / wall, "handed_per_s": handed / wall, "informative_per_s": informative / wall,
           "informative": informative}
    if dynamic is not None:
        row.update({f"dropped_{k}": v for k, v in dynamic.stats.as_dict().items() if k in ("too_easy", "too_hard")})
        row.update(cancelled_groups=dynamic.stats.cancelled, cancelled_episodes=cancelled)
    return row


def measure_collect(groups: int, samples: int, n_parallel: int, *, early_cancel: float | None,
                    latency_s: float) -> dict[str, float]:
    """One ``collect`` of ``groups`` informative groups with the filter (and its early cancel): wall, rates."""
    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.rollout import DynamicSampling, collect

    pool = _tool_use_tasks(max(4 * groups, 4))
    policy = HashPolicy({t["question"]: t["ground_truth"] for t in pool}, None, latency_s)
    dynamic = DynamicSampling(early_cancel=early_cancel)
    sampler = _primed_sampler(pool, samples, None)
    started = time.perf_counter()
    batch = collect(None, policy, sampler=sampler, num_episodes=groups, samples_per_task=samples,
                    n_parallel=n_parallel, max_steps=4, progress=False, dynamic_sampling=dynamic)
    wall = time.perf_counter() - started
    informative = len(batch) // samples
    stats = dynamic.stats
    return {"wall_s": wall, "informative": informative, "informative_per_s": informative / wall,
            "groups_sampled": stats.groups, "cancelled_groups": stats.cancelled,
            "cancelled_episodes": stats.cancelled_episodes,
            "episodes": stats.groups * samples - stats.cancelled_episodes}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    """Parse the arguments, run the measurements alternating the variants, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--p-right", type=float, default=0.15,
                        help="share of episodes answered right in the CPU comparison")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="wait per turn in the filter comparison")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collect", action="store_true",
                        help="only the collect comparison (filter on vs on with early cancel)")
    args = parser.parse_args()
    if args.collect:
        _compare_collect(args)
        return
    shape = (args.groups, args.samples, args.concurrency)
    sampler_runs = []
    cpu: dict[str, list[dict[str, float]]] = {"tasks": [], "sampler": []}
    flow: dict[str, list[dict[str, float]]] = {"filter off": [], "filter on": [], "early cancel": []}
    measure_stream(8, args.samples, args.concurrency)  # warm-up: imports, first env builds
    for _ in range(args.rounds):
        sampler_runs.append(measure_sampler())
        cpu["tasks"].append(measure_stream(*shape, p_right=args.p_right))
        cpu["sampler"].append(measure_stream(*shape, use_sampler=True, p_right=args.p_right))
        for name in flow:
            flow[name].append(measure_stream(*shape, use_sampler=True, use_filter=name != "filter off",
                                             early_cancel=0.05 if name == "early cancel" else None, p_right=None,
                                             latency_s=args.latency_ms / 1000))
    print(f"medians of {args.rounds} rounds; stream: {args.groups} groups x {args.samples} at concurrency "
          f"{args.concurrency}, p_right {args.p_right}")
    print(f"sampler alone: {_median(sampler_runs, 'us_per_draw'):.2f} us/draw, "
          f"{_median(sampler_runs, 'us_per_observed_episode'):.2f} us/observed episode, "
          f"{_median(sampler_runs, 'us_per_episode_groups_of_8'):.2f} us/episode (groups of 8)")
    for name, runs in cpu.items():
        print(f"stream with {name:8}: {_median(runs, 'cpu_ms_per_episode'):.3f} CPU ms/episode "
              f"(runs {', '.join(format(r['cpu_ms_per_episode'], '.3f') for r in runs)})")
    print(f"latency {args.latency_ms:g} ms/turn x 1-4; tasks hard / easy / even")
    for name, runs in flow.items():
        extra = ""
        if "dropped_too_easy" in runs[0]:
            extra = (f", dropped too easy {_median(runs, 'dropped_too_easy'):.0f}, "
                     f"too hard {_median(runs, 'dropped_too_hard'):.0f}, cancelled groups "
                     f"{_median(runs, 'cancelled_groups'):.0f} ({_median(runs, 'cancelled_episodes'):.0f} episodes)")
        print(f"{name:12}: {_median(runs, 'wall_s'):.2f} s, {_median(runs, 'episodes_per_s'):.1f} episodes/s, "
              f"{_median(runs, 'handed_per_s'):.2f} groups handed/s, {_median(runs, 'informative_per_s'):.2f} "
              f"informative groups/s ({_median(runs, 'informative'):.0f} informative){extra}")



def _compare_collect(args: argparse.Namespace) -> None:
    """``--collect``: ``collect`` with the filter, with and without early cancel, alternating; medians."""
    runs: dict[str, list[dict[str, float]]] = {"filter on": [], "early cancel": []}
    wanted = max(1, args.groups // 4)
    measure_collect(2, args.samples, args.concurrency, early_cancel=None, latency_s=0.0)  # warm-up
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(measure_collect(wanted, args.samples, args.concurrency,
                                              early_cancel=0.05 if name == "early cancel" else None,
                                              latency_s=args.latency_ms / 1000))
    print(f"medians of {args.rounds} rounds; collect: {wanted} informative groups of {args.samples} at n_parallel "
          f"{args.concurrency}; latency {args.latency_ms:g} ms/turn x 1-4; tasks hard / easy / even")
    for name, rows in runs.items():
        print(f"{name:12}: {_median(rows, 'wall_s'):.2f} s, {_median(rows, 'groups_sampled'):.0f} groups sampled, "
              f"{_median(rows, 'episodes'):.0f} episodes run, {_median(rows, 'informative_per_s'):.2f} informative "
              f"groups/s ({_median(rows, 'informative'):.0f}), cancelled groups "
              f"{_median(rows, 'cancelled_groups'):.0f} ({_median(rows, 'cancelled_episodes'):.0f} episodes)")


if __name__ == "__main__":
    main()
