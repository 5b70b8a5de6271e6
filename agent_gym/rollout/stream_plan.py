"""Which group a :class:`~agent_gym.rollout.stream.RolloutStream` starts next: :class:`GroupPlan`.

A stream's groups come from its tasks, in order, or from its task sampler. Each group's episodes are
laid out (:func:`~agent_gym.rollout.planning.plan_episodes`, or
:func:`~agent_gym.rollout.group_collection.group_specs` for a draw) when the group is taken from them:
the k-th group taken resets with ``seed + k``.

When the tasks are a sequence (a list, a tuple: every task is known before it starts), the plan lays out
groups ahead, until the episodes laid out and not started are at least ``ahead`` (the stream's
concurrency), and offers them as :class:`~agent_gym.rollout.next_reset.LaterEpisodes`: an episode of the
stream whose env wants to be told its next episode (``expect_reset``) claims one of them for its env
(see :mod:`~agent_gym.rollout.next_reset`). Another iterable is read one group at a time, as the stream
goes (reading ahead could change what a generator yields), and a sampler's draws depend on the groups
observed so far: their groups are not known ahead, and their envs' own guesses apply.

The next group started is the first laid out whose episodes are all claimed, by envs all idle now (their
episodes ended, so the group's episodes take them), else the first laid out: groups whose envs finished
first start first, within the groups laid out ahead, so a group that finished before an older one does not
leave the envs told of the next group busy (the first laid out is passed over at most as many times as groups fit in the
window ahead).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.rollout.group_collection import group_specs
from agent_gym.rollout.next_reset import LaterEpisodes
from agent_gym.rollout.planning import EpisodeSpec, plan_episodes
from agent_gym.rollout.sampler import SampledTask, TaskSampler

__all__ = ["GroupPlan", "PlannedGroup"]


@dataclass
class PlannedGroup:
    """A group laid out: its task, the sampler's draw (None without a sampler) and its episodes.

    ``error`` is why its episodes could not be laid out (a task that is not a dict, ...): the stream hands
    it to the consumer in the group's place and goes on.
    """

    task: Any
    drawn: SampledTask | None
    specs: list[EpisodeSpec]
    passed_over: int = 0
    error: Exception | None = None


class GroupPlan:
    """The groups of a stream, laid out in the order they are taken from its tasks or sampler.

    Args:
        tasks: The tasks (None with a sampler).
        sampler: The sampler (None with tasks).
        samples_per_task: Episodes per group.
        seed: Base seed: the k-th group taken resets with ``seed + k``.
        max_groups: With a sampler, the most groups drawn (None: no limit).
        ahead: Episodes to lay out ahead when the tasks are a sequence.

    Attributes:
        later: The episodes laid out and not started, offered for claims.
        taken: Groups taken from the tasks or the sampler so far.
    """

    def __init__(self, tasks: Iterable[Any] | None, sampler: TaskSampler | None, *, samples_per_task: int,
                 seed: int, max_groups: int | None = None, ahead: int = 0) -> None:
        self.sampler, self.max_groups = sampler, max_groups
        self.samples_per_task, self.seed = samples_per_task, seed
        known = isinstance(tasks, Sequence) and not isinstance(tasks, (str, bytes))
        self.ahead = ahead if known else 0
        self._tasks = iter(tasks) if tasks is not None else iter(())
        self._planned: collections.deque[PlannedGroup] = collections.deque()
        self.later = LaterEpisodes()
        self.taken = 0

    def _take(self) -> PlannedGroup | None:
        """Lay out the next group of the tasks or the sampler, or None when there is none."""
        if self.sampler is None:
            try:
                task = next(self._tasks)
            except StopIteration:
                return None
            drawn = None
        else:
            if self.max_groups is not None and self.taken >= self.max_groups:
                return None
            drawn = self.sampler.sample()
            task = drawn.task
        seed, self.taken = self.seed + self.taken, self.taken + 1
        try:
            if drawn is None:
                specs = plan_episodes([task], None, self.samples_per_task, seed)
            else:
                specs = group_specs([(task, drawn)], self.samples_per_task, seed)
        except Exception as exc:  # noqa: BLE001 - a bad task is the consumer's to see, the stream goes on
            return PlannedGroup(task, drawn, [], error=exc)
        return PlannedGroup(task, drawn, specs)

    def _fill(self, episodes: int) -> None:
        """Lay out groups until ``episodes`` wait to start (or the tasks end)."""
        while sum(len(group.specs) for group in self._planned) < episodes:
            group = self._take()
            if group is None:
                return
            self._planned.append(group)
            self.later.add(group.specs)

    def next(self, idle: Callable[[Any], bool] | None = None) -> PlannedGroup | None:
        """The group to start now, or None when none is left.

        Args:
            idle: Whether an env is idle (None: the first group laid out starts).
        """
        self._fill(1)
        if not self._planned:
            return None
        chosen = self._planned[0]
        # the first laid out is passed over at most as many times as groups fit in the window ahead
        if idle is not None and chosen.passed_over <= self.ahead // self.samples_per_task:
            for group in self._planned:
                envs = self.later.envs_of(group.specs)
                if len(envs) == len(group.specs) and all(idle(env) for env in envs):
                    chosen = group
                    break
        if chosen is not self._planned[0]:
            self._planned[0].passed_over += 1
        self._planned.remove(chosen)
        self.later.started(chosen.specs)
        self._fill(self.ahead)
        return chosen

    def clear(self) -> None:
        """Forget the groups laid out and not started (the stream is closing)."""
        self._planned.clear()
        self.later.clear()
