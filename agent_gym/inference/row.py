"""The decoding state of one sequence in a batch (a row of :class:`~agent_gym.inference.BatchEngine`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_gym.inference.logits import Penalties
from agent_gym.types import FinishReason

__all__ = ["KVLayers", "Row"]

#: Per model layer ``(keys, values)``, each ``[batch, kv_heads, ids, head_dim]``.
KVLayers = list[tuple[Any, Any]]


class Row:
    """Decoding state of one sequence in a batch.

    Made by :meth:`BatchEngine.new_row <agent_gym.inference.BatchEngine.new_row>`; the engine
    fills ``out``, ``logps``, ``tops`` and ``finish`` as it decodes.

    Args:
        prompt: Prompt ids.
        budget: Most ids to sample.
        generator: The row's own ``torch.Generator``.
        penalties: Running penalty inputs of the row.

    Attributes:
        out: Sampled ids (the stop id included when one ended the row).
        logps: Logprob of each sampled id (the engine's logprobs mode).
        tops: Per sampled id, the ``top_n`` most likely ``(id, logprob)`` pairs.
        finish: ``"stop"`` or ``"length"``.
        session: Session whose cached keys/values the prompt extends (None: no session).
        start: Prompt ids already in ``past`` (encoded before the row joins).
        past: Per layer (keys, values) of the first ``start`` prompt ids, batch of 1.
        col0: First column of the row in the batch store.
        prefix: ``(length, per layer (keys, values))`` of each cached prompt head the row starts
            with, shortest first (read once per group of rows by a shared-head decode step).
        settings: ``(temperature, top_k, top_p, min_p)`` of the row's draws.
        stop_ids: Ids that end the row; ``stop_list`` the same ids, sorted (not drawn before
            ``min_tokens`` ids).
        listener: Called as ``listener(row)`` after each id; True ends the row (``"stop"``).
        tag: The caller's own state.
    """

    __slots__ = ("budget", "col0", "finish", "generator", "listener", "logps", "min_tokens", "out", "past",
                 "penalties", "prefix", "prompt", "session", "settings", "start", "stop_ids", "stop_list", "tag",
                 "top_n", "tops")

    def __init__(self, prompt: list[int], budget: int, generator: Any, penalties: Penalties) -> None:
        self.prompt = prompt
        self.session: str | None = None
        self.start = 0
        self.past: KVLayers | None = None
        self.col0 = 0
        self.prefix: list[tuple[int, KVLayers]] = []
        self.budget = budget
        self.generator = generator
        self.penalties = penalties
        self.out: list[int] = []
        self.logps: list[float] = []
        self.finish: str = FinishReason.LENGTH
        self.settings: tuple[float, int, float, float] = (1.0, -1, 1.0, 0.0)
        self.stop_ids: frozenset[int] = frozenset()
        self.stop_list: tuple[int, ...] = ()
        self.min_tokens = 0
        self.top_n = 0
        self.tops: list[list[tuple[int, float]]] = []
        self.listener: Callable[[Row], bool] | None = None
        self.tag: Any = None

    @property
    def new_ids(self) -> int:
        """Prompt ids still to encode when the row joins."""
        return len(self.prompt) - self.start
