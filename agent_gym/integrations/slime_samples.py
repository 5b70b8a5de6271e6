"""slime/vime samples from the training contract: one status mapping, one metadata vocabulary.

Both slime paths build their samples here, so they agree field for field:
:func:`agent_gym.export.to_slime_samples` (dicts from episodes already collected) and
:func:`agent_gym.integrations.slime.generate` (slime's ``Sample`` objects, filled as the
episode ends). :func:`slime_fields` turns one episode into one dict per trainable segment
(:func:`~agent_gym.integrations.contract.training_segments`):

* ``tokens`` (prompt + response ids), ``response_length``, ``loss_mask`` (1 on sampled ids),
  ``rollout_log_probs`` (the server's, 0 where masked), ``reward``, ``status`` (slime's
  ``Sample.Status`` value, :func:`slime_status`), ``remove_sample``, ``weight_versions``
  (slime's: one version string per run of ids sampled under one version) and ``label``;
* ``metadata``: the keys of :data:`SAMPLE_METADATA_KEYS`.

An episode that failed for infrastructure reasons (``ENV_ERROR``, ``POLICY_ERROR``,
``TIMEOUT``) gives samples with an all-zero ``loss_mask`` and logprobs, reward 0.0,
``remove_sample=True`` (what makes slime drop the sample from the loss) and
``metadata["masked"]``; slime's GRPO post-process
(:func:`agent_gym.integrations.slime.reward_post_process`) leaves such samples out of their
group. A segment without response ids (an episode that failed before its first turn) becomes a
one-id masked row when a ``pad_token_id`` is given, so the trainer never sees an empty response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.integrations.contract import RewardAssignment, TrainingSegment, failure_reason, training_segments
from agent_gym.segments import trajectory_segments
from agent_gym.types import EpisodeStatus, Trajectory

__all__ = [
    "ABORT_TEXT",
    "SAMPLE_METADATA_KEYS",
    "SLIME_STATUS",
    "slime_fields",
    "slime_status",
]

SLIME_STATUS: dict[str, str] = {
    EpisodeStatus.ENV_DONE.value: "completed",
    EpisodeStatus.MAX_STEPS.value: "completed",
    EpisodeStatus.TRUNCATION.value: "truncated",
    EpisodeStatus.PROMPT_TRUNCATION.value: "truncated",
    EpisodeStatus.TIMEOUT.value: "failed",
    EpisodeStatus.ENV_ERROR.value: "failed",
    EpisodeStatus.POLICY_ERROR.value: "failed",
    EpisodeStatus.JUDGE_ERROR.value: "failed",
}
"""Episode status -> slime ``Sample.Status`` value; a request the server aborted is ``"aborted"``
(see :func:`slime_status`). Every ``failed`` or ``aborted`` sample is masked and removed."""

ABORT_TEXT = "finish_reason='abort'"
"""What the failure reason of an episode whose request the server aborted contains."""

SAMPLE_METADATA_KEYS: tuple[str, ...] = (
    "episode_status",
    "masked",
    "error",
    "agent_gym_rollout_id",
    "task_id",
    "group_key",
    "segment_index",
    "num_segments",
    "first_step",
    "last_step",
    "role",
    "parent_segment",
    "spawn_step",
    "role_reward",
    "agent_index",
    "loss_weight",
    "reward",
    "episode_reward",
    "reward_parts",
    "reward_assignment",
    "token_weight_versions",
)
"""The ``metadata`` keys both slime paths write for every sample:

``episode_status`` (the agent_gym status), ``masked`` (an infrastructure failure), ``error`` (why it
failed, else None), ``agent_gym_rollout_id`` (the episode's id), ``task_id``, ``group_key`` (the
advantage group: task, and role), the segment's position (``segment_index``, ``num_segments``,
``first_step``, ``last_step``) and lineage (``role``, ``parent_segment``, ``spawn_step``,
``role_reward``, ``agent_index``), ``loss_weight`` (``1 / K``), ``reward`` (what the sample
carries), ``episode_reward`` (the episode's own total, for logging), ``reward_parts`` (the
episode's reward metrics), ``reward_assignment`` and ``token_weight_versions`` (the weight
version of each response id, -1 on environment ids)."""


def slime_status(segment: TrainingSegment) -> str:
    """The ``Sample.Status`` value slime gets for a segment: ``completed``, ``truncated``, ``aborted`` or ``failed``.

    ``aborted`` is a request the server aborted (slime's own aborts, e.g. when it stops an
    over-sampled rollout); ``failed`` every other infrastructure failure. Both are masked.

    Args:
        segment: A segment from :func:`~agent_gym.integrations.contract.training_segments`.
    """
    if segment.status == EpisodeStatus.POLICY_ERROR.value and ABORT_TEXT in (failure_reason(segment.trajectory)
                                                                            or ""):
        return "aborted"
    if segment.masked:
        return "failed"
    return SLIME_STATUS.get(segment.status, "completed")


def slime_fields(
    trajectory: Trajectory,
    *,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    pad_token_id: int | None = None,
    include_empty: bool = False,
) -> list[dict[str, Any]]:
    """The slime fields of each trainable segment of one episode (see the module doc).

    Args:
        trajectory: The episode.
        reward_assignment: The reward each segment carries (``"episode"``, ``"split"``, ``"role"``).
        pad_token_id: Stand-in id of an empty prompt or response (the row is then masked);
            None drops a segment without response ids, unless ``include_empty``.
        include_empty: Keep segments without response ids as they are (``response_length`` 0)
            when no ``pad_token_id`` is given.

    Returns:
        One dict per kept segment, in order: the ``Sample`` fields and ``metadata``.
    """
    segments = training_segments(trajectory, reward_assignment=reward_assignment)
    raw = trajectory_segments(trajectory)
    assignment = str(RewardAssignment(reward_assignment))
    task = getattr(trajectory, "task", None)
    task = task if isinstance(task, Mapping) else None
    metrics = getattr(trajectory, "metrics", None) or {}
    parts = {k: v for k, v in metrics.items() if k.endswith("reward")}
    out = []
    for segment, source in zip(segments, raw, strict=True):
        prompt, response = segment.prompt_ids, segment.response_ids
        mask, logprobs = segment.response_mask, segment.response_logprobs
        if not response:
            if pad_token_id is None and not include_empty:
                continue
            if pad_token_id is not None:
                response, mask, logprobs = [pad_token_id], [0], [0.0]
        if not prompt and pad_token_id is not None:
            prompt = [pad_token_id]
        if segment.masked:
            mask, logprobs = [0] * len(response), [0.0] * len(response)
        reward = 0.0 if segment.masked else float(segment.reward)
        metadata = {
            "episode_status": segment.status,
            "masked": segment.masked,
            "error": failure_reason(trajectory) if segment.masked else None,
            "agent_gym_rollout_id": segment.rollout_id,
            "task_id": task.get("id") if task is not None else None,
            "group_key": segment.group_key,
            "segment_index": segment.index,
            "num_segments": segment.count,
            "first_step": source.first_step,
            "last_step": source.last_step,
            "role": segment.role,
            "parent_segment": segment.parent_segment,
            "spawn_step": segment.spawn_step,
            "role_reward": source.role_reward,
            "agent_index": segment.agent_index,
            "loss_weight": segment.loss_weight,
            "reward": reward,
            "episode_reward": segment.episode_reward,
            "reward_parts": dict(parts),
            "reward_assignment": assignment,
            "token_weight_versions": list(segment.weight_versions),
        }
        out.append({
            "tokens": prompt + response,
            "response_length": len(response),
            "loss_mask": mask,
            "rollout_log_probs": logprobs,
            "reward": reward,
            "status": slime_status(segment),
            "remove_sample": segment.masked,
            "weight_versions": [str(v) for v in segment.version_runs],
            "label": task.get("ground_truth") if task is not None else None,
            "metadata": metadata,
        })
    return out
