"""Telling an env its next episode while the current one runs: :class:`SpecQueue` and :func:`reset_hook`.

An env may prepare its next episode in the background while the current one runs (Web-v0 opens
the next episode's browser context and starts its task's page ahead), but it can only guess which
episode comes next. An env that wants to be told has an optional method on its unwrapped env::

    def expect_reset(self, seed: int | None = None, options: dict | None = None) -> None: ...

called, before the ``reset`` that starts an episode, with the ``seed`` and ``options`` (``task``
when the episode has one) of the reset that will follow that one on the same env. It must return
at once (no I/O: it runs on the runner's event loop) and only prepare: a hint that turns out wrong
may cost the env some work, never change what any reset returns.

:meth:`EpisodeRunner.run <agent_gym.rollout.runner.EpisodeRunner.run>` hands its episodes out
through a :class:`SpecQueue`. When a worker has taken its env for an episode and that env has the
hook, the worker *claims* the next episode of the queue (of the same env id and keyword arguments)
and tells the env: the worker runs it next, on the env it just gave back (the pool hands the most
recently given back env of a key first). A claim never keeps another worker idle: a worker that
finds the queue empty takes a claimed episode that has not started, and no worker claims while the
episodes waiting are no more than the workers yet to take their first (each of those runs one). For
envs without the hook nothing is claimed, so the episodes go out in queue order exactly as before,
and results stay in spec order either way.

A :class:`~agent_gym.rollout.stream.RolloutStream` runs each group as a run of its own, so a group's
episodes have little of their own run to claim. Its next groups, where it knows them ahead, are
:class:`LaterEpisodes`: a worker with nothing of its run left to claim claims one of those (same
env id and keyword arguments; a group's episodes claim those of one later group) and tells its env;
the run that later starts that episode takes that env when it is idle (:meth:`EnvPool.take
<agent_gym.rollout.env_pool.EnvPool.take>`'s ``prefer``), and the stream starts first a group whose
episodes are all claimed by envs idle now.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from agent_gym.rollout.planning import EpisodeSpec

__all__ = ["LaterEpisodes", "SpecQueue", "reset_hook", "reset_options"]

logger = logging.getLogger(__name__)


def reset_hook(env: Any) -> Callable[..., Any] | None:
    """The env's ``expect_reset`` method (looked up on ``env.unwrapped``), or None when it has none."""
    hook = getattr(getattr(env, "unwrapped", env), "expect_reset", None)
    return hook if callable(hook) else None


def reset_options(spec: EpisodeSpec) -> dict[str, Any]:
    """The ``options`` of ``spec``'s reset that decide its episode's task (``{"task": ...}`` or ``{}``)."""
    return {} if spec.task is None else {"task": spec.task}


class SpecQueue:
    """The episodes of a run not started yet, in order, and those claimed by a worker for its env's next episode.

    Args:
        count: The number of episodes (indices ``0 .. count - 1``).
        workers: The workers that will take episodes (0: unknown); while the episodes waiting are no more
            than those of them that have not taken their first, nothing is claimed (each runs one).
    """

    def __init__(self, count: int, workers: int = 0) -> None:
        self._waiting: collections.deque[int] = collections.deque(range(count))
        self._claims: dict[Any, int] = {}
        self._fresh = max(0, int(workers))  # workers that have not taken an episode yet
        self._seen: set[Any] = set()

    def empty(self) -> bool:
        """Whether no episode waits to start (none in the queue, none claimed)."""
        return not self._waiting and not self._claims

    def next(self, worker: Any) -> int | None:
        """The next episode for ``worker``: its claim, else the queue's head, else another's claim; None when none."""
        if worker not in self._seen:
            self._seen.add(worker)
            self._fresh = max(0, self._fresh - 1)
        index = self._claims.pop(worker, None)
        if index is not None:
            return index
        if self._waiting:
            return self._waiting.popleft()
        if self._claims:  # an idle worker takes the oldest claim rather than wait for its owner
            return self._claims.pop(next(iter(self._claims)))
        return None

    def hinter(self, worker: Any, specs: Sequence[EpisodeSpec], current: EpisodeSpec,
               later: LaterEpisodes | None = None) -> Callable[[Any], None]:
        """A callback for the env of ``worker``'s episode ``current``: claims and hints its next episode.

        The callback does nothing for an env without the hook, when ``worker`` holds a claim already or when
        the queue's head runs on another env id or keyword arguments. When the queue has nothing to claim (it
        is empty, or its episodes are no more than the workers yet to start) it claims from ``later``, if given.
        """

        def on_env(env: Any) -> None:
            hook = reset_hook(env)
            if hook is None or worker in self._claims:
                return
            if len(self._waiting) <= self._fresh:
                if later is not None:
                    later.claim(env, current)
                return
            spec = specs[self._waiting[0]]
            if not _same_env(spec, current):
                return
            self._claims[worker] = self._waiting.popleft()
            _tell(hook, spec)

        return on_env


def _same_env(spec: EpisodeSpec, current: EpisodeSpec) -> bool:
    return (spec.env, spec.env_kwargs) == (current.env, current.env_kwargs)


def _tell(hook: Callable[..., Any], spec: EpisodeSpec) -> None:
    try:
        hook(seed=spec.seed, options=reset_options(spec))
    except Exception:  # noqa: BLE001 - a hint is advice: a failing one changes nothing
        logger.debug("expect_reset raised", exc_info=True)


class LaterEpisodes:
    """Episodes that later runs start, known ahead (a stream's next groups), claimed for envs one run hands back.

    The owner adds each later run's episodes (:meth:`add`, one call per run: a group) in the order it means to
    start them and says when a run starts (:meth:`started`); a worker with nothing of its own run left to claim
    claims one for its env (:meth:`claim`), and the run that starts it takes that env when it is idle
    (:meth:`claimant`). The episodes of one run claim those of one later run: the first of them a run none of
    whose episodes is claimed yet, the others the rest of that run; so when a run ends, the envs told of a later
    run are all free together.
    """

    def __init__(self) -> None:
        self._runs: collections.deque[list[EpisodeSpec]] = collections.deque()  # per run: its episodes not claimed
        self._sizes: dict[int, int] = {}  # id(run's list) -> its episodes
        self._run_of: dict[int, list[EpisodeSpec]] = {}  # id(spec) -> its run's list
        self._targets: dict[str, list[EpisodeSpec]] = {}  # group id of a run -> the later run its envs claim
        self._claims: dict[int, tuple[EpisodeSpec, Any]] = {}  # id(spec) -> (spec, the env told of it)

    def __len__(self) -> int:
        """Episodes added and not started (claimed or not)."""
        return sum(self._sizes.values())

    def add(self, specs: Sequence[EpisodeSpec]) -> None:
        """Add the episodes of a run that will start after those added before (unless the owner reorders)."""
        if specs:
            run = list(specs)
            self._runs.append(run)
            self._sizes[id(run)] = len(run)
            self._run_of.update((id(spec), run) for spec in run)

    def _target(self, current: EpisodeSpec) -> list[EpisodeSpec] | None:
        """The later run whose episodes ``current``'s run claims (its episodes not claimed yet), or None."""
        target = self._targets.get(current.group_id)
        if target and any(run is target for run in self._runs):
            return target
        self._targets.pop(current.group_id, None)
        fits = [run for run in self._runs if run and _same_env(run[0], current)]
        whole = next((run for run in fits if len(run) == self._sizes[id(run)]), None)
        target = whole if whole is not None else next(iter(fits), None)
        if target is not None:
            self._targets[current.group_id] = target
        return target

    def claim(self, env: Any, current: EpisodeSpec) -> None:
        """Claim for ``env`` (whose episode ``current`` starts now) a later episode, and tell it.

        Nothing is claimed for an env without the hook, or when no later episode runs on the env id and keyword
        arguments of ``current``.
        """
        hook = reset_hook(env)
        if hook is None:
            return
        target = self._target(current)
        if target is None:
            return
        spec = target.pop(0)
        self._claims[id(spec)] = (spec, env)
        _tell(hook, spec)

    def envs_of(self, specs: Sequence[EpisodeSpec]) -> list[Any]:
        """The envs claimed for ``specs`` (those not claimed left out)."""
        return [claim[1] for spec in specs if (claim := self._claims.get(id(spec))) is not None]

    def started(self, specs: Sequence[EpisodeSpec]) -> None:
        """The run of ``specs`` starts now: no longer offered (their claims stay for :meth:`claimant`)."""
        for spec in specs:
            run = self._run_of.pop(id(spec), None)
            if run is not None and self._sizes.pop(id(run), None) is not None:
                self._runs.remove(run)
                self._targets = {group: target for group, target in self._targets.items() if target is not run}

    def claimant(self, spec: EpisodeSpec) -> Any | None:
        """The env claimed for ``spec`` (forgotten now), or None."""
        claim = self._claims.pop(id(spec), None)
        return None if claim is None else claim[1]

    def clear(self) -> None:
        """Forget every episode and claim."""
        self._runs.clear()
        self._sizes.clear()
        self._run_of.clear()
        self._targets.clear()
        self._claims.clear()
