"""Dynamic sampling (DAPO-style): keep only the groups whose outcomes differ, and count the rest.

A group whose valid members all have the same outcome gives every member the same advantage (zero
under GRPO): it teaches nothing and costs a trainer's step its share. :class:`DynamicSampling`
judges each finished group (:func:`judge_group`):

* the outcome is ``metrics["res_reward"]`` (or success, ``outcome="success"``), never the shaped
  total reward: a group that differs only in tool-call shaping has one outcome and is dropped;
* members that ended for infrastructure reasons (:mod:`~agent_gym.rollout.outcome`) are left out
  of the variance and counted (``infra_episodes``): an infra failure neither keeps a zero-variance
  group (its 0 is no outcome) nor drops a learnable one (the others still differ);
* a group with fewer than ``min_valid`` valid members is dropped as ``infra``;
* zero variance with every valid member successful is ``too_easy``, otherwise ``too_hard``.

``collect(..., dynamic_sampling=DynamicSampling())`` samples more groups until ``num_episodes``
informative groups are in (at most ``max_groups_factor`` times as many groups in all);
``RolloutStream(..., dynamic_sampling=...)`` drops a group when it ends, so its slot goes to a new
group at once. Counters are on :attr:`DynamicSampling.stats` (and on the stream's ``stats``), and
``Report.from_trajectories(..., filtered=stats.as_dict())`` shows them. With a task sampler (in a
stream, or in ``collect`` on the local backend), ``early_cancel`` also stops a group's unfinished
siblings once the finished ones agree and the task's pass rate makes another outcome unlikely
(:mod:`~agent_gym.rollout.early_cancel`).

``collect``'s last round often finds more informative groups than the batch needs (the surplus).
By default they are thrown away (``surplus_dropped``). With ``carry_over=N`` up to ``N`` of them are
carried into the next ``collect`` with this filter (:mod:`~agent_gym.rollout.carry_over`), which
takes them first and samples only what is still missing: no informative group sampled is wasted.
Each carried group records the weight version it was sampled under; one older than
``carry_max_staleness`` versions when the next batch starts is dropped and counted (``carry_stale``).
A batch's version is the policy's ``weight_version`` when it has a non-negative one, else the
number of batches this filter filled before (one ``collect`` per weight update, the usual loop).
:attr:`DynamicSampling.last_carried` lists the carried groups of the last batch with their
staleness.

Example:
    >>> from agent_gym.rollout.dynamic_sampling import DynamicSampling
    >>> dynamic = DynamicSampling()
    >>> dynamic.stats.as_dict()["kept"]
    0
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agent_gym.checks import check_choice, check_float, check_int
from agent_gym.errors import ConfigError
from agent_gym.rollout.carry_over import CarriedGroup, CarryOver
from agent_gym.rollout.outcome import OUTCOMES, is_valid, outcome_of

__all__ = ["VERDICTS", "DynamicSampling", "FilterStats", "judge_group"]

VERDICTS = ("kept", "too_easy", "too_hard", "infra")
"""What :func:`judge_group` says of a group."""


def judge_group(trajectories: Sequence[Any], *, outcome: str = "res_reward", min_valid: int = 2,
                tolerance: float = 1e-9) -> str:
    """Judge one group of siblings by the outcomes of its valid members.

    Args:
        trajectories: The group's episodes.
        outcome: ``"res_reward"`` or ``"success"`` (see :func:`~agent_gym.rollout.outcome.outcome_of`).
        min_valid: Valid members needed to judge the group (fewer: ``"infra"``).
        tolerance: Outcomes closer than this are equal.

    Returns:
        ``"kept"`` (outcomes differ), ``"too_easy"`` (all valid members succeeded with one outcome),
        ``"too_hard"`` (one outcome, not a success) or ``"infra"`` (too few valid members).
    """
    values = [outcome_of(t, outcome) for t in trajectories if is_valid(t)]
    if len(values) < max(min_valid, 1):
        return "infra"
    if max(values) - min(values) > tolerance:
        return "kept"
    return "too_easy" if values[0] > 0 else "too_hard"


@dataclass
class FilterStats:
    """Counters of a filter.

    Attributes:
        groups: Groups judged.
        kept: Informative groups (outcomes differ among valid members).
        too_easy: Dropped: one outcome, a success.
        too_hard: Dropped: one outcome, not a success.
        infra: Dropped: fewer than ``min_valid`` valid members.
        infra_episodes: Members of judged groups that ended for infrastructure reasons.
        cancelled: Groups whose unfinished siblings were cancelled early (also counted as too easy / too hard).
        cancelled_episodes: Siblings cancelled.
        tokens_saved: Estimated sampled tokens the cancels saved.
        audited: Cancel decisions not carried out (the group ran to the end to check the decision).
        wrong_cancels: Audited decisions whose group turned out informative.
        batches: Batches ``collect`` filled with the filter.
        surplus: Informative groups found beyond their batch's need (counted in ``kept`` too).
        carried: Surplus groups handed out in a later batch (``carry_over``).
        carry_stale: Surplus groups dropped as older than ``carry_max_staleness`` versions.
        surplus_dropped: Surplus groups thrown away (no ``carry_over``, or the buffer was full).
    """

    groups: int = 0
    kept: int = 0
    too_easy: int = 0
    too_hard: int = 0
    infra: int = 0
    infra_episodes: int = 0
    cancelled: int = 0
    cancelled_episodes: int = 0
    tokens_saved: int = 0
    audited: int = 0
    wrong_cancels: int = 0
    batches: int = 0
    surplus: int = 0
    carried: int = 0
    carry_stale: int = 0
    surplus_dropped: int = 0

    @property
    def dropped(self) -> int:
        """Groups dropped, for any reason."""
        return self.too_easy + self.too_hard + self.infra

    def count(self, verdict: str, infra_episodes: int) -> None:
        """Add one judged group."""
        self.groups += 1
        self.infra_episodes += infra_episodes
        setattr(self, verdict, getattr(self, verdict) + 1)

    def as_dict(self) -> dict[str, int]:
        """The counters by name, ``dropped`` included (what the report shows)."""
        return {**asdict(self), "dropped": self.dropped}


@dataclass
class DynamicSampling:
    """Drop groups whose outcome has zero variance among valid members; count what was dropped.

    Attributes:
        outcome: ``"res_reward"`` (default) or ``"success"``; never the shaped total.
        min_valid: Valid members a group needs to be judged (fewer: dropped as ``infra``).
        max_groups_factor: ``collect`` samples at most this many times the requested groups
            before it returns fewer (every group too easy or too hard must end somewhere).
        tolerance: Outcomes closer than this are equal.
        early_cancel: With a task sampler (a stream, or ``collect`` on the local backend), cancel a
            group's unfinished siblings once the finished ones agree and the chance of another outcome
            (from the task's tracked pass rate) is below this (None: never; see
            :mod:`~agent_gym.rollout.early_cancel`).
        min_finished: Valid finished siblings needed before an early cancel.
        cancel_audit: Share of early-cancel decisions not carried out, to count wrong cancels.
        seed: Seed of the audit draws.
        carry_over: Most surplus informative groups of a ``collect`` held for the next one (0, the
            default: the surplus is dropped, as DAPO does; see the module docstring).
        carry_max_staleness: Most weight versions a carried group may lag when its batch starts
            (None: unbounded); older ones are dropped and counted.
        stats: The counters (:class:`FilterStats`).
        last_carried: The carried groups of the last batch, each with its version and staleness.
    """

    outcome: str = "res_reward"
    min_valid: int = 2
    max_groups_factor: float = 8.0
    tolerance: float = 1e-9
    early_cancel: float | None = None
    min_finished: int = 2
    cancel_audit: float = 0.0
    seed: int = 0
    carry_over: int = 0
    carry_max_staleness: int | None = 1
    stats: FilterStats = field(default_factory=FilterStats, init=False, compare=False)
    last_carried: list[CarriedGroup] = field(default_factory=list, init=False, compare=False)
    _buffer: Any = field(default=None, init=False, repr=False, compare=False)
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _audit_rng: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_choice("outcome", self.outcome, OUTCOMES)
        check_int("min_valid", self.min_valid, low=1)
        check_float("max_groups_factor", self.max_groups_factor, low=1.0)
        check_float("tolerance", self.tolerance, low=0.0)
        if self.early_cancel is not None:
            check_float("early_cancel", self.early_cancel, low=0.0, high=1.0, low_open=True)
        check_int("min_finished", self.min_finished, low=1)
        check_float("cancel_audit", self.cancel_audit, low=0.0, high=1.0)
        self._audit_rng = random.Random(check_int("seed", self.seed))
        if self.carry_max_staleness is not None:
            check_int("carry_max_staleness", self.carry_max_staleness, low=0)
        self._buffer = CarryOver(check_int("carry_over", self.carry_over, low=0), self.carry_max_staleness)

    @property
    def carried_held(self) -> int:
        """Surplus groups waiting for the next batch."""
        return len(self._buffer)

    @property
    def carried_versions(self) -> list[int]:
        """The weight versions of the groups waiting for the next batch, oldest first."""
        return self._buffer.versions()

    def verdict(self, trajectories: Sequence[Any]) -> str:
        """The verdict on one group (see :func:`judge_group`), not counted."""
        return judge_group(trajectories, outcome=self.outcome, min_valid=self.min_valid, tolerance=self.tolerance)

    def judge(self, trajectories: Sequence[Any]) -> str:
        """Judge one finished group and count it; returns its verdict (see :func:`judge_group`)."""
        verdict = self.verdict(trajectories)
        infra = sum(1 for t in trajectories if not is_valid(t))
        with self._lock:
            self.stats.count(verdict, infra)
        return verdict

    def keeps(self, trajectories: Sequence[Any]) -> bool:
        """:meth:`judge` the group; True when it is informative."""
        return self.judge(trajectories) == "kept"

    def audit_next(self) -> bool:
        """Whether the next early-cancel decision is audited (drawn with ``cancel_audit``)."""
        with self._lock:
            return self.cancel_audit > 0 and self._audit_rng.random() < self.cancel_audit

    def count_cancel(self, verdict: str, infra: int, episodes: int, tokens: int) -> None:
        """Count a group dropped by an early cancel of ``episodes`` siblings."""
        with self._lock:
            self.stats.count(verdict, infra)
            self.stats.cancelled += 1
            self.stats.cancelled_episodes += episodes
            self.stats.tokens_saved += tokens

    def count_audit(self, wrong: bool) -> None:
        """Count an audited decision, wrong when its group turned out informative."""
        with self._lock:
            self.stats.audited += 1
            self.stats.wrong_cancels += int(wrong)

    def begin_batch(self, version: Any = None) -> int:
        """Start a batch of ``collect``; return its weight version.

        Args:
            version: The policy's ``weight_version``; used when a non-negative int, else the
                number of batches filled before stands for it.
        """
        with self._lock:
            own = isinstance(version, int) and not isinstance(version, bool) and version >= 0
            current = int(version) if own else self.stats.batches
            self.stats.batches += 1
        return current

    def take_carried(self, wanted: int, version: int) -> list[list[Any]]:
        """The carried groups (oldest first, at most ``wanted``) that open a batch of ``version``.

        Stale groups are dropped first and counted (``carry_stale``); the groups handed out are
        counted (``carried``) and listed in :attr:`last_carried`.
        """
        taken, stale = self._buffer.take(wanted, version)
        with self._lock:
            self.stats.carried += len(taken)
            self.stats.carry_stale += stale
            self.last_carried = taken
        return [g.trajectories for g in taken]

    def carry(self, groups: Sequence[list[Any]], version: int) -> None:
        """Hand the surplus ``groups`` of a batch of ``version`` to the buffer (or drop them, counted)."""
        if not groups:
            return
        dropped = self._buffer.put(groups, version)
        with self._lock:
            self.stats.surplus += len(groups)
            self.stats.surplus_dropped += dropped

    def max_groups(self, wanted: int) -> int:
        """Most groups ``collect`` samples to find ``wanted`` informative ones."""
        return max(wanted, math.ceil(wanted * self.max_groups_factor))

    def state_dict(self) -> dict[str, int]:
        """The counters (for a trainer's checkpoint); the carried groups are not saved."""
        with self._lock:
            return asdict(self.stats)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the counters of :meth:`state_dict` (the carry-over buffer starts empty).

        Raises:
            ConfigError: ``state`` holds unknown or non-integer counters.
        """
        try:
            stats = FilterStats(**{str(k): int(v) for k, v in state.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"state: expected DynamicSampling.state_dict() counters, got {state!r:.80}") from exc
        with self._lock:
            self.stats = stats
            self.last_carried = []
        self._buffer.clear()
