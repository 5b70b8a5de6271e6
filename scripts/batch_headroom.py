r"""How much a curriculum and early cancel can raise informative groups per sampled token, for one task pool.

Dynamic sampling drops the groups whose answers all agree; it does not make more informative groups per
sampled token. What can is choosing the tasks (a curriculum) and not sampling the rest of a group whose
first answers already agree (early cancel). Both are bounded by the pool's per-task pass rates, which this
script measures for the GRPO demo's starting model, then uses:

1. **measure**: every task of the pool (``--pool`` tasks of ``--family``, as the demo builds it) sampled
   ``--samples`` times with the demo's sampling (temperature 1, 96 tokens a turn, 6 steps); per task the
   success share and the mean sampled tokens of an episode;
2. **bounds**: with groups of ``--group-size``, a task of pass rate ``p`` gives an informative group with
   chance ``1 - p^n - (1-p)^n``; the informative share of the groups and the informative groups per 1000
   sampled tokens when tasks are drawn uniformly, uniformly among the tasks whose measured rate is inside the
   curriculum's learnable band (a curriculum that knew the rates), and in proportion to that chance (the best
   any draw weights can do for a fixed policy);
3. **simulation**: ``--groups`` groups drawn by the library's :class:`~agent_gym.rollout.TaskSampler`
   (uniformly, or with the demo's :class:`~agent_gym.rollout.Curriculum`), each member's outcome drawn from
   its task's measured rate (the policy held fixed), averaged over ``--runs`` seeds: the informative share,
   the informative groups per 1000 tokens, and for early cancel (``--early-cancel``, ``min_finished`` 2) the
   share of groups whose rule fires once their first two members agree, the share of the tokens their other
   members would cost, and how many of those groups were informative after all (wrong cancels).

Written to ``--out`` (JSON; one entry per family, rewritten as each family ends). Run::

    python scripts/batch_headroom.py --family lookup units --pool 64 --samples 8 \
        --out scripts/results/grpo_batches/headroom.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["bounds", "main", "measure", "simulate"]


def informative_chance(rate: float, group_size: int) -> float:
    """Chance that a group of ``group_size`` samples of a task of pass rate ``rate`` has outcomes that differ."""
    return 1.0 - rate ** group_size - (1.0 - rate) ** group_size


def measure(family: str, pool_size: int, samples: int, seed: int = 0, n_parallel: int = 32) -> dict[str, Any]:
    """Per-task success share and mean sampled tokens of the demo's starting model on the demo's pool."""
    from agent_gym import collect
    from agent_gym.models import default_model_path
    from agent_gym.models.tiny_agent_data import training_tasks
    from agent_gym.policy import SamplingParams, TransformersPolicy

    pool = [t for t in training_tasks([1000 + seed], per_family=120) if t["family"] == family][:pool_size]
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=96, seed=seed)
    policy = TransformersPolicy(str(default_model_path()), sampling=sampling, logprobs_mode="raw_logprobs")
    started = time.perf_counter()
    try:
        episodes = collect("agent_gym/ToolUse-v0", policy, tasks=pool, samples_per_task=samples,
                           n_parallel=n_parallel, progress=False, max_steps=6, seed=seed + 7)
    finally:
        policy.close()
    successes: dict[str, list[float]] = {t["id"]: [] for t in pool}
    tokens: dict[str, list[int]] = {t["id"]: [] for t in pool}
    for episode in episodes:
        successes[episode.task["id"]].append(float(float(episode.metrics["res_reward"]) > 0))
        tokens[episode.task["id"]].append(int(episode.response_masks.sum()))
    return {"family": family, "pool": len(pool), "samples": samples, "seconds": round(time.perf_counter() - started, 1),
            "rates": {k: sum(v) / len(v) for k, v in successes.items()},
            "tokens": {k: sum(v) / len(v) for k, v in tokens.items()}}


def bounds(rates: Mapping[str, float], tokens: Mapping[str, float], group_size: int,
           too_easy: float = 0.9, too_hard: float = 0.1) -> dict[str, dict[str, float]]:
    """Informative share and informative groups per 1000 tokens under three draw weights (module docstring)."""
    def under(weights: Mapping[str, float]) -> dict[str, float]:
        total = sum(weights.values())
        if total <= 0:
            return {"informative_share": 0.0, "informative_per_1k_tokens": 0.0}
        share = sum(w * informative_chance(rates[k], group_size) for k, w in weights.items()) / total
        cost = sum(w * group_size * tokens[k] for k, w in weights.items()) / total
        return {"informative_share": share, "informative_per_1k_tokens": 1000 * share / cost}

    return {"uniform": under({k: 1.0 for k in rates}),
            "learnable_band_known": under({k: float(too_hard < r < too_easy) for k, r in rates.items()}),
            "weights_by_informative_chance": under({k: informative_chance(r, group_size) for k, r in rates.items()})}


class _Outcome:
    """One simulated episode: what the sampler and the filter read of a trajectory."""

    __slots__ = ("metrics", "status")

    def __init__(self, metrics: dict[str, float]) -> None:
        self.metrics = metrics
        self.status = "done"


def simulate(rates: Mapping[str, float], tokens: Mapping[str, float], *, group_size: int, groups: int,
             curriculum: bool, seed: int, early_cancel: float = 0.05, min_finished: int = 2) -> dict[str, float]:
    """One simulated run of ``groups`` draws (module docstring, item 3)."""
    from agent_gym.rollout import Curriculum, EnvSource, TaskSampler
    from agent_gym.rollout.dynamic_sampling import judge_group
    from agent_gym.rollout.early_cancel import other_outcome_chance

    sampler = TaskSampler([EnvSource("pool", [{"id": k} for k in rates])],
                          curriculum=Curriculum() if curriculum else None, seed=seed)
    rng = random.Random(seed)
    kept = fired = wrong = 0
    spared = sampled = 0.0
    for _ in range(groups):
        draw = sampler.sample()
        key = draw.task["id"]
        group = [_Outcome({"res_reward": float(rng.random() < rates[key])}) for _ in range(group_size)]
        informative = judge_group(group) == "kept"
        first = {g.metrics["res_reward"] > 0 for g in group[:min_finished]}
        rate = sampler.pass_rate(draw.key)
        if rate is not None and len(first) == 1 and \
                other_outcome_chance(rate, first.pop(), group_size - min_finished) < early_cancel:
            fired += 1
            wrong += informative
            spared += (group_size - min_finished) * tokens[key]
        sampled += group_size * tokens[key]
        kept += informative
        sampler.observe(draw, group)
    return {"informative_share": kept / groups, "informative_per_1k_tokens": 1000 * kept / sampled,
            "early_cancel_fires": fired / groups, "early_cancel_token_share": spared / sampled,
            "early_cancel_wrong": wrong / fired if fired else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", nargs="+", default=["lookup"])
    parser.add_argument("--pool", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8, help="samples per task for the measured pass rates")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups", type=int, nargs="+", default=[36, 72, 144],
                        help="simulated groups per run (the demo's 10k / 20k / 40k tokens on lookup)")
    parser.add_argument("--runs", type=int, default=40, help="simulated runs (seeds) per setting")
    parser.add_argument("--early-cancel", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="scripts/results/grpo_batches/headroom.json")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"command": "python scripts/batch_headroom.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "group_size": args.group_size, "families": {}}
    for family in args.family:
        measured = measure(family, args.pool, args.samples, seed=args.seed)
        rates, tokens = measured["rates"], measured["tokens"]
        sims: dict[str, Any] = {}
        for groups in args.groups:
            for curriculum in (False, True):
                runs = [simulate(rates, tokens, group_size=args.group_size, groups=groups, curriculum=curriculum,
                                 seed=s, early_cancel=args.early_cancel) for s in range(args.runs)]
                sims[f"{groups}_groups_{'curriculum' if curriculum else 'uniform'}"] = {
                    k: round(statistics.mean(r[k] for r in runs), 4) for k in runs[0]}
        histogram = [sum(1 for r in rates.values() if round(r * args.samples) == i) for i in range(args.samples + 1)]
        out["families"][family] = {
            **{k: measured[k] for k in ("pool", "samples", "seconds")},
            "mean_rate": statistics.mean(rates.values()), "successes_histogram": histogram,
            "bounds": {k: {m: round(v, 4) for m, v in row.items()}
                       for k, row in bounds(rates, tokens, args.group_size).items()},
            "simulated": sims, "rates": rates, "tokens": tokens}
        print(family, json.dumps({k: out["families"][family][k] for k in ("mean_rate", "successes_histogram",
                                                                          "bounds", "simulated")}, indent=1))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # each family's figures survive a run stopped later
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
