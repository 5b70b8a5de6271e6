"""Informative groups kept beyond a batch, carried into the next one: :class:`CarryOver`.

``collect(..., dynamic_sampling=...)`` samples groups in rounds until the batch has enough
informative ones; the last round often finds more than the batch needs. Without a carry-over
buffer those are thrown away, and their sampled tokens with them. With one
(``DynamicSampling(carry_over=N)``) up to ``N`` of them wait for the next batch, which takes them
first (oldest first) and samples only what is still missing.

A carried group was sampled under older weights than the batch it goes into. Each one records the
weight version it was sampled under (:attr:`CarriedGroup.version`); when it is handed out its
staleness is the batch's version minus that. A group older than ``max_staleness`` versions is
dropped and counted, never handed out; so is the oldest group when the buffer is full.

Example:
    >>> from agent_gym.rollout.carry_over import CarryOver
    >>> buffer = CarryOver(capacity=2, max_staleness=1)
    >>> buffer.put([["a1", "a2"], ["b1", "b2"], ["c1", "c2"]], version=0)   # one too many: the oldest goes
    1
    >>> taken, stale = buffer.take(1, version=1)
    >>> [g.trajectories for g in taken], [g.staleness for g in taken], stale
    ([['b1', 'b2']], [1], 0)
    >>> buffer.take(1, version=3)   # two versions old: dropped
    ([], 1)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.checks import check_int

__all__ = ["CarriedGroup", "CarryOver"]


@dataclass
class CarriedGroup:
    """One informative group carried from the batch it was sampled in to a later one.

    Attributes:
        trajectories: The group's episodes.
        version: The weight version the group was sampled under.
        staleness: Versions between its sampling and the batch it went into (set when handed out; 0 before).
    """

    trajectories: list[Any]
    version: int
    staleness: int = 0

    @property
    def group_id(self) -> str:
        """The group id of its episodes ("" when they have none)."""
        return str(getattr(self.trajectories[0], "group_id", "") or "") if self.trajectories else ""


class CarryOver:
    """A bounded first-in, first-out buffer of informative groups, each with its weight version.

    Args:
        capacity: Most groups held (0: nothing is held; every group put is dropped at once).
        max_staleness: Most versions a group may lag when handed out (None: unbounded).

    Thread-safe: a trainer may read :meth:`__len__` while a collection puts and takes.
    """

    def __init__(self, capacity: int, max_staleness: int | None = 1) -> None:
        self.capacity = check_int("capacity", capacity, low=0)
        self.max_staleness = None if max_staleness is None else check_int("max_staleness", max_staleness, low=0)
        self._groups: deque[CarriedGroup] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._groups)

    def versions(self) -> list[int]:
        """The versions of the groups held, oldest first."""
        with self._lock:
            return [g.version for g in self._groups]

    def put(self, groups: Sequence[list[Any]], version: int) -> int:
        """Hold ``groups`` (sampled under ``version``); return how many groups the full buffer dropped.

        When the buffer is over ``capacity`` the oldest groups go first (they are the stalest).
        """
        dropped = 0
        with self._lock:
            for group in groups:
                self._groups.append(CarriedGroup(list(group), int(version)))
            while len(self._groups) > self.capacity:
                self._groups.popleft()
                dropped += 1
        return dropped

    def take(self, wanted: int, version: int) -> tuple[list[CarriedGroup], int]:
        """Hand out up to ``wanted`` groups, oldest first, for a batch of weight ``version``.

        Groups older than ``max_staleness`` versions are dropped first (all of them, not only
        those that would have been handed out); the rest stay for a later batch.

        Returns:
            The groups handed out (their ``staleness`` set) and the number of stale groups dropped.
        """
        taken: list[CarriedGroup] = []
        with self._lock:
            fresh = [g for g in self._groups
                     if self.max_staleness is None or version - g.version <= self.max_staleness]
            stale = len(self._groups) - len(fresh)
            self._groups = deque(fresh)
            while self._groups and len(taken) < wanted:
                group = self._groups.popleft()
                group.staleness = max(0, version - group.version)
                taken.append(group)
        return taken, stale

    def clear(self) -> int:
        """Drop every group held; return how many."""
        with self._lock:
            count = len(self._groups)
            self._groups.clear()
        return count
