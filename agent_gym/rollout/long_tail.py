"""Long tails: what happens to an episode that runs over a turn or time budget.

Agentic episodes have long tails: a few run ten times longer than the median and hold a
rollout slot (and, in a batch, the trainer) the whole time. :class:`LongTail` sets a budget
(``max_turns`` policy turns, ``max_seconds`` of running time) and the choice for an episode
that goes over it, checked before each policy turn:

* ``action="end"``: the episode ends with status ``TIMEOUT`` and an ``end_reason`` that says
  which budget it went over (trainers mask it like any infrastructure cut: it is not the
  agent's failure);
* ``action="park"``: the episode stops where it is, its state kept (env, trajectory so far,
  policy session), and its slot goes to other episodes; it is *resumed later* from where it
  stopped, with a fresh budget. In ``collect`` a parked episode resumes once no episode is
  left to start; in a :class:`~agent_gym.rollout.stream.RolloutStream` once the stream has a
  free slot that no new group can take (tasks exhausted or the staleness window closed), so
  parked episodes fill capacity that would otherwise idle. While parked it is listed, with
  the state ``"parked"``, by its :class:`LongTailGate` (``stream.parked``); the step it resumed
  at carries ``info["long_tail"] = {"resumed": True, "parked_s": ...}``.

Example:
    >>> from agent_gym.rollout.long_tail import LongTail
    >>> collect("agent_gym/ToolUse-v0", policy, num_episodes=64,
    ...         long_tail=LongTail(max_turns=8, action="park"))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agent_gym.checks import check_choice, check_int, check_timeout
from agent_gym.errors import AgentGymError

__all__ = ["EpisodeOverBudget", "LongTail", "LongTailGate", "ParkedEpisode", "TurnBudget", "mark_resumes"]

ACTIONS = ("park", "end")


@dataclass(frozen=True)
class LongTail:
    """A budget per episode and what to do with an episode over it.

    Attributes:
        max_turns: Policy turns before the budget is spent (None: no turn budget).
        max_seconds: Seconds of running time (parked time excluded) before it is spent (None: no limit).
        action: ``"park"`` (stop, keep the state, resume later with a fresh budget) or ``"end"``
            (end with status ``TIMEOUT``).
        max_parks: Times one episode may be parked; over budget after that it runs to its end
            (``action="park"`` only).
    """

    max_turns: int | None = None
    max_seconds: float | None = None
    action: str = "park"
    max_parks: int = 1

    def __post_init__(self) -> None:
        if self.max_turns is not None:
            check_int("max_turns", self.max_turns, low=1)
        object.__setattr__(self, "max_seconds", check_timeout("max_seconds", self.max_seconds))
        check_choice("action", self.action, ACTIONS)
        check_int("max_parks", self.max_parks, low=1)
        if self.max_turns is None and self.max_seconds is None:
            raise AgentGymError("LongTail: give max_turns, max_seconds or both (a budget of nothing never ends)")


class EpisodeOverBudget(AgentGymError):
    """Raised before a turn of an episode over its :class:`LongTail` budget with ``action="end"``."""


@dataclass
class ParkedEpisode:
    """An episode stopped over its budget, waiting to resume.

    Attributes:
        episode_id: The episode's id (its policy session).
        turns: Policy turns it had taken.
        running_s: Seconds it had run (parked time excluded).
        parked_at: ``time.monotonic()`` when it was parked.
        state: ``"parked"``, then ``"resumed"``.
    """

    episode_id: str
    turns: int
    running_s: float
    parked_at: float
    state: str = "parked"


class TurnBudget:
    """One episode's budget: turns and running time since its start or its last resume."""

    def __init__(self, long_tail: LongTail) -> None:
        self.long_tail = long_tail
        self.turns = 0
        self.parks = 0
        self._since = time.monotonic()
        self._turns_since = 0
        self.running_s = 0.0
        self.resumes: list[tuple[int, float]] = []  # (step index resumed at, seconds parked)

    def spent(self) -> str | None:
        """What budget is spent, in words, or None."""
        tail = self.long_tail
        if tail.max_turns is not None and self.turns - self._turns_since >= tail.max_turns:
            return f"it took {tail.max_turns} turns"
        if tail.max_seconds is not None and time.monotonic() - self._since >= tail.max_seconds:
            return f"it ran {tail.max_seconds:g}s"
        return None

    def stop(self) -> None:
        """The episode parks: count the running time so far."""
        self.running_s += time.monotonic() - self._since

    def restart(self) -> None:
        """A fresh budget (after a resume)."""
        self._since = time.monotonic()
        self._turns_since = self.turns


def mark_resumes(trajectory: Any, budget: TurnBudget) -> None:
    """Write ``info["long_tail"]`` (``{"parked_s": ...}``) on each step an episode resumed at."""
    steps = getattr(trajectory, "steps", None) or []
    for index, parked_s in budget.resumes:
        if index < len(steps):
            steps[index].info["long_tail"] = {"resumed": True, "parked_s": round(parked_s, 3)}


class LongTailGate:
    """Applies a :class:`LongTail` before every policy turn of the episodes of one run.

    Args:
        long_tail: The budget and action.
        release: Awaited by a parked episode; returns when it may resume. None: the gate's own
            rule (:meth:`release_all`, called by the runner once no episode is left to start).
        on_park: Called with the :class:`ParkedEpisode` when an episode parks (e.g. to give its
            slot to another episode).
    """

    def __init__(
        self,
        long_tail: LongTail,
        *,
        release: Callable[[ParkedEpisode], Awaitable[None]] | None = None,
        on_park: Callable[[ParkedEpisode], None] | None = None,
    ) -> None:
        self.long_tail = long_tail
        self.parked: list[ParkedEpisode] = []
        self.parks = 0
        self.ended = 0
        self._release = release
        self._on_park = on_park
        self._released: asyncio.Event | None = None

    def budget(self) -> TurnBudget:
        """A fresh budget for one episode."""
        return TurnBudget(self.long_tail)

    async def before_turn(self, budget: TurnBudget, episode_id: str) -> None:
        """Called before each policy turn; parks, raises or returns.

        Raises:
            EpisodeOverBudget: The budget is spent and the action is ``"end"``.
        """
        why = budget.spent() if budget.turns else None
        budget.turns += 1
        if why is None:
            return
        if self.long_tail.action == "end":
            self.ended += 1
            raise EpisodeOverBudget(f"long tail: the episode went over its budget ({why}) and was ended")
        if budget.parks >= self.long_tail.max_parks:
            return
        budget.parks += 1
        budget.stop()
        self.parks += 1
        record = ParkedEpisode(episode_id, budget.turns - 1, budget.running_s, time.monotonic())
        self.parked.append(record)
        try:
            if self._on_park is not None:
                self._on_park(record)
            if self._release is not None:
                await self._release(record)
            else:
                if self._released is None:
                    self._released = asyncio.Event()
                await self._released.wait()
        finally:
            record.state = "resumed"
            self.parked.remove(record)
            budget.resumes.append((record.turns, time.monotonic() - record.parked_at))
            budget.restart()

    def release_all(self) -> None:
        """Resume every episode parked under the gate's own rule (and those that park later)."""
        if self._released is None:
            self._released = asyncio.Event()
        self._released.set()
