"""The training contract every trainer adapter follows.

An episode is one ``rollout_id``. When memory or subagents split it into several
trainable segments, the segments are siblings under that id, never separate
rollouts. Advantage groups are keyed by the task (and the role in multi-agent
episodes), never by position in a batch. The reward each segment carries follows a
named :class:`RewardAssignment`, and each segment has a loss weight (``1 / K`` for an
episode of ``K`` segments) for trainers that take one. An episode that failed for
infrastructure reasons (server down, env error, timeout) is flagged ``masked`` so
the trainer leaves it out of the loss instead of learning from a zero reward.

:func:`training_segments` turns one trajectory into its :class:`TrainingSegment`
list, and :func:`group_advantages` normalises rewards within task groups with each
rollout counted once, however many segments it has; :func:`neutral_rewards` gives the
rewards to hand a trainer that computes those baselines itself, with masked rollouts
neutral in them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from agent_gym.segments import trajectory_segments
from agent_gym.types import EpisodeStatus, Trajectory

__all__ = [
    "INFRA_FAILURE_STATUSES",
    "RewardAssignment",
    "TrainingSegment",
    "advantage_group_key",
    "failure_reason",
    "filler_token_id",
    "group_advantages",
    "is_infra_failure",
    "own_segments",
    "parse_task",
    "neutral_rewards",
    "training_segments",
]

INFRA_FAILURE_STATUSES: frozenset[str] = frozenset(
    {EpisodeStatus.ENV_ERROR.value, EpisodeStatus.POLICY_ERROR.value, EpisodeStatus.TIMEOUT.value,
     EpisodeStatus.JUDGE_ERROR.value}
)
"""Episode statuses that mean the infrastructure failed, not the policy: mask, never train on them
(``JUDGE_ERROR``: the judge that scores the episode failed, so the episode has no reward)."""


class RewardAssignment(str, Enum):
    """How an episode's reward is given to its segments.

    Attributes:
        EPISODE: Every segment carries the full episode reward (slime's behaviour).
        SPLIT: Each of the ``K`` segments carries ``reward / K``, so a long fan-out
            does not weigh more in the gradient than a one-segment episode.
        ROLE: Each segment carries its role's reward (``Segment.role_reward``, set by a
            multi-agent env), the episode reward where the env set none.
    """

    EPISODE = "episode"
    SPLIT = "split"
    ROLE = "role"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TrainingSegment:
    """One trainable sequence of an episode, as every adapter hands it to a trainer.

    Attributes:
        rollout_id: The episode's id, shared by all its segments.
        group_key: The advantage group (task id, plus the role when there is one).
        index: Position of the segment in its episode.
        count: Number of segments of the episode.
        prompt_ids: The segment's prompt token ids.
        response_ids: Sampled ids and the environment's ids between turns.
        response_mask: 1 on sampled ids, 0 on prompt, tool and user ids.
        response_logprobs: The server's logprob per response id, 0 where masked.
        reward: The reward this segment carries under the chosen assignment.
        episode_reward: The episode's total reward.
        loss_weight: ``1 / count`` (``1 / K_role`` in an episode with several roles): for
            trainers that weight samples.
        status: The agent_gym episode status.
        masked: True when the episode failed for infrastructure reasons.
        trajectory: The episode the segment belongs to.
        weight_versions: The weight version of each response id (-1 on environment ids
            and where unknown).
        version_runs: The version of each run of ids sampled under one version, in
            order (one per turn unless a weight update split the turn).
        role: The role of the agent whose turns these are ("" for the episode's own).
        parent_segment: Index of the segment whose agent spawned this one's, -1 for none.
        spawn_step: The parent's step that spawned it, -1 for none.
        agent_index: Which agent of the episode (0: its own; see ``Segment.agent_index``).
        own: Whether the segment is the episode's own agent's (not a subagent's or
            another role's): adapters that take one row per episode take the last own one.
    """

    rollout_id: str
    group_key: str
    index: int
    count: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    reward: float
    episode_reward: float
    loss_weight: float
    status: str
    masked: bool
    trajectory: Trajectory
    weight_versions: list[int] = field(default_factory=list)
    version_runs: list[int] = field(default_factory=list)
    role: str = ""
    parent_segment: int = -1
    spawn_step: int = -1
    own: bool = True
    agent_index: int = 0

    @property
    def advantage_id(self) -> str:
        """The unit counted once in its advantage group: the rollout, or one agent of it (role and agent index)."""
        if not self.role and not self.agent_index:
            return self.rollout_id
        return f"{self.rollout_id}/{self.role}#{self.agent_index}"

    @property
    def is_last(self) -> bool:
        """Whether this is the episode's final segment."""
        return self.index == self.count - 1

    @property
    def weight_version_start(self) -> int:
        """The oldest version of the segment's sampled ids (-1 when unknown): a trainer's staleness reference."""
        return min(self.version_runs, default=-1)

    @property
    def weight_version_end(self) -> int:
        """The newest version of the segment's sampled ids (-1 when unknown)."""
        return max(self.version_runs, default=-1)


def is_infra_failure(trajectory: Trajectory) -> bool:
    """Return True when the episode ended for infrastructure reasons (see :data:`INFRA_FAILURE_STATUSES`)."""
    return str(getattr(trajectory, "status", "") or "") in INFRA_FAILURE_STATUSES


def failure_reason(trajectory: Trajectory) -> str | None:
    """Why the episode failed (its last step's ``info["error"]``), or None.

    Every episode that ended in an error carries the reason there (``env.reset raised ...``,
    ``policy raised ServerError: ...``, ``episode exceeded episode_timeout=...``); adapters pass
    it on with the masked sample.
    """
    steps = getattr(trajectory, "steps", None) or []
    error = steps[-1].info.get("error") if steps else None
    return str(error) if error else None


def filler_token_id(tokenizer: Any) -> int:
    """The id that stands in, masked, for the empty prompt or response of an episode that failed before sampling.

    Trainers need at least one id on each side of a row; adapters give such an episode one
    masked id instead of an empty list: the tokenizer's pad id, else its eos id, else 0.

    Args:
        tokenizer: A Hugging Face tokenizer, or None.
    """
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


def advantage_group_key(trajectory: Trajectory, role: str | None = None) -> str:
    """Return the key of the advantage group ``trajectory`` belongs to.

    The key is the task's id when the task has one, else the trajectory's
    ``group_id`` (shared by the samples of one task in ``collect``), else its
    ``rollout_id``; ``role`` (multi-agent episodes) is appended after ``"/"``.

    Args:
        trajectory: An episode.
        role: The role whose turns are grouped, if any.

    Returns:
        A string shared by exactly the episodes that should be compared.
    """
    task = getattr(trajectory, "task", None)
    task_id = task.get("id") if isinstance(task, dict) else None
    key = str(task_id) if task_id not in (None, "") else (trajectory.group_id or trajectory.rollout_id)
    return key if role is None else f"{key}/{role}"


def training_segments(
    trajectory: Trajectory,
    *,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    role: str | None = None,
) -> list[TrainingSegment]:
    """Split one episode into the segments a trainer trains on.

    Segments with a ``role`` (subagents, multi-agent episodes) have their own advantage
    group per (task, role) and a loss weight of ``1 / K_role`` (``K_role``: the episode's
    segments of that role), so each (rollout, role) weighs one in the gradient.

    Args:
        trajectory: An episode from ``collect``, the gateway or a file.
        reward_assignment: ``"episode"`` (full reward on each segment), ``"split"``
            (``reward / K``) or ``"role"`` (the segment's ``role_reward``).
        role: Role appended to the advantage group key of every segment (default: each
            segment's own ``role``; none for the episode's own agent).

    Returns:
        At least one segment, in order.

    Raises:
        ValueError: ``reward_assignment`` is not a known assignment.
    """
    try:
        assignment = RewardAssignment(reward_assignment)
    except ValueError:
        names = ", ".join(repr(a.value) for a in RewardAssignment)
        raise ValueError(f"reward_assignment: expected one of {names}, got {reward_assignment!r}") from None
    segments = trajectory_segments(trajectory)
    count = len(segments)
    episode_reward = float(trajectory.trajectory_reward)
    masked = is_infra_failure(trajectory)
    status = str(getattr(trajectory, "status", "") or "")
    own_role = segments[0].role
    per_role: dict[str, int] = {}
    for segment in segments:
        per_role[segment.role] = per_role.get(segment.role, 0) + 1
    out = []
    own = True
    for i, segment in enumerate(segments):
        own = own and segment.role == own_role and segment.parent_segment < 0
        if assignment is RewardAssignment.EPISODE:
            reward = episode_reward
        elif assignment is RewardAssignment.SPLIT:
            reward = episode_reward / count
        else:
            reward = episode_reward if segment.role_reward is None else segment.role_reward
        out.append(TrainingSegment(
            rollout_id=trajectory.rollout_id,
            group_key=advantage_group_key(trajectory, role if role is not None else (segment.role or None)),
            index=i,
            count=count,
            prompt_ids=segment.prompt_tokens.tolist(),
            response_ids=segment.response_tokens.tolist(),
            response_mask=segment.response_masks.tolist(),
            response_logprobs=segment.response_logprobs.tolist(),
            reward=reward,
            episode_reward=episode_reward,
            loss_weight=1.0 / (per_role[segment.role] if len(per_role) > 1 else count),
            status=status,
            masked=masked,
            trajectory=trajectory,
            weight_versions=segment.weight_versions.tolist(),
            version_runs=segment.version_runs(),
            role=segment.role,
            parent_segment=segment.parent_segment,
            spawn_step=segment.spawn_step,
            own=own,
            agent_index=segment.agent_index,
        ))
    return out


def own_segments(segments: list[TrainingSegment]) -> list[TrainingSegment]:
    """The episode's own agent's segments (never empty: the first segment at least)."""
    return [s for s in segments if s.own] or segments[:1]


def _rollouts(items: Iterable[tuple[str, str, float, bool]]) -> dict[str, tuple[str, float, bool]]:
    """``rollout_id -> (group_key, reward, masked)``, each rollout once (see :func:`group_advantages`)."""
    seen: dict[str, tuple[str, float, bool]] = {}
    for group_key, rollout_id, reward, masked in items:
        entry = (group_key, float(reward), bool(masked))
        previous = seen.setdefault(rollout_id, entry)
        if previous[:2] != entry[:2]:
            raise ValueError(
                f"rollout {rollout_id!r}: expected one group and reward for all its samples, got {previous[:2]} and "
                f"{entry[:2]}"
            )
    return seen


def group_advantages(
    items: Iterable[tuple[str, str, float, bool]], *, normalize_std: bool = True, eps: float = 1e-6
) -> dict[str, float]:
    """GRPO advantages per rollout, with groups keyed by task and each rollout counted once.

    Args:
        items: ``(group_key, rollout_id, reward, masked)`` per sample; the several
            samples (segments) of one rollout repeat its id and are counted once (in an
            episode with roles, pass ``TrainingSegment.advantage_id``: each (rollout, role) once).
            Masked rollouts take no part in their group's statistics and get 0.
        normalize_std: Divide by the group's standard deviation (GRPO) or only
            subtract the mean (Dr. GRPO).
        eps: Added to the standard deviation.

    Returns:
        ``rollout_id -> advantage``.

    Raises:
        ValueError: One rollout id appears with two different groups or rewards.
    """
    seen = _rollouts(items)
    groups: dict[str, list[tuple[str, float]]] = {}
    for rollout_id, (group_key, reward, masked) in seen.items():
        if not masked:
            groups.setdefault(group_key, []).append((rollout_id, reward))
    advantages = dict.fromkeys(seen, 0.0)
    for members in groups.values():
        rewards = [reward for _, reward in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        for rollout_id, reward in members:
            centred = reward - mean
            advantages[rollout_id] = centred / (std + eps) if normalize_std else centred
    return advantages


def neutral_rewards(items: Iterable[tuple[str, str, float, bool]]) -> dict[str, float]:
    """The reward each rollout hands a trainer that computes its group baselines itself.

    A trainer such as SkyRL, whose generator hands over a whole batch, averages every sample
    of a group into the baseline and takes no "leave this sample out" flag. A masked rollout
    (infrastructure failure) has its loss mask zeroed, so it yields no gradient; giving it its
    group's mean reward over the rollouts that did run keeps that mean (the baseline of its
    siblings) unchanged instead of pulling it toward a fake zero.

    Args:
        items: ``(group_key, rollout_id, reward, masked)`` per sample, as for
            :func:`group_advantages` (segments of one rollout repeat its id).

    Returns:
        ``rollout_id -> reward``: the rollout's own reward, or for a masked rollout the mean
        reward of the unmasked rollouts of its group (0.0 when none ran).

    Raises:
        ValueError: One rollout id appears with two different groups or rewards.
    """
    seen = _rollouts(items)
    totals: dict[str, list[float]] = {}
    for group_key, reward, masked in seen.values():
        if not masked:
            totals.setdefault(group_key, []).append(reward)
    out: dict[str, float] = {}
    for rollout_id, (group_key, reward, masked) in seen.items():
        if not masked:
            out[rollout_id] = reward
        else:
            ran = totals.get(group_key)
            out[rollout_id] = sum(ran) / len(ran) if ran else 0.0
    return out


def parse_task(value: Any, name: str) -> dict[str, Any] | None:
    """The task a trainer's dataset row carries: a dict, or its JSON text (None stays None).

    Args:
        value: The row's value.
        name: The row field, for error messages.

    Returns:
        A new task dict, or None.

    Raises:
        ValueError: ``value`` is text that is not JSON.
        TypeError: ``value`` is neither a mapping nor JSON text of one.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}: expected a task dict or its JSON text, got {value[:80]!r}") from exc
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a task dict, got {type(value).__name__}")
    return dict(value)
