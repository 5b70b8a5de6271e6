"""Measure a tool-use model on held-out ToolUse-v0 tasks through the real rollout pipeline.

The tasks are the built-in ToolUse-v0 set (task generator seed 0), which the tiny agent's
training never sees: the first ``--per-family`` tasks of each family. Episodes run with
:func:`agent_gym.collect` and either a :class:`~agent_gym.policy.TransformersPolicy` on the
model directory (default: the embedded model) or a
:class:`~agent_gym.policy.VLLMPolicy` on a running server (``--server``, e.g.
``agent-gym serve``). Sampling is from the full distribution (top-k, top-p and min-p off).

Reported per family and overall, for each temperature:

* ``success``: episodes whose answer is correct (``res_reward > 0``);
* ``well_formed``: assistant turns that parse and either answer or call tools, every call
  naming a known tool with arguments that match its schema (a tool that then fails on the
  values, e.g. an unknown inventory item, still counts as a well-formed call);
* ``steps``: mean assistant turns per episode.

Command line::

    python -m agent_gym.models.evaluate_tiny_agent --per-family 30 --temperatures 0,1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["evaluate", "format_table", "held_out_tasks", "main", "score_trajectories"]


def held_out_tasks(per_family: int = 30) -> list[dict[str, Any]]:
    """The first ``per_family`` built-in ToolUse-v0 tasks of each family (never trained on)."""
    from agent_gym.envs.tool_use.tasks import TASK_FAMILIES, builtin_tasks

    if isinstance(per_family, bool) or not isinstance(per_family, int) or not 1 <= per_family <= 120:
        raise ValueError(f"per_family: expected an int in [1, 120], got {per_family!r}")
    tasks = builtin_tasks()
    return [t for family in TASK_FAMILIES for t in [x for x in tasks if x["family"] == family][:per_family]]


_MALFORMED_KINDS = ("unknown_tool", "bad_arguments", "too_many_calls")


def _well_formed(info: dict[str, Any]) -> bool:
    if info.get("parse_errors"):
        return False
    calls = info.get("tool_calls") or []
    if not calls:
        return "no <tool_call> and no <answer>" not in str(info.get("error", ""))
    return all(c.get("kind") not in _MALFORMED_KINDS for c in calls)


def score_trajectories(trajectories: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Success, well-formed turns and mean steps, per task family and ``"all"``."""
    groups: dict[str, list[Any]] = {}
    for t in trajectories:
        family = str((t.task or {}).get("family", "other"))
        groups.setdefault(family, []).append(t)
    groups["all"] = list(trajectories)
    table: dict[str, dict[str, float]] = {}
    for family, items in groups.items():
        turns = [s for t in items for s in t.steps]
        ok_turns = sum(1 for s in turns if _well_formed(s.info or {}))
        table[family] = {
            "episodes": len(items),
            "success": sum(1 for t in items if float(t.metrics["res_reward"]) > 0) / max(1, len(items)),
            "well_formed": ok_turns / max(1, len(turns)),
            "steps": len(turns) / max(1, len(items)),
        }
    return table


def evaluate(
    model: str | None = None,
    *,
    per_family: int = 30,
    temperatures: Sequence[float] = (0.0, 1.0),
    server: str | None = None,
    n_parallel: int = 8,
    max_tokens: int = 128,
    max_steps: int = 6,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the held-out tasks at each temperature and score them.

    Args:
        model: Model directory (default: the embedded model); with ``server``, the tokenizer
            path for token-in requests (default: the embedded model's).
        per_family: Tasks per family.
        temperatures: Sampling temperatures (0 is greedy).
        server: Base URL of a vLLM-compatible server; None runs the model in-process.
        n_parallel: Concurrent episodes.
        max_tokens: Most sampled ids per turn.
        max_steps: Most assistant turns per episode.
        seed: Sampling seed.

    Returns:
        ``{"model", "backend", "tasks", "results": {temperature: table}, "seconds": {...}}``.
    """
    from agent_gym import collect
    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams

    path = str(model or default_model_path())
    tasks = held_out_tasks(per_family)
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for temperature in temperatures:
        sampling = SamplingParams(temperature=float(temperature), top_k=-1, top_p=1.0, min_p=0.0,
                                  max_tokens=max_tokens, seed=seed)
        if server:
            from agent_gym.policy import VLLMPolicy

            policy: Any = VLLMPolicy(server, path, sampling)
        else:
            from agent_gym.policy import TransformersPolicy

            policy = TransformersPolicy(path, sampling=sampling)
        started = time.perf_counter()
        try:
            trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=n_parallel,
                                   max_steps=max_steps, progress=False, seed=seed)
        finally:
            policy.close()
        seconds[str(temperature)] = round(time.perf_counter() - started, 1)
        results[str(temperature)] = score_trajectories(trajectories)
    return {
        "model": path,
        "backend": f"VLLMPolicy {server}" if server else "TransformersPolicy",
        "tasks": len(tasks),
        "results": results,
        "seconds": seconds,
    }


def format_table(report: dict[str, Any]) -> str:
    """A Markdown table: one row per family, success and well-formed turns per temperature."""
    temps = list(report["results"])
    head = "| family | " + " | ".join(f"success T={t} | well-formed T={t}" for t in temps) + " |"
    rule = "|---" * (1 + 2 * len(temps)) + "|"
    families = list(next(iter(report["results"].values())))
    rows = [head, rule]
    for family in [f for f in families if f != "all"] + ["all"]:
        cells = []
        for t in temps:
            row = report["results"][t][family]
            cells += [f"{row['success']:.0%}", f"{row['well_formed']:.0%}"]
        name = f"**{family}**" if family == "all" else family
        rows.append(f"| {name} ({report['results'][temps[0]][family]['episodes']:.0f}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m agent_gym.models.evaluate_tiny_agent",
        description="Success and well-formed tool calls of a model on held-out ToolUse-v0 tasks.",
    )
    parser.add_argument("--model", default=None, help="model directory (default: the embedded model)")
    parser.add_argument("--server", default=None, help="URL of a vLLM-compatible server (default: in-process)")
    parser.add_argument("--per-family", type=int, default=30, help="held-out tasks per family (default 30)")
    parser.add_argument("--temperatures", default="0,1", help="comma-separated temperatures (default 0,1)")
    parser.add_argument("--n-parallel", type=int, default=8, help="concurrent episodes (default 8)")
    parser.add_argument("--max-tokens", type=int, default=128, help="sampled ids per turn (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--json", default=None, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    temps = [float(t) for t in args.temperatures.split(",") if t.strip()]
    report = evaluate(args.model, per_family=args.per_family, temperatures=temps, server=args.server,
                      n_parallel=args.n_parallel, max_tokens=args.max_tokens, seed=args.seed)
    print(f"{report['tasks']} held-out tasks, {report['backend']}, model {report['model']}")
    print(format_table(report))
    print("seconds per temperature: " + ", ".join(f"T={k}: {v}" for k, v in report["seconds"].items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
