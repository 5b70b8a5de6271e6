"""Decode steps that read shared prompt heads once per group of rows.

In a decode step of several rows whose prompts start with the same cached head (an env's system
prompt and tools), that head's keys/values are read once for all of them instead of once per row
(attention is memory-bound at these sizes). :class:`PrefixPlan` says how one step attends;
:func:`planned_attention` runs a forward pass under a plan, through an attention function
registered with transformers and used only for that pass.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_gym.inference.slot_store import SlotStore

__all__ = ["PrefixPlan", "planned_attention"]

#: Name under which :func:`_shared_prefix_attention` is registered with transformers.
_ATTENTION_NAME = "agent_gym_shared_prefix"
_PLAN = threading.local()


class PrefixPlan:
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
    def for_rows(cls, store: SlotStore) -> PrefixPlan | None:
        """The plan of the store's next decode step (and its window set), or None when no two rows share a head.

        Each row reads from one copy the longest cached head (``Row.prefix``) it shares with
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
        """Attention output ``[rows, 1, heads, head_dim]`` of ``layer`` for one query id per row.

        ``key``/``value`` are the slot window's (``[rows, kv_heads, columns, head_dim]``); each
        group's head is read from its one copy.
        """
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
    """Attention of a decode step under a :class:`PrefixPlan`; sdpa for any other call."""
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


@contextmanager
def planned_attention(model: Any, plan: PrefixPlan) -> Iterator[None]:
    """Run the forward passes of the block under ``plan`` (decode steps of one id per row).

    The model's attention setting is switched to the shared-head attention only for the block
    (the masks the model builds itself elsewhere depend on it), and back afterwards.
    """
    config = model.config
    saved = config._attn_implementation
    config._attn_implementation = _register_attention()
    _PLAN.plan = plan
    try:
        yield
    finally:
        _PLAN.plan = None
        config._attn_implementation = saved
