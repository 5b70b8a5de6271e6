"""Trainable segments of an episode: how a trajectory expands into (prompt, response, mask) sequences.

An episode has one segment unless its prompt was rewritten (by memory); the
segments are built by the wrapper's token assembly and stored in
``StepTrajectory.segments``. :func:`trajectory_segments` is the one place that
turns any trajectory into its list of segments (a trajectory without
``segments`` is one segment made of its top-level tensors);
:func:`split_segments` turns episodes into one record per segment (the engine's
output, each made by :func:`segment_record` with ``dataclasses.replace``) and the
slime export writes one sample per such record.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

from agent_gym.types import Segment, StepTrajectory, Trajectory

__all__ = ["segment_record", "split_segments", "trajectory_segments"]


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
        import torch

        logprobs = torch.zeros(len(trajectory.response_tokens), dtype=torch.float32)
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


def segment_record(trajectory: StepTrajectory, segment: Segment) -> StepTrajectory:
    """Return ``trajectory`` narrowed to one of its segments.

    The record carries the segment's tokens at the top level, ``segments=[segment]``
    and the steps the segment covers (all of them when the range is empty); every
    other field is the episode's, copied by ``dataclasses.replace`` so a field added
    to ``StepTrajectory`` later is carried too. Mutable values (lists, dicts) are
    shallow copies: labelling one record does not change its siblings.

    Args:
        trajectory: The episode.
        segment: One of its segments.

    Returns:
        A new record.
    """
    steps = trajectory.steps[segment.first_step : segment.last_step + 1] or trajectory.steps
    narrowed: dict[str, Any] = {
        "prompt_tokens": segment.prompt_tokens,
        "response_tokens": segment.response_tokens,
        "response_masks": segment.response_masks,
        "response_logprobs": segment.response_logprobs,
        "steps": list(steps),
        "segments": [segment],
    }
    copies: dict[str, Any] = {
        f.name: copy.copy(value)
        for f in dataclasses.fields(trajectory)
        if f.init and f.name not in narrowed and isinstance(value := getattr(trajectory, f.name), (list, dict))
    }
    return dataclasses.replace(trajectory, **narrowed, **copies)


def split_segments(trajectories: Sequence[StepTrajectory]) -> list[StepTrajectory]:
    """Return one record per trainable segment; segments of an episode share ``rollout_id``.

    An episode with one segment comes back as it is; a multi-segment one becomes
    one :func:`segment_record` per segment (reward, metrics, status, ids and every
    other field are the episode's).

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
        else:
            out.extend(segment_record(trajectory, segment) for segment in segments)
    return out
