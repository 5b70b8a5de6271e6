"""Keys/values kept between forward passes: growable model caches and a byte-bounded LRU of them.

:func:`as_cache` wraps per-layer ``(keys, values)`` in a ``DynamicCache`` whose layers write new
keys/values into spare room instead of concatenating (the encoding of prompt heads chunk by
chunk). :class:`KVStore` keeps such keys/values between calls (prompt-head chunks, sessions'
caches), most recently used last, and drops the oldest while their storage exceeds a byte budget:
a count bound says nothing about memory when one entry may hold a few ids or a whole long prompt.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["KVStore", "as_cache", "cache_of", "kv_nbytes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def cache_of(result: Any) -> Any:
    """The model cache of a forward pass's output (``cache`` or ``past_key_values``)."""
    cache = getattr(result, "cache", None)
    return cache if cache is not None else result.past_key_values


def kv_nbytes(layers: Sequence[tuple[Any, Any]]) -> int:
    """Bytes of the storage behind per-layer ``(keys, values)`` (a storage shared by views counted once)."""
    seen: dict[int, int] = {}
    for pair in layers:
        for tensor in pair:
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


_LAYER_CLASS: Any = None


def _growing_layer() -> Any:
    """A cache layer that writes new keys/values into spare room instead of concatenating.

    ``DynamicLayer`` copies the whole cache at every step (``torch.cat``); with a batch of
    long prompts and a tiny model that copy costs more than the step itself. The values, and so
    the sampled ids, are the same.
    """
    global _LAYER_CLASS
    if _LAYER_CLASS is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingLayer(DynamicLayer):
            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                if not self.is_initialized:
                    self.device = key_states.device
                    self.is_initialized = True
                    self._k = key_states.new_empty(key_states.shape[:2] + (0,) + key_states.shape[3:])
                    self._v = value_states.new_empty(value_states.shape[:2] + (0,) + value_states.shape[3:])
                    self._n = 0
                end = self._n + key_states.shape[2]
                if end > self._k.shape[2]:
                    room = max(end + 64, 2 * self._k.shape[2])
                    keys = self._k.new_empty(self._k.shape[:2] + (room,) + self._k.shape[3:])
                    values = self._v.new_empty(self._v.shape[:2] + (room,) + self._v.shape[3:])
                    keys[:, :, : self._n] = self._k[:, :, : self._n]
                    values[:, :, : self._n] = self._v[:, :, : self._n]
                    self._k, self._v = keys, values
                self._k[:, :, self._n : end] = key_states
                self._v[:, :, self._n : end] = value_states
                self._n = end
                self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
                return self.keys, self.values

        _LAYER_CLASS = GrowingLayer
    return _LAYER_CLASS()


def as_cache(layers: Sequence[tuple[Any, Any]]) -> Any:
    """A ``DynamicCache`` holding per-layer ``(keys, values)`` (copied), with room to grow in place."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for keys, values in layers:
        layer = _growing_layer()
        layer.update(keys, values)
        cache.layers.append(layer)
    return cache


class KVStore(Generic[K, V]):
    """A thread-safe LRU of cached keys/values bounded by the bytes they hold.

    Each entry is stored with its size; after each :meth:`put` the least recently used entries
    leave until the total is at most ``max_bytes``. An entry larger than the whole budget is
    not kept.

    Args:
        max_bytes: The byte budget (0 keeps nothing).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes: expected >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held by the entries."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The entry of ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def peek(self, key: K) -> V | None:
        """The entry of ``key`` without counting it as used, or None."""
        hit = self._entries.get(key)
        return None if hit is None else hit[0]

    def pop(self, key: K) -> V | None:
        """Remove and return the entry of ``key``, or None."""
        with self._lock:
            hit = self._entries.pop(key, None)
            if hit is None:
                return None
            self._bytes -= hit[1]
            return hit[0]

    def put(self, key: K, value: V, nbytes: int) -> bool:
        """Store ``value`` (holding ``nbytes``) under ``key``; False when it alone exceeds the budget."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > self.max_bytes:
                return False
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size
            return True

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
