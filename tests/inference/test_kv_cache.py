"""KVStore: an LRU of cached keys/values bounded by the bytes they hold."""

from __future__ import annotations

import pytest
import torch

from agent_gym.inference import KVStore
from agent_gym.inference.kv_cache import as_cache, kv_nbytes


def _layers(ids: int, layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, 2, ids, 4), torch.zeros(1, 2, ids, 4)) for _ in range(layers)]


def test_bytes_count_the_storage_behind_views_once():
    layers = _layers(10)
    assert kv_nbytes(layers) == 2 * 2 * (2 * 10 * 4 * 4)
    buffer = torch.zeros(1, 2, 30, 4)
    views = [(buffer[:, :, :10], buffer[:, :, 10:20])]  # two views of one 30-column buffer
    assert kv_nbytes(views) == buffer.untyped_storage().nbytes()
    grown = as_cache(layers)  # a copy with room to grow: its storage is what it holds
    assert kv_nbytes([(layer.keys, layer.values) for layer in grown.layers]) >= kv_nbytes(layers)


def test_least_recently_used_entries_leave_when_the_budget_is_exceeded():
    store: KVStore[str, str] = KVStore(100)
    assert store.put("a", "A", 40) and store.put("b", "B", 40)
    assert store.get("a") == "A"  # now "b" is the oldest
    store.put("c", "C", 40)
    assert "b" not in store and store.peek("a") == "A" and store.peek("c") == "C"
    assert store.nbytes == 80 and len(store) == 2
    store.put("a", "A2", 10)  # replacing an entry counts its new size only
    assert store.nbytes == 50 and store.pop("a") == "A2" and store.nbytes == 40
    assert store.pop("missing") is None and store.get("missing") is None


def test_an_entry_larger_than_the_budget_is_not_kept():
    store: KVStore[str, str] = KVStore(100)
    store.put("a", "A", 60)
    assert not store.put("big", "B", 101)
    assert "big" not in store and store.peek("a") == "A"  # nothing else was evicted for it
    off: KVStore[str, str] = KVStore(0)
    assert not off.put("a", "A", 1) and len(off) == 0
    store.clear()
    assert len(store) == 0 and store.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        KVStore(-1)
