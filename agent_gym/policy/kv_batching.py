"""The pieces of batched decoding with a KV cache (used by :mod:`agent_gym.policy.batch_engine`).

Drawing the next ids of rows at once (``_sample_rows``; ``sample_next`` for one), KV caches
that grow in place for encoding prompt heads, the batch KV store (``_SlotStore``: one slot per
sequence in preallocated per-layer buffers, so a sequence joins or leaves a running batch by
copying only its own keys/values), the per-sequence state of a batch row (``_Row``), and the
plan of a decode step that reads shared prompt heads once (``_PrefixPlan``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_gym.policy.logits import Penalties, draw_tokens
from agent_gym.types import FinishReason

if TYPE_CHECKING:
    from agent_gym.policy.sampling import SamplingParams

__all__ = ["LOGPROBS_MODES", "sample_next"]

#: Prompt heads are encoded and shared in chunks of this many ids.
_CHUNK = 64

#: The logprob modes, named as vLLM's ``--logprobs-mode`` values.
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


def sample_next(
    logits: Any,
    sampling: SamplingParams,
    generated: Sequence[int],
    context: Sequence[int],
    banned: Sequence[int],
    generator: Any,
) -> tuple[int, float]:
    """Pick the next id from raw logits; return ``(id, processed logprob)``.

    The same draw as ``TransformersPolicy`` makes for a sequence (see
    :func:`~agent_gym.policy.logits.draw_tokens`).

    Args:
        logits: 1-D float tensor of next-token logits.
        sampling: The sampling parameters.
        generated: Ids sampled so far in this turn (for frequency/presence penalties).
        context: Prompt and generated ids (for the repetition penalty).
        banned: Ids masked out (stop ids before ``min_tokens``).
        generator: A ``torch.Generator`` for reproducible draws.
    """
    penalties = Penalties(sampling, logits.numel(), context, generated)
    return _sample(logits, sampling, penalties, banned, generator)


def _sample(
    logits: Any, sampling: SamplingParams, penalties: Penalties, banned: Sequence[int], generator: Any
) -> tuple[int, float]:
    """``sample_next`` with the penalty inputs given as running state."""
    tokens, logps, _ = _sample_rows(logits[None], sampling, [penalties], [bool(banned)], banned, [generator], False)
    return tokens[0], logps[0]


def _sample_rows(
    logits: Any,
    sampling: SamplingParams,
    penalties: Sequence[Penalties],
    banned_rows: Sequence[bool],
    banned: Sequence[int],
    generators: Sequence[Any],
    raw: bool,
) -> tuple[list[int], list[float], list[float]]:
    """Draw the next id of every row of ``logits`` (``[rows, vocab]``, raw model logits).

    Returns:
        ``(ids, processed logprobs, raw logprobs)``, one per row; the raw ones only when
        ``raw`` (else an empty list).
    """
    import torch

    logits = logits.float()
    shaped = logits.clone()
    if any(p.seen is not None or p.counts is not None for p in penalties):
        shaped = torch.stack([p.apply(row) for p, row in zip(penalties, shaped.unbind(0), strict=True)])
    tokens, logp = draw_tokens(
        shaped,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        generators=generators,
        banned=banned,
        banned_rows=banned_rows,
    )
    index = torch.tensor(tokens, dtype=torch.long)[:, None]
    processed = logp.gather(1, index)[:, 0].tolist()
    raw_logps = torch.log_softmax(logits, dim=-1).gather(1, index)[:, 0].tolist() if raw else []
    return tokens, processed, raw_logps


def _cache_of(result: Any) -> Any:
    cache = getattr(result, "cache", None)
    return cache if cache is not None else result.past_key_values


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


def _as_cache(layers: Sequence[tuple[Any, Any]]) -> Any:
    """A ``DynamicCache`` holding per-layer ``(keys, values)``, with room to grow in place."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for keys, values in layers:
        layer = _growing_layer()
        layer.update(keys, values)
        cache.layers.append(layer)
    return cache


class _Row:
    """Decoding state of one sequence in a batch."""

    __slots__ = ("budget", "col0", "finish", "generator", "listener", "logps", "min_tokens", "out", "past",
                 "penalties", "prefix", "prompt", "session", "settings", "start", "stop_ids", "stop_list", "tag",
                 "top_n", "tops")

    def __init__(self, prompt: list[int], budget: int, generator: Any, penalties: Penalties) -> None:
        self.prompt = prompt
        self.session: str | None = None
        self.start = 0  # prompt ids already in ``past``
        self.past: list[tuple[Any, Any]] | None = None  # per layer (keys, values), batch of 1
        self.col0 = 0  # first column of the row in the batch store
        # (length, per layer (keys, values)) of each cached prompt head the row starts with, shortest first
        self.prefix: list[tuple[int, list[tuple[Any, Any]]]] = []
        self.budget = budget
        self.generator = generator
        self.penalties = penalties
        self.out: list[int] = []
        self.logps: list[float] = []
        self.finish: str = FinishReason.LENGTH
        # sampling of the row (set by BatchEngine.new_row): (temperature, top_k, top_p, min_p)
        self.settings: tuple[float, int, float, float] = (1.0, -1, 1.0, 0.0)
        self.stop_ids: frozenset[int] = frozenset()  # ids that end the row
        self.stop_list: tuple[int, ...] = ()  # the same, sorted: not drawn before ``min_tokens`` ids
        self.min_tokens = 0
        self.top_n = 0  # most likely ids kept per position in ``tops``
        self.tops: list[list[tuple[int, float]]] = []
        self.listener: Any = None  # called after each id; True ends the row
        self.tag: Any = None  # the caller's own state


class _SlotStore:
    """The keys/values of a decoding batch: per layer one ``[slots, heads, columns, head_dim]`` buffer.

    Row ``i`` of the batch lives in slot ``i``; its ids occupy columns ending at ``end`` (the
    column the next decode step writes for every row), right-aligned, and ``valid`` marks its
    columns (shorter rows and padding ids are masked). A row joins by copying its own cached
    keys/values into a free slot and encoding its new ids there; a row leaves by moving the last
    slot into its place. Buffers grow (columns, slots) by reallocation, rarely; nothing copies
    the whole batch per step. ``cache`` is the model cache whose layers read and write the
    window set by :meth:`window` (rows ``r0:r1``, columns ``lo:`` up to the written ones).
    """

    def __init__(self, model_device: Any, layers: int = 0) -> None:
        from transformers import DynamicCache

        self.device = model_device
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.valid: Any = None  # bool [slots, cap]
        self.slots = 0
        self.cap = 0
        self.end = 0
        self.rows: list[_Row] = []
        self.r0 = self.r1 = self.lo = self.w = 0
        self.cache = DynamicCache()
        layer_class = _slot_layer_class()
        # the model asks for its layers as it reaches them; the ones known are made now, because a
        # model that builds its own masks reads the first layer's length before any layer runs
        self.cache.layer_class_to_replicate = lambda: layer_class(self, len(self.cache.layers))
        for index in range(layers):
            self.cache.layers.append(layer_class(self, index))

    # -------------------------------------------------------------- buffers
    def _buffer(self, layer: int, like: Any) -> tuple[Any, Any]:
        import torch

        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer] is None:
            shape = (self.slots, like.shape[1], self.cap, like.shape[3])
            # zeros, not empty: masked columns must hold finite numbers (0 * nan is nan)
            self.keys[layer] = torch.zeros(shape, dtype=like.dtype, device=like.device)
            self.values[layer] = torch.zeros(shape, dtype=like.dtype, device=like.device)
        return self.keys[layer], self.values[layer]

    def _relayout(self, end: int, cap: int, slots: int) -> None:
        """Move the active columns so that they end at ``end``, in buffers of ``cap`` columns and ``slots`` slots.

        Buffers are reallocated only when they grow; otherwise the active columns move in place.
        """
        import torch

        n, shift = len(self.rows), end - self.end
        lo = min((r.col0 for r in self.rows), default=self.end)
        grow = self.valid is None or cap != self.cap or slots != self.slots
        if grow:
            valid = torch.zeros((slots, cap), dtype=torch.bool, device=self.device)
            if n:
                valid[:n, lo + shift : end] = self.valid[:n, lo : self.end]
            self.valid = valid
        elif n and shift:
            region = self.valid[:n, lo : self.end].clone()
            self.valid[:n] = False
            self.valid[:n, lo + shift : end] = region
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                if buf is None:
                    continue
                if grow:
                    new = buf.new_zeros((slots, buf.shape[1], cap, buf.shape[3]))
                    if n:
                        new[:n, :, lo + shift : end] = buf[:n, :, lo : self.end]
                    store[i] = new
                elif n and shift:
                    buf[:n, :, lo + shift : end] = buf[:n, :, lo : self.end].clone()
        for row in self.rows:
            row.col0 += shift
        self.end, self.cap, self.slots = end, cap, slots

    def reserve(self, left: int, rows: int) -> None:
        """Make room for ``rows`` more rows with ``left`` columns before ``end`` and one step after it."""
        end, cap, slots = self.end, self.cap, self.slots
        if not self.rows:
            end = left + 64  # room on the left for longer rows that join later
        elif end < left:
            end = left + 64
        if end + 1 > cap:
            lo = min((r.col0 for r in self.rows), default=end)
            if self.rows and end == self.end and lo > 64:  # shift left over the columns no row uses
                end -= lo - 64
            if end + 1 > cap:
                cap = end + max(256, end // 2)
        if len(self.rows) + rows > slots:
            slots = max(len(self.rows) + rows, 2 * slots, 4)
        if (end, cap, slots) != (self.end, self.cap, self.slots) or self.valid is None:
            self._relayout(end, cap, slots)

    # -------------------------------------------------------------- rows
    def place(self, row: _Row, new_ids: int, width: int) -> int:
        """Put ``row`` in the next slot and return the slot.

        Its cached ids go before the last ``width`` columns, its ``new_ids`` new ids at the end
        (the columns between are padding).
        """
        slot = len(self.rows)
        self.rows.append(row)
        end, start = self.end, row.start
        row.col0 = end - width - start
        self.valid[slot] = False
        if start:
            self.valid[slot, row.col0 : end - width] = True
            for layer, (k, v) in enumerate(row.past):
                keys, values = self._buffer(layer, k)
                keys[slot, :, row.col0 : end - width] = k[0]
                values[slot, :, row.col0 : end - width] = v[0]
        self.valid[slot, end - new_ids : end] = True
        row.past = None
        return slot

    def extract(self, slot: int) -> tuple[int, list[tuple[Any, Any]]]:
        """A copy of ``slot``'s keys/values (valid columns only, batch of 1) and its column count."""
        import torch

        row = self.rows[slot]
        where = torch.nonzero(self.valid[slot, row.col0 : self.end], as_tuple=True)[0] + row.col0
        kv = [(k[slot : slot + 1].index_select(2, where), v[slot : slot + 1].index_select(2, where))
              for k, v in zip(self.keys, self.values, strict=True)]
        return int(where.numel()), kv

    def remove(self, slot: int) -> None:
        """Drop ``slot``'s row; the last row moves into its slot."""
        last = len(self.rows) - 1
        if slot != last:
            moved = self.rows[last]
            lo = moved.col0
            for keys, values in zip(self.keys, self.values, strict=True):
                keys[slot, :, lo : self.end] = keys[last, :, lo : self.end]
                values[slot, :, lo : self.end] = values[last, :, lo : self.end]
            self.valid[slot] = self.valid[last]
            self.rows[slot] = moved
        self.rows.pop()

    # -------------------------------------------------------------- forward window
    def window(self, r0: int, r1: int, lo: int, w: int) -> None:
        """The next forward pass reads rows ``r0:r1`` from column ``lo`` and writes from column ``w``."""
        self.r0, self.r1, self.lo, self.w = r0, r1, lo, w

    def write(self, layer: int, key_states: Any, value_states: Any) -> tuple[Any, Any]:
        keys, values = self._buffer(layer, key_states)
        stop = self.w + key_states.shape[2]
        keys[self.r0 : self.r1, :, self.w : stop] = key_states
        values[self.r0 : self.r1, :, self.w : stop] = value_states
        return keys[self.r0 : self.r1, :, self.lo : stop], values[self.r0 : self.r1, :, self.lo : stop]


_SLOT_LAYER: Any = None


def _slot_layer_class() -> Any:
    """A model cache layer that reads and writes a :class:`_SlotStore`'s current window."""
    global _SLOT_LAYER
    if _SLOT_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class SlotLayer(DynamicLayer):
            def __init__(self, store: _SlotStore, index: int) -> None:
                super().__init__()
                self.store, self.index = store, index
                self.is_initialized = True

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                self.keys, self.values = self.store.write(self.index, key_states, value_states)
                return self.keys, self.values

            def get_seq_length(self) -> int:
                return self.store.w - self.store.lo

            def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
                return self.store.w - self.store.lo + query_length, 0

        _SLOT_LAYER = SlotLayer
    return _SLOT_LAYER


#: Name under which :func:`_shared_prefix_attention` is registered with transformers.
_ATTENTION_NAME = "agent_gym_shared_prefix"
_PLAN = threading.local()


class _PrefixPlan:
    """How one decode step attends: shared prompt heads read once per group of rows, the rest per row.

    Rows whose prompts start with the same cached head (an env's system prompt and tools) read
    its keys/values from one copy instead of from each row's slot: the slot window then starts
    after the heads (``mask`` hides the head columns of each row), and the scores over the head
    and over the slot are normalized together.

    Args:
        mask: bool ``[rows, columns]`` of the slot window each row attends to.
        groups: ``(row index tensor or slice, per layer (keys, values) of the head, head length)``.
    """

    def __init__(self, mask: Any, groups: list[tuple[Any, list[tuple[Any, Any]], int]]) -> None:
        self.mask = mask
        self.groups = groups
        self.longest = max(length for _, _, length in groups)
        self.calls = 0

    @classmethod
    def for_rows(cls, store: _SlotStore) -> _PrefixPlan | None:
        """The plan of the store's next decode step (and its window set), or None when no two rows share a head.

        Each row reads from one copy the longest cached head (``_Row.prefix``) it shares with
        another row of the batch.
        """
        import torch

        rows, end = store.rows, store.end
        counts = Counter(id(layers) for row in rows for _, layers in row.prefix)
        groups: dict[int, tuple[list[int], list[tuple[Any, Any]], int]] = {}
        starts = []
        for slot, row in enumerate(rows):
            shared = next(((length, layers) for length, layers in reversed(row.prefix) if counts[id(layers)] > 1),
                          None)
            if shared is None:
                starts.append(row.col0)
                continue
            length, layers = shared
            groups.setdefault(id(layers), ([], layers, length))[0].append(slot)
            starts.append(row.col0 + length)
        if not groups:
            return None
        lo = min(starts)
        store.window(0, len(rows), lo, end)
        device = store.valid.device
        cols = torch.arange(lo, end + 1, device=device)
        mask = store.valid[: len(rows), lo : end + 1] & (cols >= torch.tensor(starts, device=device)[:, None])
        return cls(mask, [(slice(None) if len(slots) == len(rows) else torch.tensor(slots), layers, length)
                          for slots, layers, length in groups.values()])

    def attend(self, layer: int, query: Any, key: Any, value: Any, scaling: float | None) -> Any:
        import torch

        self.calls += 1
        n, heads, _, dim = query.shape
        kv_heads = key.shape[1]
        rep = heads // kv_heads
        scale = scaling if scaling is not None else dim**-0.5
        q = query.reshape(n, kv_heads, rep, dim)
        slot = torch.matmul(q, key.transpose(-1, -2)).mul_(scale)
        slot.masked_fill_(~self.mask[:, None, None, :], float("-inf"))
        head = q.new_full((n, kv_heads, rep, self.longest), float("-inf"))
        for rows, layers, length in self.groups:
            qs = q[rows]
            k = layers[layer][0][0]  # [kv_heads, length, dim]
            scores = torch.matmul(qs.transpose(0, 1).reshape(kv_heads, -1, dim), k.transpose(-1, -2))
            head[rows, :, :, :length] = scores.view(kv_heads, -1, rep, length).transpose(0, 1) * scale
        probs = torch.softmax(torch.cat([head, slot], dim=-1), dim=-1)
        out = torch.matmul(probs[..., self.longest :], value)  # [n, kv_heads, rep, dim]
        for rows, layers, length in self.groups:
            v = layers[layer][1][0]
            p = probs[rows, :, :, :length]
            part = torch.matmul(p.transpose(0, 1).reshape(kv_heads, -1, length), v)
            out[rows] += part.view(kv_heads, -1, rep, dim).transpose(0, 1)
        return out.reshape(n, 1, heads, dim)


def _shared_prefix_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
    scaling: float | None = None, **kwargs: Any,
) -> tuple[Any, None]:
    """Attention of a decode step under a :class:`_PrefixPlan`; sdpa for any other call."""
    plan = getattr(_PLAN, "plan", None)
    if plan is None or query.shape[2] != 1:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return plan.attend(module.layer_idx, query, key, value, scaling), None


_REGISTERED = False


def _register_attention() -> str:
    """Register :func:`_shared_prefix_attention` with transformers (once); return its name."""
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(_ATTENTION_NAME, _shared_prefix_attention)
        # masks the model builds while the setting is on are sdpa's, as for every call but a planned one
        AttentionMaskInterface.register(_ATTENTION_NAME, sdpa_mask)
        _REGISTERED = True
    return _ATTENTION_NAME
