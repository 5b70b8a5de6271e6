"""RAGExplain-v0 with its default judge (the embedded model, in-process): what the rubric pays each kind of answer.

Run:  python benchmarks/judged_env.py [--split test] [--tasks 48]

For each task of the split, answers of known quality are graded by the env itself (``env.step`` on an
``<answer>``, the rubric of :func:`agent_gym.envs.rag.explain_env.explain_rubric`):

* ``reference``: the task's reference answer (the oracle);
* ``partial``: the reference's first clause (some of the facts);
* ``other``: the reference of another task of the same kind (fluent, on topic, wrong);
* ``wrong``: ``"42"``;
* the master keys of ``agent-gym judge-check`` (``""``, ``":"``, ``"Thought process:"``, the question echoed,
  ``"I don't know"``).

Printed per kind: the mean ``res_reward`` (the rubric's outcome), the mean ``facts`` (the rule) and ``judge``
scores, the share of answers the rubric pays >= 0.5 and the share the judge alone scores >= 0.5; then Cohen's
kappa of the judge's pass/fail against the rule's on the reference, partial, other and wrong answers, the
JUDGE_ERROR count, and the judge's cost (forward passes, cache hits, seconds per pass).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.judges.check import MASTER_KEYS, cohen_kappa

ENV_ID = "agent_gym/RAGExplain-v0"


def _answers(task: dict[str, Any], tasks: list[dict[str, Any]]) -> dict[str, str]:
    other = next(t for t in tasks if t["type"] == task["type"] and t["id"] != task["id"])
    out = {"reference": task["ground_truth"], "partial": task["ground_truth"].split(",")[0].split(". ")[0],
           "other": other["ground_truth"], "wrong": "42"}
    for key in MASTER_KEYS:
        out[f"master {key!r}"] = key.format(question=task["question"])
    return out


def run(split: str, count: int) -> dict[str, Any]:
    """Grade every kind of answer on ``count`` tasks of ``split``; return the figures."""
    env = gym.make(ENV_ID, split=split)
    tasks = [dict(t) for t in env.unwrapped.tasks][:count]
    rows: dict[str, list[dict[str, float]]] = {}
    usage = {"calls": 0, "cache_hits": 0, "seconds": 0.0}
    errors = 0
    started = time.perf_counter()
    for task in tasks:
        for kind, answer in _answers(task, tasks).items():
            env.reset(options={"task": task})
            _, _, _, _, info = env.step(f"<answer>{answer}</answer>")
            rubric = info["rubric"]
            for key in usage:
                usage[key] += rubric["judge"][key]
            if info["status"] == "JUDGE_ERROR":
                errors += 1
                continue
            rows.setdefault(kind, []).append({"res": info["res_reward"], "facts": rubric["scores"]["facts"],
                                              "judge": rubric["scores"]["judge"]})
    wall = time.perf_counter() - started
    env.close()
    table = {kind: {"answers": len(r), "res_reward": statistics.mean(x["res"] for x in r),
                    "facts": statistics.mean(x["facts"] for x in r), "judge": statistics.mean(x["judge"] for x in r),
                    "rubric_pass": sum(x["res"] >= 0.5 for x in r) / len(r),
                    "judge_pass": sum(x["judge"] >= 0.5 for x in r) / len(r)} for kind, r in rows.items()}
    graded = [x for kind in ("reference", "partial", "other", "wrong") for x in rows.get(kind, [])]
    kappa = cohen_kappa([x["facts"] >= 0.5 for x in graded], [x["judge"] >= 0.5 for x in graded])
    master = [x for kind, r in rows.items() if kind.startswith("master") for x in r]
    return {"split": split, "tasks": len(tasks), "kinds": table, "judge_kappa_vs_facts": kappa,
            "master_keys": {"answers": len(master), "rubric_paid": sum(x["res"] > 0 for x in master),
                            "judge_pass": sum(x["judge"] >= 0.5 for x in master)},
            "judge_errors": errors, "judge_usage": usage,
            "seconds_per_forward_pass": usage["seconds"] / usage["calls"] if usage["calls"] else None,
            "wall_seconds": wall}


def main() -> None:
    """Command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = run(args.split, args.tasks)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{ENV_ID}, split {result['split']}, {result['tasks']} tasks, default judge (embedded model, in-process)")
    print(f"{'answer':<24} {'n':>4} {'res_reward':>10} {'facts':>6} {'judge':>6} {'rubric>=.5':>10} {'judge>=.5':>9}")
    for kind, row in result["kinds"].items():
        print(f"{kind[:24]:<24} {row['answers']:>4} {row['res_reward']:>10.3f} {row['facts']:>6.3f} "
              f"{row['judge']:>6.3f} {row['rubric_pass']:>10.2f} {row['judge_pass']:>9.2f}")
    master = result["master_keys"]
    kappa = result["judge_kappa_vs_facts"]
    print(f"judge vs facts rule (reference/partial/other/wrong): kappa "
          f"{'n/a' if kappa is None else f'{kappa:.3f}'}")
    print(f"master keys: {master['rubric_paid']}/{master['answers']} paid anything by the rubric, "
          f"{master['judge_pass']}/{master['answers']} passed by the judge alone")
    usage = result["judge_usage"]
    per_pass = result["seconds_per_forward_pass"]
    print(f"JUDGE_ERROR: {result['judge_errors']}; judge forward passes {usage['calls']}, cache hits "
          f"{usage['cache_hits']}, {'n/a' if per_pass is None else f'{per_pass * 1000:.1f}'} ms per pass; "
          f"wall {result['wall_seconds']:.1f} s")


if __name__ == "__main__":
    main()
