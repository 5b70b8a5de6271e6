"""Early cancel in a stream or a ``collect``: stop a group's unfinished siblings once the finished ones agree.

With ``DynamicSampling(early_cancel=threshold)`` and a task sampler (whose tracked pass rate ``p``
of the task is the estimate), a :class:`GroupWatch` follows a running group's episodes as they
finish. Once at least ``min_finished`` valid siblings finished and all agree (all succeeded, or
none did), the chance that one of the ``r`` unfinished siblings ends otherwise is ``1 - p ** r``
(all succeeded) or ``1 - (1 - p) ** r`` (none did); below ``threshold`` the rest of the group is
cancelled: the group is dropped as too easy / too hard and counted with the episodes cancelled and
an estimate of the tokens saved (the finished siblings' mean sampled tokens, less what each
cancelled one had sampled). Agreement is by success (``res_reward > 0``), the quantity the pass
rate tracks.

A cancel's correctness cannot be seen (the cancelled episodes never end), so a share
``cancel_audit`` of the decisions is not carried out: those groups run to the end and a decision
whose group turned out informative is counted in ``wrong_cancels`` (an unbiased estimate of the
wrong-cancel rate is ``wrong_cancels / audited``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent_gym.rollout.dynamic_sampling import DynamicSampling
from agent_gym.rollout.outcome import is_valid, succeeded
from agent_gym.rollout.reporting import notify
from agent_gym.rollout.sampler import SampledTask, TaskSampler

__all__ = ["GroupWatch", "other_outcome_chance", "watch_group"]


def other_outcome_chance(pass_rate: float, all_succeeded: bool, remaining: int) -> float:
    """Chance that at least one of ``remaining`` siblings ends otherwise than the finished ones agree."""
    same = pass_rate if all_succeeded else 1.0 - pass_rate
    return 1.0 - max(0.0, min(1.0, same)) ** remaining


class GroupWatch:
    """Follows one group's episodes as they finish and cancels the rest when the rule says so.

    Args:
        size: Episodes in the group.
        pass_rate: The task's tracked pass rate (None: never cancel).
        threshold: Cancel when :func:`other_outcome_chance` is below it.
        min_finished: Valid finished siblings needed before a decision.
        audit: Decide but do not cancel (the group runs to the end; see the module docstring).
        on_episode: The user's per-episode callback, called for every record as before.
    """

    def __init__(self, size: int, pass_rate: float | None, threshold: float, min_finished: int, *,
                 audit: bool = False, on_episode: Callable[[Any], Any] | None = None) -> None:
        self.size, self.pass_rate, self.threshold, self.min_finished = size, pass_rate, threshold, min_finished
        self.audit = audit
        self.user_callback = on_episode
        self.finished: list[Any] = []
        self.stopped: list[Any] = []  # the records of the cancelled siblings
        self.decided = False
        self.cancelled = False
        self.job: asyncio.Future[Any] | None = None

    def _should_cancel(self) -> bool:
        if self.pass_rate is None:
            return False
        valid = [succeeded(t) for t in self.finished if is_valid(t)]
        remaining = self.size - len(self.finished)
        if remaining <= 0 or len(valid) < self.min_finished or len(set(valid)) != 1:
            return False
        return other_outcome_chance(self.pass_rate, valid[0], remaining) < self.threshold

    async def __call__(self, trajectory: Any) -> None:
        """The runner's per-episode callback."""
        (self.stopped if self.cancelled else self.finished).append(trajectory)
        if self.user_callback is not None:
            await notify(self.user_callback, trajectory)
        if not self.decided and self._should_cancel():
            self.decided = True
            if not self.audit and self.job is not None:
                self.cancelled = True
                self.job.cancel()

    @property
    def all_succeeded(self) -> bool:
        """Whether the valid finished siblings all succeeded (the side they agreed on)."""
        return all(succeeded(t) for t in self.finished if is_valid(t))

    def count_cancel(self, dynamic: DynamicSampling) -> str:
        """Count the cancelled group on ``dynamic``'s stats; returns its verdict (too easy / too hard)."""
        verdict = "too_easy" if self.all_succeeded else "too_hard"
        infra = sum(1 for t in self.finished if not is_valid(t))
        dynamic.count_cancel(verdict, infra, self.size - len(self.finished), self.tokens_saved())
        return verdict

    def tokens_saved(self) -> int:
        """Estimated sampled tokens the cancel saved."""
        done = [int(t.response_masks.sum()) for t in self.finished]
        mean = sum(done) / len(done) if done else 0.0
        return int(sum(max(0.0, mean - int(t.response_masks.sum())) for t in self.stopped))


def watch_group(dynamic: DynamicSampling | None, sampler: TaskSampler | None, drawn: SampledTask | None, size: int,
                on_episode: Callable[[Any], Any] | None) -> GroupWatch | None:
    """The watch of a new group, or None without ``early_cancel``, a sampler's draw or a tracked pass rate.

    Args:
        dynamic: The stream's filter.
        sampler: The stream's sampler.
        drawn: The group's draw.
        size: Episodes in the group.
        on_episode: The user's per-episode callback.
    """
    if dynamic is None or dynamic.early_cancel is None or drawn is None or sampler is None:
        return None
    rate = sampler.pass_rate(drawn.key)
    if rate is None:
        return None
    return GroupWatch(size, rate, dynamic.early_cancel, dynamic.min_finished, audit=dynamic.audit_next(),
                      on_episode=on_episode)
