"""A judge's self-test: agreement with a rule grader, position bias, and "master key" answers it must fail.

:func:`judge_check` runs a judge over an env's shipped tasks:

* **agreement**: each task's reference answer (the env's oracle) and a wrong one (an answer the env's
  rule grader scores 0) are judged pointwise; a judge score >= 0.5 is a pass. Cohen's kappa of the
  judge's pass/fail against the rule grader's, over the answers the judge gave a verdict for;
* **position bias**: each (right, wrong) pair is compared in both orders; the flip rate is the share of
  pairs whose verdict changed with the order;
* **master keys**: answers that carry nothing (``""``, ``":"``, ``"Thought process:"``, the question
  echoed, ``"I don't know"``) must never pass; their pass rate must be 0.

Judge failures (no verdict) are counted apart, never as a pass or a fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.errors import JudgeError
from agent_gym.judges.llm import LLMJudge

__all__ = ["MASTER_KEYS", "cohen_kappa", "format_check", "judge_check", "wrong_answer"]

MASTER_KEYS: tuple[str, ...] = ("", ":", "Thought process:", "{question}", "I don't know")
"""Answers with no content a judge must fail (``{question}``: the question echoed)."""

_PASS = 0.5


def cohen_kappa(rule: Sequence[bool], judge: Sequence[bool]) -> float | None:
    """Cohen's kappa of two raters' pass/fail labels (None for no labels; 1.0 when both always agree on one label).

    Args:
        rule: The first rater's labels.
        judge: The second's, same length.
    """
    if len(rule) != len(judge):
        raise ValueError(f"expected labels of equal length, got {len(rule)} and {len(judge)}")
    n = len(rule)
    if n == 0:
        return None
    observed = sum(a == b for a, b in zip(rule, judge, strict=True)) / n
    p_rule, p_judge = sum(rule) / n, sum(judge) / n
    expected = p_rule * p_judge + (1 - p_rule) * (1 - p_judge)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1 - expected)


def wrong_answer(grade: Any, task: Mapping[str, Any]) -> str | None:
    """An answer the rule grader scores 0 for ``task`` (None when every candidate scores above 0)."""
    truth = str(task.get("ground_truth", ""))
    candidates = []
    try:
        candidates.append(str(round(float(truth) + 7.25, 2)))
    except ValueError:
        pass
    candidates += [f"not {truth}", "42", "the answer is unknown to nobody: blue"]
    for candidate in candidates:
        try:
            if float(grade(task, candidate)) == 0.0:
                return candidate
        except (TypeError, ValueError, KeyError):
            continue
    return None


async def _score(judge: LLMJudge, question: str, reference: str, answer: str) -> float | str:
    try:
        return await judge.ascore(question, reference, answer)
    except JudgeError as exc:
        return exc.kind


async def _compare(judge: LLMJudge, question: str, reference: str, a: str, b: str) -> bool | str:
    try:
        return (await judge.acompare(question, reference, a, b)).flipped
    except JudgeError as exc:
        return exc.kind


async def ajudge_check(judge: LLMJudge, tasks: Sequence[Mapping[str, Any]], grade: Any,
                       oracle: Any) -> dict[str, Any]:
    """:func:`judge_check` on given tasks.

    Args:
        judge: The judge.
        tasks: Tasks with ``question`` and ``ground_truth``.
        grade: ``grade(task, answer) -> score`` (the rule grader).
        oracle: ``oracle(task) -> answer`` (a reference answer the rule grader passes).
    """
    rows: list[tuple[Mapping[str, Any], str, bool]] = []  # task, answer, rule pass
    pairs: list[tuple[Mapping[str, Any], str, str]] = []
    for task in tasks:
        right, wrong = str(oracle(task)), wrong_answer(grade, task)
        rows.append((task, right, float(grade(task, right)) >= _PASS))
        if wrong is not None:
            rows.append((task, wrong, False))
            pairs.append((task, right, wrong))
    keys = [(task, key.format(question=task["question"])) for task in tasks for key in MASTER_KEYS]
    scored = await asyncio.gather(*(_score(judge, str(t["question"]), str(t["ground_truth"]), a) for t, a, _ in rows))
    flips = await asyncio.gather(*(_compare(judge, str(t["question"]), str(t["ground_truth"]), a, b)
                                   for t, a, b in pairs))
    master = await asyncio.gather(*(_score(judge, str(t["question"]), str(t["ground_truth"]), a) for t, a in keys))
    rule_labels = [row[2] for row, s in zip(rows, scored, strict=True) if isinstance(s, float)]
    judge_labels = [s >= _PASS for s in scored if isinstance(s, float)]
    failures: dict[str, int] = {}
    for value in [*scored, *flips, *master]:
        if isinstance(value, str):
            failures[value] = failures.get(value, 0) + 1
    verdict_flips = [f for f in flips if isinstance(f, bool)]
    master_scored = [s for s in master if isinstance(s, float)]
    master_passed = [a for (_, a), s in zip(keys, master, strict=True) if isinstance(s, float) and s >= _PASS]
    return {
        "tasks": len(tasks),
        "agreement": {"answers": len(rows), "judged": len(judge_labels),
                      "agree": sum(a == b for a, b in zip(rule_labels, judge_labels, strict=True)),
                      "kappa": cohen_kappa(rule_labels, judge_labels)},
        "position": {"pairs": len(pairs), "judged": len(verdict_flips), "flips": sum(verdict_flips),
                     "flip_rate": sum(verdict_flips) / len(verdict_flips) if verdict_flips else None},
        "master_keys": {"answers": len(keys), "judged": len(master_scored), "passed": len(master_passed),
                        "pass_rate": len(master_passed) / len(master_scored) if master_scored else None,
                        "passed_answers": sorted(set(master_passed))[:10]},
        "failures": failures,
        "calls": judge.cache.misses if judge.cache is not None else None,
        "ok": not master_passed,
    }


def judge_check(judge: LLMJudge, env_id: str = "agent_gym/ToolUse-v0", *, tasks: int = 20,
                env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Self-test ``judge`` on the first ``tasks`` shipped tasks of ``env_id`` (see the module doc).

    Returns:
        ``{"tasks", "agreement": {"answers", "judged", "agree", "kappa"}, "position": {"pairs", "judged",
        "flips", "flip_rate"}, "master_keys": {"answers", "judged", "passed", "pass_rate", "passed_answers"},
        "failures": {kind: count}, "calls", "ok"}``; ``ok`` is False when a master key passed.
    """
    from agent_gym.judges.specs import rule_grader

    env, grade = rule_grader(env_id, env_kwargs)
    try:
        chosen = [dict(t) for t in list(env.tasks)[:tasks]]
        return judge.run(ajudge_check(judge, chosen, grade, env.oracle_answer))
    finally:
        env.close()


def format_check(result: Mapping[str, Any]) -> str:
    """The result of :func:`judge_check` as a few lines of text."""
    agreement, position, master = result["agreement"], result["position"], result["master_keys"]

    def number(value: Any) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    failures = ", ".join(f"{k}={v}" for k, v in sorted(result["failures"].items())) or "none"
    return "\n".join([
        f"tasks: {result['tasks']}",
        f"agreement with the rule grader: kappa {number(agreement['kappa'])} ({agreement['agree']}/"
        f"{agreement['judged']} judged answers agree; {agreement['answers']} asked)",
        f"position swap: flip rate {number(position['flip_rate'])} ({position['flips']}/{position['judged']} pairs)",
        f"master keys: pass rate {number(master['pass_rate'])} ({master['passed']}/{master['judged']} judged; "
        f"{master['answers']} asked)",
        f"judge failures (no verdict): {failures}",
        "result: " + ("ok" if result["ok"] else "FAILED: a master key answer passed"),
    ])
