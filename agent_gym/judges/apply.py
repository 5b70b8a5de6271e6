"""Score collected episodes with a rubric: rewards rewritten, judge failures made ``JUDGE_ERROR``, judge calls kept.

:func:`judge_trajectories` groups episodes by task (the advantage groups of the training contract),
scores each group with a :class:`~agent_gym.judges.rubric.Rubric` and rewrites each episode in place:

* scored: the rubric's outcome replaces the episode's outcome (``metrics["res_reward"]`` =
  ``correct * outcome``, the difference put on the last step's ``info["res_reward"]`` and reward),
  the rubric's shaping is added to the last step's reward and to ``metrics["toolcall_reward"]`` (the
  episode's shaping), returns are recomputed, and the last step's ``info["rubric"]`` holds each
  criterion's score, the outcome, the shaping and the judge's usage;
* a judge failed: the episode's status becomes ``JUDGE_ERROR`` (an infrastructure failure every trainer
  adapter and exporter masks), ``info["error"]`` says why, and its rewards are left as they were: it is
  never trained on, never a zero. A re-grade (:func:`judge_trajectories` again) retries it.

Episodes that already failed for infrastructure reasons are left alone. The judge's own calls come back
as trainable records (:func:`judge_records`, one per call, ``role="judge"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.integrations.contract import advantage_group_key, is_infra_failure
from agent_gym.judges.llm import JUDGE_ROLE, JudgeCall
from agent_gym.judges.rubric import JudgedEpisode, Rubric, RubricScore
from agent_gym.types import EpisodeStatus, PolicyOutput, Step, StepTrajectory, compute_mc_return
from agent_gym.utils.runtime import run_sync
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

__all__ = ["JudgingReport", "ajudge_trajectories", "judge_records", "judge_trajectories"]

JUDGE_ERROR_REASON = "judge_error"


@dataclass
class JudgingReport:
    """What :func:`judge_trajectories` did.

    Attributes:
        scored: Episodes the rubric scored.
        failed: Episodes that ended ``JUDGE_ERROR``.
        skipped: Episodes left alone (already an infrastructure failure).
        failures: Failed episodes per failure kind.
        usage: The judge's calls, cache hits, failed calls, tokens and seconds, summed.
        calls: Every judge call, with the rollout id of the episode it was made for.
    """

    scored: int = 0
    failed: int = 0
    skipped: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    calls: list[tuple[str, JudgeCall]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the calls)."""
        return {"scored": self.scored, "failed": self.failed, "skipped": self.skipped,
                "failures": dict(self.failures), "usage": dict(self.usage)}


async def ajudge_trajectories(trajectories: Sequence[StepTrajectory], rubric: Rubric, *, correct: float = 1.0,
                              gamma: float = 1.0) -> JudgingReport:
    """Score ``trajectories`` with ``rubric``, group by group, rewriting them in place (see the module doc).

    Args:
        trajectories: Episodes from ``collect`` or a file.
        rubric: The rubric.
        correct: The reward of a fully correct outcome (the env's ``rewards.correct``).
        gamma: The discount the episodes' returns were computed with.
    """
    import asyncio

    groups: dict[str, list[StepTrajectory]] = {}
    report = JudgingReport()
    for trajectory in trajectories:
        if is_infra_failure(trajectory) and trajectory.status != EpisodeStatus.JUDGE_ERROR.value:
            report.skipped += 1
            continue
        groups.setdefault(advantage_group_key(trajectory), []).append(trajectory)
    members = list(groups.values())
    results = await asyncio.gather(*(rubric.ascore([JudgedEpisode.from_trajectory(t) for t in group])
                                     for group in members))
    totals: dict[str, float] = {}
    for group, scores in zip(members, results, strict=True):
        for trajectory, score in zip(group, scores, strict=True):
            _apply(trajectory, score, correct, gamma)
            for key, value in score.log.usage().items():
                totals[key] = totals.get(key, 0) + value
            report.calls.extend((trajectory.rollout_id, call) for call in score.log.calls)
            if score.failure is None:
                report.scored += 1
            else:
                report.failed += 1
                report.failures[score.failure.kind] = report.failures.get(score.failure.kind, 0) + 1
    report.usage = totals
    return report


def judge_trajectories(trajectories: Sequence[StepTrajectory], rubric: Rubric, *, correct: float = 1.0,
                       gamma: float = 1.0) -> JudgingReport:
    """Blocking :func:`ajudge_trajectories` (safe where an event loop runs)."""
    policies = {id(j.policy): j.policy for j in rubric.judges()}
    return run_sync(lambda: ajudge_trajectories(trajectories, rubric, correct=correct, gamma=gamma),
                    release=list(policies.values()))


def _apply(trajectory: StepTrajectory, score: RubricScore, correct: float, gamma: float) -> None:
    """Write ``score`` into ``trajectory`` (see the module doc)."""
    last = trajectory.steps[-1]
    info = dict(last.info)
    info["rubric"] = score.info()
    if score.failure is not None or score.outcome is None:
        reason = str(score.failure) if score.failure is not None else "the rubric has no outcome criterion"
        info.update(status=EpisodeStatus.JUDGE_ERROR.value, end_reason=JUDGE_ERROR_REASON,
                    error=f"judge failed: {reason}")
        last.info = info
        trajectory.status = EpisodeStatus.JUDGE_ERROR.value
        return
    if trajectory.status == EpisodeStatus.JUDGE_ERROR.value:  # a re-grade that now succeeded
        previous = info.get("judged_status") or EpisodeStatus.ENV_DONE.value
        trajectory.status = str(previous)
        info.update(status=trajectory.status, end_reason=info.get("judged_end_reason") or "answer")
        info.pop("error", None)
    else:
        info.setdefault("judged_status", trajectory.status)
        info.setdefault("judged_end_reason", info.get("end_reason"))
    new_outcome = correct * score.outcome
    delta = new_outcome - float(trajectory.metrics.get("res_reward", 0.0))
    info["res_reward"] = float(info.get("res_reward", 0.0)) + delta
    last.info = info
    last.reward = float(last.reward) + delta + score.shaping
    trajectory.metrics["res_reward"] = new_outcome
    trajectory.metrics["toolcall_reward"] = float(trajectory.metrics.get("toolcall_reward", 0.0)) + score.shaping
    compute_mc_return(trajectory.steps, gamma)
    trajectory.trajectory_reward = sum(float(s.reward) for s in trajectory.steps)


def judge_records(report: JudgingReport, trajectories: Sequence[StepTrajectory]) -> list[StepTrajectory]:
    """The judge's calls as trainable episodes: one record per call that returned ids, one ``judge`` segment each.

    Each record's ``rollout_id`` is ``"<episode's rollout id>/judge/<k>"``, its task the judged episode's
    (so advantage groups stay per task and role), its status ``ENV_DONE`` (``JUDGE_ERROR`` for a call that
    gave no verdict: masked), its reward 0.0 (set ``Segment.role_reward`` to train the judge toward a
    target, e.g. agreement with a rule grader).

    Args:
        report: From :func:`judge_trajectories`.
        trajectories: The judged episodes (for their tasks and group ids).
    """
    by_id = {t.rollout_id: t for t in trajectories}
    counters: dict[str, int] = {}
    out: list[StepTrajectory] = []
    for rollout_id, call in report.calls:
        segment = call.segment()
        if segment is None:
            continue
        k = counters.get(rollout_id, 0)
        counters[rollout_id] = k + 1
        episode = by_id.get(rollout_id)
        status = EpisodeStatus.JUDGE_ERROR.value if call.failure else EpisodeStatus.ENV_DONE.value
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in call.messages]
        step = Step(chat_completions=messages, model_response=call.text, done=True,
                    info={"status": status, "judge_call": call.kind, "failure": call.failure})
        builder = TrajectoryBuilder(f"{rollout_id}/{JUDGE_ROLE}/{k}", task=episode.task if episode else None,
                                    group_id=episode.group_id if episode else "", role=JUDGE_ROLE)
        builder.steps.append(step)
        builder.add_output(0, PolicyOutput(text=call.text, prompt_token_ids=list(segment.prompt_tokens.tolist()),
                                           token_ids=list(segment.response_tokens.tolist()),
                                           logprobs=list(segment.response_logprobs.tolist())))
        out.append(builder.build(status, conversation=[*messages, {"role": "assistant", "content": call.text}]))
    return out
