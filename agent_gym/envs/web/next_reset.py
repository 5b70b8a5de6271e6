"""Which task a Web-v0 env's next reset runs: :class:`ResetPredictor`, the guess its preparation starts ahead.

A page's start depends on its task alone (a MiniWoB++ page and its instance seed), not on the
reset's seed, which only draws the task (and the episode id). So the task a coming reset runs is
all a preparation needs to know, and it is known exactly in three cases, tried in this order:

1. a hint (:meth:`ResetPredictor.expect`, the env's ``expect_reset``): the ``(seed, options)`` of a
   coming reset, e.g. from a rollout runner that knows each env's next episode; its task is
   ``options["task"]``/``["task_index"]``, else the draw of ``seed``'s generator (a generator of its
   own, or a copy of the env's for ``seed=None``), computed without touching the env's;
2. after a reset that drew its task without a seed, or with one and another task than the reset
   before it: the env's next draw (exact for ``reset()``);
3. else the same task again (the next sample of a GRPO group: given each time, or drawn again from
   the same seed).

The first two are started ahead. The third is too, unless the last two such guesses got the page
right but not its instance (resets going through a page's instances): then the page is only
loaded, which serves any instance, until a guess is exact again. A wrong guess costs the prepared
page (closed, never shown), never what a reset returns.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gymnasium.utils import seeding

from agent_gym.env.tasks import choose_task

__all__ = ["ResetPredictor", "task_of_reset"]


def task_of_reset(tasks: Sequence[dict[str, Any]], seed: int | None, options: Mapping[str, Any] | None,
                  np_random: Any, validate: Callable[[list[Any]], list[dict[str, Any]]],
                  owner: str = "env") -> dict[str, Any] | None:
    """The task ``reset(seed=seed, options=options)`` runs on an env with ``tasks`` and generator ``np_random``.

    Args:
        tasks: The env's tasks.
        seed: The reset's seed (None: it draws from ``np_random`` as it is now; a copy is used).
        options: The reset's options.
        np_random: The env's generator (never advanced here).
        validate: The env's ``validate_tasks``.
        owner: The env's class name, for errors.

    Returns:
        The task, or None when it cannot be made out (an invalid task or index).
    """
    rng = seeding.np_random(seed)[0] if seed is not None else copy.deepcopy(np_random)
    try:
        return choose_task(list(tasks), options or {}, rng, validate, owner)
    except (ValueError, TypeError):
        return None


class ResetPredictor:
    """An env's guess of its next reset's task, and whether to start that task ahead (see the module).

    Attributes:
        guess: ``(task, start, kind)`` made at the last reset (``kind``: ``"hint"``, ``"draw"`` or ``"same"``);
            None before the first.
    """

    def __init__(self) -> None:
        self.guess: tuple[Mapping[str, Any] | None, bool, str] | None = None
        self._expected: tuple[int | None, dict[str, Any] | None] | None = None
        self._start_same = True
        self._page_only = 0
        self._last_task: Mapping[str, Any] | None = None

    def expect(self, seed: int | None, options: Mapping[str, Any] | None) -> None:
        """Record a hint: the next guess is the task of ``reset(seed=seed, options=options)``."""
        self._expected = (seed, dict(options) if options else None)

    def predict(self, current: Mapping[str, Any], *, tasks: Sequence[dict[str, Any]], np_random: Any,
                validate: Callable[[list[Any]], list[dict[str, Any]]], owner: str, drew: bool,
                unseeded: bool) -> tuple[Mapping[str, Any] | None, bool, str]:
        """Guess the task of the reset after the current one (on ``current``) and keep it in :attr:`guess`.

        Args:
            current: The current reset's task.
            tasks: The env's tasks.
            np_random: The env's generator, as the current reset left it.
            validate: The env's ``validate_tasks`` (for a hinted ``options["task"]``).
            owner: The env's class name.
            drew: The current reset drew its task (no ``task`` or ``task_index`` in its options).
            unseeded: ... and had no seed.
        """
        repeated, self._last_task = current == self._last_task, current
        expected, self._expected = self._expected, None
        task = None
        if expected is not None:
            task = task_of_reset(tasks, *expected, np_random, validate, owner)
        if task is not None:
            self.guess = (task, True, "hint")
        elif drew and tasks and (unseeded or not repeated):
            self.guess = (task_of_reset(tasks, None, None, np_random, validate, owner), True, "draw")
        else:
            self.guess = (current, self._start_same, "same")
        return self.guess

    def score(self, task: Mapping[str, Any]) -> None:
        """Learn from the last "same task again" guess, now that the reset ran ``task``.

        The next such guesses start their task ahead after an exact guess; after two in a row that got the
        page right but not its instance they load the page only.
        """
        if self.guess is None or self.guess[2] != "same" or self.guess[0] is None:
            return
        guessed = self.guess[0]
        if guessed.get("source") == "site" or task.get("source") == "site":
            return
        if guessed.get("page") == task.get("page"):
            self._page_only = 0 if guessed.get("seed") == task.get("seed") else self._page_only + 1
            self._start_same = self._page_only < 2
