"""Each trainer path of the training contract over a batch of :class:`training_faults.Episode`.

For every path, :class:`PathRun` holds what the path hands its trainer and the rows the trainer's own
statistics see: ``(kind, group, ids in the loss, advantage)`` per row (kind "" for a healthy
episode), and the advantages the healthy rows would get without the failed ones. :func:`counts`
turns that into, per failure kind: rows, unmasked ids (ids of a failed episode with loss mask 1) and
fake rewards (failed rows with an advantage, and healthy rows whose advantage or baseline a failed
row moved).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from slime_types import Sample
from training_faults import FAILURE_KINDS, Episode

from agent_gym.export import to_slime_samples
from agent_gym.integrations.engine import training_records
from agent_gym.integrations.skyrl import AgentGymGenerator
from agent_gym.integrations.slime import episode_samples, reward_post_process
from agent_gym.integrations.verl import agent_loop_fields
from agent_gym.integrations.verl_advantage import grpo_advantages

Row = tuple[str, str, int, float]
"""``(kind, group, ids in the loss, advantage)`` of one trainer row; kind "" for a healthy episode."""


@dataclasses.dataclass
class PathRun:
    """One path over the batch.

    Attributes:
        outputs: What the path hands its trainer, one entry per row.
        owners: The batch position of each row's episode.
        rows: The rows the trainer's statistics see.
        expected: Row position -> the advantage of a healthy row computed without the failed rows.
    """

    outputs: list[Any]
    owners: list[int]
    rows: list[Row]
    expected: dict[int, float]

    def failed(self, episodes: Sequence[Episode], kind: str | None = None) -> list[Any]:
        """The outputs of failed episodes (of one kind)."""
        return [o for o, i in zip(self.outputs, self.owners, strict=True)
                if episodes[i].failed and (kind is None or episodes[i].kind == kind)]


def counts(run: PathRun, tolerance: float = 1e-5) -> dict[str, tuple[int, int, int]]:
    """Per failure kind: ``(rows, unmasked ids, fake rewards)``."""
    kinds = {group: kind for kind, group, _, _ in run.rows if kind}
    tally = {kind: [0, 0, 0] for kind in FAILURE_KINDS}
    for i, (kind, group, ids, advantage) in enumerate(run.rows):
        if kind:
            tally[kind][0] += 1
            tally[kind][1] += ids
            tally[kind][2] += int(abs(advantage) > tolerance)
        elif group in kinds and abs(advantage - run.expected[i]) > tolerance:
            tally[kinds[group]][2] += 1  # a healthy sibling whose advantage the failed row moved
    return {kind: (c[0], c[1], c[2]) for kind, c in tally.items()}


def _group(episode: Episode) -> str:
    return str(episode.trajectory.task["id"])


def _owners(episodes: Sequence[Episode], rollout_ids: Sequence[str]) -> list[int]:
    by_id = {e.trajectory.rollout_id: i for i, e in enumerate(episodes)}
    return [by_id[r] for r in rollout_ids]


def grpo_reference(rows: Sequence[Row], scores: Sequence[float], *, eps: float = 1e-6) -> dict[int, float]:
    """GRPO advantages (unbiased std) of the healthy rows over the healthy rows of their group alone."""
    out: dict[int, float] = {}
    by_group: dict[str, list[int]] = {}
    for i, (kind, group, _, _) in enumerate(rows):
        if not kind:
            by_group.setdefault(group, []).append(i)
    for members in by_group.values():
        values = torch.tensor([scores[i] for i in members], dtype=torch.float64)
        for i in members:
            out[i] = float((scores[i] - values.mean()) / (values.std() + eps)) if len(members) > 1 else 0.0
    return out


# ---------------------------------------------------------------------------------------------- slime
def _slime(samples: list[Any], episodes: Sequence[Episode]) -> PathRun:
    """slime's GRPO post-process (``reward_post_process``) over the samples, and over the healthy ones alone."""
    args = SimpleNamespace(rewards_normalization=True, grpo_std_normalization=True)
    owners = _owners(episodes, [s.metadata["agent_gym_rollout_id"] for s in samples])
    _, advantages = reward_post_process(args, samples)
    rows = []
    for sample, owner, advantage in zip(samples, owners, advantages, strict=True):
        ids = 0 if sample.remove_sample else sum(sample.loss_mask)  # slime zeroes a removed sample's loss
        rows.append((episodes[owner].kind, sample.metadata["group_key"], ids, advantage))
    healthy = [i for i, row in enumerate(rows) if not row[0]]
    _, alone = reward_post_process(args, [samples[i] for i in healthy])
    return PathRun(samples, owners, rows, dict(zip(healthy, alone, strict=True)))


def slime_export(episodes: Sequence[Episode], pad: int | None) -> PathRun:
    """``export.to_slime_samples`` (as attribute objects, the way slime reads samples)."""
    samples = [SimpleNamespace(**s) for s in to_slime_samples([e.trajectory for e in episodes], pad_token_id=pad)]
    return _slime(samples, episodes)


def live_samples(episodes: Sequence[Episode], pad: int) -> list[Any]:
    """``integrations.slime.episode_samples`` (what ``generate`` returns), one slime group per task."""
    samples: list[Any] = []
    groups: dict[str, int] = {}
    for index, episode in enumerate(episodes):
        group = groups.setdefault(_group(episode), len(groups))
        sample = Sample(group_index=group, index=index, metadata={"task": episode.trajectory.task})
        out = episode_samples(sample, episode.trajectory, env_id=episode.trajectory.env_id,
                              sampling={"max_new_tokens": 64}, pad_token_id=pad)
        samples.extend(out if isinstance(out, list) else [out])
    return samples


def slime_generate(episodes: Sequence[Episode], pad: int) -> PathRun:
    """``integrations.slime`` samples through slime's GRPO post-process."""
    return _slime(live_samples(episodes, pad), episodes)


# ---------------------------------------------------------------------------------------------- verl
def verl(episodes: Sequence[Episode], pad: int) -> PathRun:
    """``agent_loop_fields`` as verl's tensors (reward on the last response id), the ``agent_gym_grpo`` estimator."""
    outputs = [agent_loop_fields(e.trajectory, prompt_length=4096, response_length=1024, pad_token_id=pad)["output"]
               for e in episodes]
    width = max(len(o["response_ids"]) for o in outputs)
    mask = torch.zeros(len(outputs), width)
    scores = torch.zeros(len(outputs), width)
    for i, o in enumerate(outputs):
        n = len(o["response_mask"])
        mask[i, :n] = torch.tensor(o["response_mask"], dtype=torch.float32)
        scores[i, n - 1] = o["reward_score"]
    index = [o["extra_fields"]["agent_gym_group_key"] for o in outputs]
    advantages, _ = grpo_advantages(scores, mask, index)

    def advantage(values: torch.Tensor, row_mask: torch.Tensor) -> float:
        trained = values[row_mask > 0]
        return float(trained[0]) if len(trained) else float(values.abs().max())

    rows = [(e.kind, index[i], int(mask[i].sum()), advantage(advantages[i], mask[i])) for i, e in enumerate(episodes)]
    healthy = [i for i, e in enumerate(episodes) if not e.failed]
    alone, _ = grpo_advantages(scores[healthy], mask[healthy], [index[i] for i in healthy])
    expected = {i: advantage(alone[k], mask[i]) for k, i in enumerate(healthy)}
    return PathRun(outputs, list(range(len(episodes))), rows, expected)


# ---------------------------------------------------------------------------------------------- mean baselines
def _mean_baseline(episodes: Sequence[Episode], outputs: list[Any], owners: list[int], rewards: Sequence[float],
                   ids: Sequence[int]) -> PathRun:
    """Rows of a trainer that centres rewards on the mean of every row of the group (SkyRL, the engine API)."""
    per_episode = dict(zip(owners, rewards, strict=True))  # the segments of an episode carry one reward
    everyone: dict[str, list[float]] = {}
    ran: dict[str, list[float]] = {}
    for owner, reward in per_episode.items():
        everyone.setdefault(_group(episodes[owner]), []).append(reward)
        if not episodes[owner].failed:
            ran.setdefault(_group(episodes[owner]), []).append(reward)
    rows = []
    expected = {}
    for i, (owner, reward) in enumerate(zip(owners, rewards, strict=True)):
        group = _group(episodes[owner])
        rows.append((episodes[owner].kind, group, ids[i], reward - sum(everyone[group]) / len(everyone[group])))
        if not episodes[owner].failed:
            expected[i] = reward - sum(ran[group]) / len(ran[group])
    return PathRun(outputs, owners, rows, expected)


def skyrl(episodes: Sequence[Episode], pad: int) -> PathRun:
    """``AgentGymGenerator.to_output`` rows (one per segment), centred on their group's mean."""
    out = AgentGymGenerator(None, pad_token_id=pad).to_output([e.trajectory for e in episodes])
    owners = _owners(episodes, [m["rollout_id"] for m in out["env_metrics"]])
    keys = [k for k in out if k != "rollout_metrics"]
    rows = [dict(zip(keys, values, strict=True)) for values in zip(*(out[k] for k in keys), strict=True)]
    return _mean_baseline(episodes, rows, owners, out["rewards"], [sum(m) for m in out["loss_masks"]])


def engine(episodes: Sequence[Episode], pad: int) -> PathRun:
    """``engine.training_records`` (what ``GymEngineWrapper`` returns), centred on their task's mean."""
    records = training_records([e.trajectory for e in episodes], pad_token_id=pad)
    owners = _owners(episodes, [r.rollout_id for r in records])
    return _mean_baseline(episodes, records, owners, [float(r.trajectory_reward) for r in records],
                          [int(r.response_masks.sum()) for r in records])


PATHS: dict[str, Callable[[Sequence[Episode], int], PathRun]] = {
    "slime export (to_slime_samples)": slime_export,
    "slime generate (episode_samples)": slime_generate,
    "verl (agent_loop_fields + agent_gym_grpo)": verl,
    "SkyRL (AgentGymGenerator)": skyrl,
    "engine API (training_records)": engine,
}
"""The paths whose trainer statistics run here; TRL's run inside a real ``GRPOTrainer`` in the test."""
