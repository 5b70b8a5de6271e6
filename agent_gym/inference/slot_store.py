"""The batch KV store of a decoding batch (one slot per sequence in preallocated per-layer buffers).

A sequence joins a running batch by copying only its own cached keys/values into a free slot and
leaves it by moving the last slot into its place, so no decode step copies the whole batch.
:class:`SlotStore` is used by :class:`~agent_gym.inference.batch_engine.BatchEngine`; its
``cache`` is the model cache whose layers read and write the store's current window.
"""

from __future__ import annotations

from typing import Any, cast

from agent_gym.inference.row import KVLayers, Row

__all__ = ["SlotStore"]


class SlotStore:
    """The keys/values of a decoding batch: per layer one ``[slots, heads, columns, head_dim]`` buffer.

    Row ``i`` of the batch lives in slot ``i``; its ids occupy columns ending at ``end`` (the
    column the next decode step writes for every row), right-aligned, and ``valid`` marks its
    columns (shorter rows and padding ids are masked). A row joins by copying its own cached
    keys/values into a free slot and encoding its new ids there; a row leaves by moving the last
    slot into its place. Buffers grow (columns, slots) by reallocation, rarely; nothing copies
    the whole batch per step. ``cache`` is the model cache whose layers read and write the
    window set by :meth:`window` (rows ``r0:r1``, columns ``lo:`` up to the written ones).

    Args:
        model_device: The device of the model's keys/values.
        layers: The model's number of layers (their cache layers are made at once).
        left_room: Free columns kept before the longest row when ``end`` is placed anew.
        grow: Fewest columns added after ``end`` when the buffers grow.
        grow_fraction: Columns added after ``end`` when the buffers grow, as a fraction of ``end``
            (the larger of the two counts; small values only make the buffers grow more often).
    """

    def __init__(self, model_device: Any, layers: int = 0, *, left_room: int = 64, grow: int = 256,
                 grow_fraction: float = 0.5) -> None:
        from transformers import DynamicCache

        if left_room < 0 or grow < 1 or grow_fraction < 0:
            raise ValueError(f"expected left_room >= 0, grow >= 1 and grow_fraction >= 0, "
                             f"got {left_room}, {grow} and {grow_fraction}")
        self.device = model_device
        self.left_room = left_room
        self.grow = grow
        self.grow_fraction = grow_fraction
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.valid: Any = None  # bool [slots, cap]
        self.slots = 0
        self.cap = 0
        self.end = 0
        self.rows: list[Row] = []
        self.r0 = self.r1 = self.lo = self.w = 0
        self.cache: Any = cast(Any, DynamicCache())
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
        """Make room for ``rows`` more rows with ``left`` columns before ``end`` and one step after it.

        Afterwards ``left <= end < cap`` and there are slots for ``rows`` more rows. When the
        columns are used up, the rows first move left over the columns none of them uses
        (keeping ``left`` columns before ``end``), and the buffers grow only if that is not enough.
        """
        end, cap, slots = self.end, self.cap, self.slots
        if not self.rows or end < left:
            end = left + self.left_room  # room on the left for longer rows that join later
        if end + 1 > cap:
            lo = min((r.col0 for r in self.rows), default=end)
            if self.rows and end == self.end:  # shift left over the columns no row uses, never below ``left``
                end -= max(0, min(lo - self.left_room, end - left))
            if end + 1 > cap:
                cap = end + max(self.grow, int(end * self.grow_fraction))
        if len(self.rows) + rows > slots:
            slots = max(len(self.rows) + rows, 2 * slots, 4)
        if (end, cap, slots) != (self.end, self.cap, self.slots) or self.valid is None:
            self._relayout(end, cap, slots)

    # -------------------------------------------------------------- rows
    def place(self, row: Row, new_ids: int, width: int) -> int:
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
            for layer, (k, v) in enumerate(row.past or ()):
                keys, values = self._buffer(layer, k)
                keys[slot, :, row.col0 : end - width] = k[0]
                values[slot, :, row.col0 : end - width] = v[0]
        self.valid[slot, end - new_ids : end] = True
        row.past = None
        return slot

    def extract(self, slot: int) -> tuple[int, KVLayers]:
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
        """Write a pass's new keys/values of ``layer`` at the window; return the window's keys/values."""
        keys, values = self._buffer(layer, key_states)
        stop = self.w + key_states.shape[2]
        keys[self.r0 : self.r1, :, self.w : stop] = key_states
        values[self.r0 : self.r1, :, self.w : stop] = value_states
        return keys[self.r0 : self.r1, :, self.lo : stop], values[self.r0 : self.r1, :, self.lo : stop]


_SLOT_LAYER: Any = None


def _slot_layer_class() -> Any:
    """A model cache layer that reads and writes a :class:`SlotStore`'s current window."""
    global _SLOT_LAYER
    if _SLOT_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class SlotLayer(DynamicLayer):
            def __init__(self, store: SlotStore, index: int) -> None:
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
