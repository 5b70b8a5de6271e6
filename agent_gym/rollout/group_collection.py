"""``collect`` with a task sampler or dynamic sampling: groups planned round after round.

:func:`group_specs` lays out the episodes of groups whose task (and env) is chosen one group at a
time, numbered after the groups planned before, so the seeds and group ids of a run match
:func:`~agent_gym.rollout.planning.plan_episodes`'s for the same tasks. :func:`collect_groups` runs
rounds of groups until ``groups`` informative ones are in (every group counts without a
:class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling`), each round as many groups as are
still missing over the kept share seen so far (at most four times as many), capped by the filter's
``max_groups``. Each finished group is observed by the sampler (pass rates) before the filter judges
it. Rounds depend only on the seed and on the outcomes, so a seeded run with a seeded policy repeats.

With ``DynamicSampling(carry_over=N)`` the batch opens with the groups the filter carried from earlier
batches (oldest first, stale ones dropped: :mod:`~agent_gym.rollout.carry_over`) and the rounds sample only
what is still missing; the informative groups found beyond the batch go to the filter's buffer (without
``carry_over`` they are dropped, counted in either case).

With ``DynamicSampling(early_cancel=...)``, a task sampler and ``run_group`` (the local backend), each
group of a round runs as its own job (the next one starts, in order, as soon as an episode slot of the
``n_parallel`` is free) watched by a :class:`~agent_gym.rollout.early_cancel.GroupWatch`: once the
finished siblings agree and the task's pass rate makes another outcome unlikely, the unfinished ones
are cancelled and the group is dropped and counted as in a stream. Which siblings finish first then
depends on timing, so such a run does not repeat exactly.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent_gym.rollout.dynamic_sampling import DynamicSampling
from agent_gym.rollout.early_cancel import GroupWatch, watch_group
from agent_gym.rollout.planning import EpisodeSpec
from agent_gym.rollout.reporting import notify
from agent_gym.rollout.sampler import SampledTask, TaskSampler
from agent_gym.types import StepTrajectory

__all__ = ["collect_groups", "group_specs"]

Draw = tuple[dict[str, Any] | None, SampledTask | None]
#: Runs one group's specs with a per-episode callback (the runner's ``run``), results in spec order.
RunGroup = Callable[[list[EpisodeSpec], Callable[[Any], Any] | None], Awaitable[list[StepTrajectory]]]

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
    run_group: RunGroup | None = None,
    n_parallel: int = 1,
    on_episode: Callable[[Any], Any] | None = None,
    version: Any = None,
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
        run_group: Runs one group's specs with a per-episode callback; with it, a sampler and the
            filter's ``early_cancel``, groups run one job each and may be cancelled early.
        n_parallel: Episodes in flight with ``run_group`` (a group starts whole while a slot is free).
        on_episode: The user's per-episode callback, passed to ``run_group``.
        version: The policy's weight version (see :meth:`DynamicSampling.begin_batch`).

    Returns:
        ``samples_per_task`` episodes per kept group (fewer groups when the filter's ``max_groups``
        ran out), ``idx`` set to the position; carried groups first.
    """
    kept: list[list[StepTrajectory]] = []
    batch_version = 0
    if dynamic_sampling is not None:
        batch_version = dynamic_sampling.begin_batch(version)
        kept = dynamic_sampling.take_carried(groups, batch_version)
    carried = len(kept)
    limit = dynamic_sampling.max_groups(groups - len(kept)) if dynamic_sampling is not None else groups
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
        planned += batch
        if run_group is not None and sampler is not None and dynamic_sampling is not None \
                and dynamic_sampling.early_cancel is not None:
            done = await _run_watched(run_group, draws, specs, samples_per_task, n_parallel, sampler,
                                      dynamic_sampling, on_episode)
        else:
            results = await run(specs)
            done = [(results[j * samples_per_task:(j + 1) * samples_per_task], None) for j in range(len(draws))]
        for (_, sampled), (group, watch) in zip(draws, done, strict=True):
            if watch is not None and watch.cancelled:
                assert dynamic_sampling is not None
                if sampler is not None and sampled is not None:
                    sampler.observe(sampled, watch.finished)
                watch.count_cancel(dynamic_sampling)
                continue
            if sampler is not None and sampled is not None:
                sampler.observe(sampled, group)
            if watch is not None and watch.decided and dynamic_sampling is not None:  # an audited decision
                dynamic_sampling.count_audit(wrong=dynamic_sampling.verdict(group) == "kept")
            if dynamic_sampling is None or dynamic_sampling.keeps(group):
                kept.append(group)
    if dynamic_sampling is not None:
        dynamic_sampling.carry(kept[groups:], batch_version)
        _distinct_group_ids(kept[:carried], kept[carried:groups])
    episodes = [t for group in kept[:groups] for t in group]
    for i, trajectory in enumerate(episodes):
        trajectory.idx = i
    return episodes


def _distinct_group_ids(carried: Sequence[list[StepTrajectory]], fresh: Sequence[list[StepTrajectory]]) -> None:
    """Give a carried group whose ``group_id`` another group of the batch has (a seed reused) a new one.

    The new id is the old one with ``@c`` and a number appended, so each group of a batch has its own id.
    """
    used = {t.group_id for group in fresh for t in group}
    for group in carried:
        ids = {t.group_id for t in group}
        if not ids & used:
            used |= ids
            continue
        n = 1
        while any(f"{i}@c{n}" in used for i in ids):
            n += 1
        for t in group:
            t.group_id = f"{t.group_id}@c{n}"
        used |= {t.group_id for t in group}


async def _run_watched(run_group: RunGroup, draws: Sequence[Draw], specs: list[EpisodeSpec], samples_per_task: int,
                       n_parallel: int, sampler: TaskSampler, dynamic: DynamicSampling,
                       on_episode: Callable[[Any], Any] | None) -> list[tuple[list[StepTrajectory], GroupWatch | None]]:
    """Run a round's groups one job each, in order, each watched; a group starts while an episode slot is free.

    Each finished (or cancelled) episode frees its slot, so about ``n_parallel`` episodes run at once (at
    most ``samples_per_task - 1`` more: a group starts whole).

    Returns:
        Per group, its episodes (empty when cancelled early) and its watch (None without a tracked pass rate).
    """
    slots = _Slots(n_parallel)

    async def one(j: int) -> tuple[list[StepTrajectory], GroupWatch | None]:
        group = specs[j * samples_per_task:(j + 1) * samples_per_task]
        await slots.enter(j, len(group))
        freed = [0]

        async def counted(trajectory: Any) -> None:
            freed[0] += 1
            await slots.release(1)
            if watch is not None:
                await watch(trajectory)
            elif on_episode is not None:
                await notify(on_episode, trajectory)

        watch = watch_group(dynamic, sampler, draws[j][1], samples_per_task, on_episode)
        job = asyncio.ensure_future(run_group(group, counted))
        if watch is not None:
            watch.job = job
        try:
            return await job, watch
        except asyncio.CancelledError:
            if watch is None or not watch.cancelled:
                raise  # the collect itself is cancelled
            return [], watch
        finally:
            await slots.release(max(0, len(group) - freed[0]))

    return list(await asyncio.gather(*(one(j) for j in range(len(draws)))))


class _Slots:
    """Episode slots shared by a round's groups, handed out to the groups in order."""

    def __init__(self, size: int) -> None:
        self.free = size
        self.turn = 0
        self.changed = asyncio.Condition()

    async def enter(self, ticket: int, episodes: int) -> None:
        """Wait for group ``ticket``'s turn and a free slot, then take ``episodes`` slots."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.turn == ticket and self.free > 0)
            self.free -= episodes
            self.turn += 1
            self.changed.notify_all()

    async def release(self, episodes: int) -> None:
        """Give ``episodes`` slots back."""
        if episodes:
            async with self.changed:
                self.free += episodes
                self.changed.notify_all()
