"""Trainable segments of an episode: how a trajectory expands into (prompt, response, mask) sequences.

An episode has one segment unless its prompt was rewritten (by memory); the
segments are built by the wrapper's token assembly and stored in
``StepTrajectory.segments``. :func:`trajectory_segments` is the one place that
turns any trajectory into its list of segments (a trajectory without
``segments`` is one segment made of its top-level tensors);
:func:`split_segments` turns episodes into one record per segment (the engine's
output) and the slime export writes one sample per segment, both through it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_gym.types import Segment, StepTrajectory, Trajectory

__all__ = ["split_segments", "trajectory_segments"]


def trajectory_segments(trajectory: Trajectory) -> list[Segment]:
    """Return the trainable segments of ``trajectory``, in order.

    Args:
        trajectory: A ``StepTrajectory`` (its ``segments``) or any ``Trajectory``
            (one segment from its top-level tensors; logprobs 0 when unknown).

    Returns:
        At least one segment.
    """
    segments = list(getattr(trajectory, "segments", None) or [])
    if segments:
        return segments
    logprobs = trajectory.response_logprobs
    if logprobs is None:
        logprobs = [0.0] * len(trajectory.response_tokens)
    steps = getattr(trajectory, "steps", None) or []
    return [
        Segment(
            prompt_tokens=trajectory.prompt_tokens,
            response_tokens=trajectory.response_tokens,
            response_masks=trajectory.response_masks,
            response_logprobs=logprobs,
            first_step=0,
            last_step=max(len(steps) - 1, 0),
        )
    ]


def split_segments(trajectories: Sequence[StepTrajectory]) -> list[StepTrajectory]:
    """Return one record per trainable segment; segments of an episode share ``rollout_id``.

    An episode with one segment comes back as it is. Each record of a
    multi-segment episode carries its segment's tokens at the top level,
    ``segments=[segment]`` and the steps the segment covers; reward, metrics,
    status and ids are the episode's.

    Args:
        trajectories: Episodes from ``collect``.

    Returns:
        The per-segment records, in episode then segment order.
    """
    out: list[StepTrajectory] = []
    for trajectory in trajectories:
        segments = trajectory_segments(trajectory)
        if len(segments) == 1:
            out.append(trajectory)
            continue
        for segment in segments:
            steps = trajectory.steps[segment.first_step : segment.last_step + 1] or trajectory.steps
            out.append(
                StepTrajectory(
                    prompt_tokens=segment.prompt_tokens,
                    response_tokens=segment.response_tokens,
                    response_masks=segment.response_masks,
                    response_logprobs=segment.response_logprobs,
                    idx=trajectory.idx,
                    trajectory_reward=trajectory.trajectory_reward,
                    chat_completions=list(trajectory.chat_completions),
                    metrics=dict(trajectory.metrics),
                    rollout_id=trajectory.rollout_id,
                    group_id=trajectory.group_id,
                    status=trajectory.status,
                    retokenized=trajectory.retokenized,
                    task=trajectory.task,
                    steps=list(steps),
                    segments=[segment],
                )
            )
    return out
