"""Envs kept between episodes: :class:`EnvPool`, idle envs by key, reused through ``reset``.

An :class:`~agent_gym.rollout.runner.EpisodeRunner` takes an idle env of the episode's key
(its env id, ``gym.make`` keyword arguments and parser), builds one only when none is idle,
and gives it back when the episode ends; Gymnasium's contract is that ``reset`` starts a new
episode on the same env. An env that raised, or whose episode was cancelled while a call on
it was running, is never given back: the runner discards it (closed once the call returns).
Idle envs of other keys beyond ``capacity`` are closed, oldest first, so a runner whose
episodes change env ids keeps a bounded number of envs.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

__all__ = ["EnvPool", "env_key", "safe_close"]

logger = logging.getLogger(__name__)


def safe_close(env: Any) -> None:
    """``env.close()``; a failure is logged (closing a broken env is best effort)."""
    try:
        env.close()
    except Exception:  # noqa: BLE001
        logger.debug("env.close() failed", exc_info=True)


class _Same:
    """A key part comparing by identity (an unhashable or opaque object)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, Mapping):
        return ("{", tuple(sorted(((str(k), _freeze(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (list, tuple)):
        return ("[", tuple(_freeze(v) for v in value))
    return _Same(value)


def env_key(*parts: Any) -> Hashable:
    """A pool key from ``parts`` (plain values by value, dicts and lists by content, other objects by identity)."""
    return tuple(_freeze(part) for part in parts)


class EnvPool:
    """Idle envs by key, and how many were built.

    The pool only keeps books; building and closing are the caller's (they may block, so the
    runner does them on its worker threads).

    Args:
        capacity: Most idle envs kept over all keys before idle envs of other keys are closed.
        close: Closes an evicted env (default :func:`safe_close`, on this thread).
    """

    def __init__(self, capacity: int, close: Callable[[Any], None] | None = None) -> None:
        self.capacity = max(1, int(capacity))
        self.close_env = close or safe_close
        self.built = 0
        self.discarded = 0
        self._idle: collections.OrderedDict[int, tuple[Hashable, Any]] = collections.OrderedDict()
        self._closed = False

    @property
    def idle(self) -> int:
        """Envs waiting for an episode."""
        return len(self._idle)

    def take(self, key: Hashable, prefer: Any = None) -> Any | None:
        """An idle env of ``key``: ``prefer`` when it is one, else the most recently used; None: build one."""
        if prefer is not None and self.is_idle(prefer) and self._idle[id(prefer)][0] == key:
            return self._idle.pop(id(prefer))[1]
        for token in reversed(self._idle):
            if self._idle[token][0] == key:
                return self._idle.pop(token)[1]
        return None

    def is_idle(self, env: Any) -> bool:
        """Whether ``env`` waits in the pool for an episode."""
        return self._idle.get(id(env), (None, None))[1] is env

    def count_built(self) -> int:
        """Record one env built; returns its index among the envs built (a factory list cycles by it)."""
        self.built += 1
        return self.built - 1

    def give_back(self, key: Hashable, env: Any) -> None:
        """Keep ``env`` for the next episode of ``key`` (closed instead when the pool is closed)."""
        if self._closed:
            self.close_env(env)
            return
        self._idle[id(env)] = (key, env)
        while len(self._idle) > self.capacity:
            victim = next((t for t, (k, _) in self._idle.items() if k != key), None)
            if victim is None:
                break
            self.close_env(self._idle.pop(victim)[1])

    def discard(self) -> None:
        """Record that an env was dropped instead of given back (it is the caller's to close)."""
        self.discarded += 1

    def drain(self) -> Sequence[Any]:
        """Close the pool: return the idle envs (for the caller to close); later returns are closed."""
        self._closed = True
        envs = [env for _, env in self._idle.values()]
        self._idle.clear()
        return envs
