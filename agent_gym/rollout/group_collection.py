"""``collect`` with a task sampler or dynamic sampling: groups planned round after round.

:func:`group_specs` lays out the episodes of groups whose task (and env) is chosen one group at a
time, numbered after the groups planned before, so the seeds and group ids of a run match
:func:`~agent_gym.rollout.planning.plan_episodes`'s for the same tasks. :func:`collect_groups` runs
rounds of groups until ``groups`` informative ones are in (every group counts without a
:class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling`), each round as many groups as are
still missing over the kept share seen so far (at most four times as many), capped by the filter's
``max_groups``. Each finished group is observed by the sampler (pass rates) before the filter judges
it. Rounds depend only on the seed and on the outcomes, so a seeded run with a seeded policy repeats.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent_gym.rollout.dynamic_sampling import DynamicSampling
from agent_gym.rollout.planning import EpisodeSpec
from agent_gym.rollout.sampler import SampledTask, TaskSampler
from agent_gym.types import StepTrajectory

__all__ = ["collect_groups", "group_specs"]

Draw = tuple[dict[str, Any] | None, SampledTask | None]

_MIN_SHARE = 0.25
"""A round samples at most ``1 / _MIN_SHARE`` times the groups still missing."""


def group_specs(draws: Sequence[Draw], samples_per_task: int, seed: int, start: int = 0) -> list[EpisodeSpec]:
    """The episodes of ``draws``, groups numbered from ``start``.

    Args:
        draws: Per group its task (None: the env draws from the seed) and the sampler's draw, if any
            (its env and keyword arguments then replace the runner's).
        samples_per_task: Episodes per group.
        seed: Base seed; group ``g`` resets with ``seed + g``.
        start: Number of the first group.
    """
    specs: list[EpisodeSpec] = []
    for j, (task, drawn) in enumerate(draws):
        group = start + j
        task_id = task.get("id") if task is not None else None
        group_id = f"{seed}-{group}" if task_id is None else f"{seed}-{group}-{task_id}"
        env = drawn.env if drawn is not None else None
        env_kwargs = drawn.env_kwargs if drawn is not None else None
        for sample in range(samples_per_task):
            specs.append(EpisodeSpec(len(specs), group, sample, seed + group, task, group_id, env, env_kwargs))
    return specs


async def collect_groups(
    run: Callable[[list[EpisodeSpec]], Awaitable[list[StepTrajectory]]],
    *,
    groups: int,
    samples_per_task: int,
    seed: int,
    tasks: Sequence[dict[str, Any]] | None = None,
    sampler: TaskSampler | None = None,
    dynamic_sampling: DynamicSampling | None = None,
) -> list[StepTrajectory]:
    """Run groups until ``groups`` informative ones are in; return their episodes in group order.

    Args:
        run: Runs episode specs, results in spec order (a runner's ``run``, or the Ray backend).
        groups: Informative groups wanted.
        samples_per_task: Episodes per group.
        seed: Base seed.
        tasks: Tasks cycled through (group ``g`` runs ``tasks[g % len(tasks)]``) when there is no
            sampler; None: the env draws from the seed.
        sampler: Draws each group's task and env and observes each finished group.
        dynamic_sampling: Drops groups without outcome variance (None: every group is kept).

    Returns:
        ``samples_per_task`` episodes per kept group (fewer groups when the filter's ``max_groups``
        ran out), ``idx`` set to the position.
    """
    limit = dynamic_sampling.max_groups(groups) if dynamic_sampling is not None else groups
    kept: list[list[StepTrajectory]] = []
    planned = 0
    while len(kept) < groups and planned < limit:
        missing = groups - len(kept)
        judged = dynamic_sampling.stats.groups if dynamic_sampling is not None else 0
        share = (dynamic_sampling.stats.kept / judged) if dynamic_sampling is not None and judged else 1.0
        batch = min(limit - planned, math.ceil(missing / max(share, _MIN_SHARE)))
        draws: list[Draw] = []
        for j in range(batch):
            if sampler is not None:
                drawn = sampler.sample()
                draws.append((drawn.task, drawn))
            else:
                draws.append((tasks[(planned + j) % len(tasks)] if tasks else None, None))
        specs = group_specs(draws, samples_per_task, seed, start=planned)
        results = await run(specs)
        planned += batch
        for j, (_, sampled) in enumerate(draws):
            group = results[j * samples_per_task:(j + 1) * samples_per_task]
            if sampler is not None and sampled is not None:
                sampler.observe(sampled, group)
            if dynamic_sampling is None or dynamic_sampling.keeps(group):
                kept.append(group)
    episodes = [t for group in kept[:groups] for t in group]
    for i, trajectory in enumerate(episodes):
        trajectory.idx = i
    return episodes
