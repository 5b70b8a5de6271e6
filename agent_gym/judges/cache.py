"""``VerdictCache``: identical judge questions are asked once (by content hash), also when asked concurrently.

The key is a SHA-256 of the judge's fingerprint (model, scale, templates) and the request's
content (the kind of verdict, question, reference, answers), so eight samples of a group that
gave the same final answer cost one judge call. Only verdicts are kept: a failed call is not
cached (a later request asks again), and requests waiting on it get its failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

__all__ = ["HitCounter", "VerdictCache", "content_key", "verdict_once"]

T = TypeVar("T")


def content_key(*parts: Any) -> str:
    """A SHA-256 hex digest of ``parts`` written as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerdictCache:
    """Verdicts by content key, with requests for a key being computed joining that computation.

    Args:
        max_entries: Most verdicts kept (the oldest leave first).

    Attributes:
        hits: Requests answered from the cache or by joining a computation in flight.
        misses: Requests that computed their verdict.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries: expected an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._done: dict[str, Any] = {}
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._done)

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[T]],
                             on_hit: Callable[[], None] | None = None) -> tuple[T, bool]:
        """The verdict for ``key``: ``(value, True)`` when it was cached or in flight, else computed now.

        Args:
            key: A :func:`content_key`.
            compute: Makes the verdict; its exception propagates (to the requests waiting too) and
                nothing is cached.
            on_hit: Called when the request is answered without a call of its own (also when the call it
                joined then fails).
        """
        if key in self._done:
            self.hits += 1
            if on_hit is not None:
                on_hit()
            return self._done[key], True
        pending = self._pending.get(key)
        loop = asyncio.get_running_loop()
        if pending is not None and pending.get_loop() is loop:
            self.hits += 1
            if on_hit is not None:
                on_hit()
            return await asyncio.shield(pending), True
        self.misses += 1
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[key] = future
        try:
            value = await compute()
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        else:
            future.set_result(value)
            self._done[key] = value
            while len(self._done) > self.max_entries:
                self._done.pop(next(iter(self._done)))
            return value, False
        finally:
            if self._pending.get(key) is future:
                del self._pending[key]


class HitCounter(Protocol):
    """Where a judge call's cache hits are counted (a judge's per-episode log)."""

    cache_hits: int


async def verdict_once(cache: VerdictCache | None, key: str, compute: Callable[[], Awaitable[T]],
                       log: HitCounter | None = None) -> T:
    """``compute()``'s verdict, through ``cache`` when there is one (a hit counted in ``log``).

    Args:
        cache: The judge's cache, or None to compute every time.
        key: A :func:`content_key` of the judge's fingerprint and the judged content.
        compute: Makes the verdict.
        log: Counts the hits, when given.
    """
    if cache is None:
        return await compute()

    def counted() -> None:
        if log is not None:
            log.cache_hits += 1

    value, _ = await cache.get_or_compute(key, compute, counted)
    return value
