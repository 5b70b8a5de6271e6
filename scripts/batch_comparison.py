r"""The GRPO demo with and without dynamic sampling at equal sampled tokens: informative groups per second, rewards.

Runs :func:`train_grpo_demo.run` twice, back to back, with the same seed, tasks and ``--token-budget``:
``unfiltered`` (each iteration trains on ``--tasks`` uniformly drawn groups, informative or not) and
``filtered`` (``--dynamic-sampling``: groups whose answers all agree are dropped and more are sampled
until ``--tasks`` informative groups are in; ``--early-cancel P``, ``--curriculum`` and ``--carry-over N``
(with ``--max-staleness``) as in the demo). Both updates re-score every episode of their batch, as a trainer
without a filter does (an episode of advantage 0 costs a forward and a backward pass and adds nothing);
``--skip-zero-advantage`` has both leave those out, so the unfiltered run's update costs its informative
groups only.
Each run stops after the iteration that brings its sampled tokens (dropped and cancelled episodes
included) to the budget; each iteration's records are written as it ends, and the comparison cuts both runs
after the first iteration that reached the tokens both reached (``--only NAME`` runs one of them,
``--compare-only`` compares the records already written). Written under ``--out``: ``unfiltered/`` and
``filtered/`` (each run's ``rewards.json`` and plot), ``comparison.json`` (per run: sampled tokens,
iterations, wall and sampling seconds, informative groups trained on (carried groups included, surplus groups
never trained on left out), per 1000 sampled tokens and per update, the groups carried and their largest
staleness, the median update seconds, informative groups per wall-second and per sampling-second, the mean
reward and success over the second half of the budget and at the last iteration (over the episodes sampled:
with ``--curriculum`` or ``--early-cancel`` those are not the same tasks as the unfiltered run's), the
evaluations on the whole pool with ``--eval-every TOKENS`` (the same tasks and seeds for both runs); the ratio
of the filtered run's informative groups per wall-second to the unfiltered run's; and that ratio with every
update of both runs costed at the median update seconds of the two runs together, ``update_matched_ratio``:
an update is the same work on both sides (not so with ``--skip-zero-advantage``), so this one does not move
when the machine's load changes between the runs' updates) and
``comparison.png`` (mean reward against sampled tokens, sampled and evaluated; informative groups against wall
seconds).

Run::

    python scripts/batch_comparison.py --family lookup --pool 16 --tasks 4 --group-size 4 \
        --token-budget 10000 --early-cancel 0.05 --out scripts/results/grpo_batches
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_SCRIPTS = str(Path(__file__).resolve().parent)
if _SCRIPTS not in sys.path:
    sys.path.insert(0, _SCRIPTS)

from train_grpo_demo import run  # noqa: E402 - beside this file

__all__ = ["main", "summarize"]


RUNS = ("unfiltered", "filtered")


def equal_tokens(record: dict[str, Any], tokens: int) -> dict[str, Any]:
    """``record`` cut after the first iteration that reached ``tokens`` sampled tokens.

    A run stopped early is so compared with the other at the tokens it reached.
    """
    rows: list[dict[str, Any]] = []
    for row in record["iterations"]:
        rows.append(row)
        if row["cumulative_tokens"] >= tokens:
            break
    return {**record, "iterations": rows}


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run (see the module docstring)."""
    rows = record["iterations"]
    tokens = rows[-1]["cumulative_tokens"] if rows else 0
    wall = sum(r["iteration_s"] for r in rows)
    sampling = sum(r["sampling_s"] for r in rows)
    informative = sum(r["informative_groups"] for r in rows)
    scored = [r for r in rows if r["mean_reward"] is not None]  # not the iterations that sampled nothing
    late = [r for r in scored if r["cumulative_tokens"] > tokens / 2] or scored[-1:]
    episodes = sum(r["sampled_episodes"] for r in late)
    return {
        "iterations": len(rows), "sampled_tokens": tokens, "sampled_episodes": sum(r["sampled_episodes"] for r in rows),
        "wall_s": round(wall, 1), "sampling_s": round(sampling, 1), "informative_groups": informative,
        "groups_sampled": (rows[-1].get("filter") or {}).get("groups") or sum(r["groups"] for r in rows),
        "informative_groups_per_1k_tokens": 1000 * informative / tokens if tokens else 0.0,
        "informative_groups_per_update": informative / len(rows) if rows else 0.0,
        "carried_groups": sum(r.get("carried_groups", 0) for r in rows),
        "max_carried_staleness": max((s for r in rows for s in r.get("carried_staleness", ())), default=0),
        "median_update_s": statistics.median(r["iteration_s"] - r["sampling_s"] for r in rows) if rows else None,
        "informative_groups_per_wall_s": informative / wall if wall else 0.0,
        "informative_groups_per_sampling_s": informative / sampling if sampling else 0.0,
        "second_half_mean_reward": sum(r["mean_reward"] * r["sampled_episodes"] for r in late) / max(episodes, 1),
        "second_half_success": sum(r["success"] * r["sampled_episodes"] for r in late) / max(episodes, 1),
        "last_mean_reward": scored[-1]["mean_reward"] if scored else None,
        "filter": rows[-1].get("filter") if rows else None,
        "eval": evaluations(record),
    }


def evaluations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's evaluations on the whole pool (``--eval-every``), each with the sampled tokens it came after."""
    points = [{"tokens": 0, **record["eval_start"]}] if record.get("eval_start") else []
    points += [{"tokens": r["cumulative_tokens"], **r["eval"]} for r in record["iterations"] if r.get("eval")]
    return [{k: round(v, 4) if isinstance(v, float) else v for k, v in p.items()} for p in points]


def plot(records: dict[str, dict[str, Any]], path: Path) -> None:
    """Mean reward against sampled tokens, and informative groups against wall seconds, of each run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install agent_gym[report]): no plot", file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, record in records.items():
        rows = record["iterations"]
        scored = [r for r in rows if r["mean_reward"] is not None]
        line, = left.plot([r["cumulative_tokens"] for r in scored], [r["mean_reward"] for r in scored], marker="o",
                          label=f"{name}: sampled episodes")
        points = evaluations(record)
        if points:
            left.plot([p["tokens"] for p in points], [p["mean_reward"] for p in points], marker="s", linestyle="--",
                      color=line.get_color(), label=f"{name}: whole pool (evaluation)")
        wall, informative, xs, ys = 0.0, 0, [0.0], [0]
        for r in rows:
            wall += r["iteration_s"]
            informative += r["informative_groups"]
            xs.append(wall)
            ys.append(informative)
        right.plot(xs, ys, marker=".", label=name)
    left.set_xlabel("sampled tokens")
    left.set_ylabel("mean reward (correct answers)")
    right.set_xlabel("wall seconds (sampling and updates)")
    right.set_ylabel("informative groups trained on")
    family = next(iter(records.values()))["family"]
    fig.suptitle(f"GRPO on ToolUse-v0 ({family}) at equal sampled tokens: with and without dynamic sampling")
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="lookup")
    parser.add_argument("--pool", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=4, help="groups trained on per iteration")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--token-budget", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=200, help="cap on iterations (default 200)")
    parser.add_argument("--early-cancel", type=float, default=None, metavar="P")
    parser.add_argument("--curriculum", action="store_true", help="the filtered run also draws by pass rate")
    parser.add_argument("--carry-over", type=int, default=0, metavar="N",
                        help="the filtered run carries up to N surplus informative groups into the next update")
    parser.add_argument("--max-staleness", type=int, default=None,
                        help="most updates a carried group may lag (default 1)")
    parser.add_argument("--n-parallel", type=int, default=8,
                        help="episodes sampled at once, in both runs (default 8)")
    parser.add_argument("--skip-zero-advantage", action="store_true",
                        help="both runs leave episodes of advantage 0 out of the update's compute (the unfiltered "
                             "run's update then costs its informative groups only)")
    parser.add_argument("--eval-every", type=int, default=None, metavar="TOKENS",
                        help="evaluate both runs on the whole pool at the start, every TOKENS sampled tokens and at "
                             "the end (not counted in their seconds or tokens)")
    parser.add_argument("--eval-samples", type=int, default=4, help="episodes per task of an evaluation (default 4)")
    parser.add_argument("--out", default="scripts/results/grpo_batches")
    parser.add_argument("--only", choices=RUNS, default=None, help="run only this one (the other's record is read)")
    parser.add_argument("--compare-only", action="store_true",
                        help="run nothing: compare the records under --out, each cut at the tokens both reached")
    args = parser.parse_args(argv)
    out = Path(args.out)
    common = {"family": args.family, "iterations": args.iterations, "tasks_per_iteration": args.tasks,
              "group_size": args.group_size, "lr": args.lr, "pool_size": args.pool, "seed": args.seed,
              "token_budget": args.token_budget, "n_parallel": args.n_parallel,
              "skip_zero_advantage": args.skip_zero_advantage, "eval_every": args.eval_every,
              "eval_samples": args.eval_samples}
    options = {"unfiltered": {}, "filtered": {"dynamic_sampling": True, "early_cancel": args.early_cancel,
                                              "curriculum": args.curriculum, "carry_over": args.carry_over,
                                              "max_staleness": args.max_staleness}}
    ran = {name: run(**common, **options[name], out=out / name) for name in RUNS
           if not args.compare_only and args.only in (None, name)}
    records = {name: ran[name] if name in ran else json.loads((out / name / "rewards.json").read_text())
               for name in RUNS}
    reached = min(r["iterations"][-1]["cumulative_tokens"] for r in records.values())
    records = {name: equal_tokens(record, reached) for name, record in records.items()}
    figures = {name: summarize(record) for name, record in records.items()}
    base = figures["unfiltered"]["informative_groups_per_wall_s"]
    update_s = statistics.median(r["iteration_s"] - r["sampling_s"] for record in records.values()
                                 for r in record["iterations"])
    matched = {name: f["informative_groups"] / (f["sampling_s"] + f["iterations"] * update_s)
               for name, f in figures.items()}
    comparison = {"command": "python scripts/batch_comparison.py " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
                  "runs": figures,
                  "informative_per_wall_s_ratio": figures["filtered"]["informative_groups_per_wall_s"] / base
                  if base else None,
                  "pooled_median_update_s": update_s,
                  "update_matched_ratio": (matched["filtered"] / matched["unfiltered"]
                                           if matched["unfiltered"] else None)}
    (out / "comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    plot(records, out / "comparison.png")
    print(json.dumps(comparison, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
