"""Batched decoding with a KV cache for :class:`~agent_gym.policy.transformers_policy.TransformersPolicy`.

The pieces the policy's worker thread runs: drawing the next id of a row (``sample_next``),
KV caches that grow in place instead of being copied every step, the per-sequence state of
a batch row (``_Row``), and the worker (``_Batcher``) that gathers concurrent turns into one
left-padded batch and lets new turns join between decode steps.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from agent_gym.policy.logits import Penalties, draw_token
from agent_gym.types import FinishReason

if TYPE_CHECKING:
    from agent_gym.policy.sampling import SamplingParams
    from agent_gym.policy.transformers_policy import TransformersPolicy

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
    token, logp = draw_token(
        penalties.apply(logits.float().clone()),
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        generator=generator,
        banned=banned,
    )
    return token, float(logp[token])


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


def _join(layers: list[tuple[Any, Any]], mask: Any, kv: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]], Any]:
    """Append one sequence's KV cache (batch of 1, every column used) to a left-padded batch cache."""
    import torch
    import torch.nn.functional as F

    width = kv[0][0].shape[2]
    row_mask = torch.ones((1, width), dtype=torch.long)
    if mask is None:
        return list(kv), row_mask
    have = mask.shape[1]
    if width > have:
        layers = [(F.pad(k, (0, 0, width - have, 0)), F.pad(v, (0, 0, width - have, 0))) for k, v in layers]
        mask = F.pad(mask, (width - have, 0))
    elif width < have:
        kv = [(F.pad(k, (0, 0, have - width, 0)), F.pad(v, (0, 0, have - width, 0))) for k, v in kv]
        row_mask = F.pad(row_mask, (have - width, 0))
    layers = [(torch.cat([k, k1]), torch.cat([v, v1])) for (k, v), (k1, v1) in zip(layers, kv, strict=True)]
    return layers, torch.cat([mask, row_mask])


class _Row:
    """Decoding state of one sequence in a batch."""

    __slots__ = ("budget", "finish", "generator", "logps", "out", "past", "penalties", "prompt", "session", "start")

    def __init__(self, prompt: list[int], budget: int, generator: Any, penalties: Penalties) -> None:
        self.prompt = prompt
        self.session: str | None = None
        self.start = 0  # prompt ids already in ``past``
        self.past: list[tuple[Any, Any]] | None = None  # per layer (keys, values), batch of 1
        self.budget = budget
        self.generator = generator
        self.penalties = penalties
        self.out: list[int] = []
        self.logps: list[float] = []
        self.finish: str = FinishReason.LENGTH


class _Batcher:
    """A worker thread that decodes the waiting turns as one batch, admitting new ones as they come.

    After the first waiting turn it keeps collecting for as long as new turns keep arriving
    within ``gather_s`` (turns of episodes whose environment step is just finishing), up to
    ``max_batch`` sequences; while that batch decodes, turns that arrive join it.
    """

    def __init__(self, policy: TransformersPolicy, max_batch: int, gather_s: float = 0.004) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.gather_s = gather_s
        self._queue: queue.Queue[tuple[list[int], int, int | None, Future, str | None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="agent-gym-transformers-batcher", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, prompt_ids: list[int], max_tokens: int, seed: int | None, session: str | None = None) -> Future:
        future: Future = Future()
        self._queue.put((prompt_ids, max_tokens, seed, future, session))
        return future

    def close(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            closing = False
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=self.gather_s)
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                    break
                batch.append(nxt)
            if self._serve(batch):
                closing = True
            if closing:
                return

    def _serve(self, batch: list[tuple[list[int], int, int | None, Future, str | None]]) -> bool:
        """Decode ``batch`` and the turns that arrive meanwhile; True when ``close`` was called."""
        import torch

        closing = False
        futures: dict[int, Future] = {}

        def rows_of(items: list[tuple[list[int], int, int | None, Future, str | None]]) -> list[_Row]:
            rows = []
            for prompt, budget, seed, future, session in items:
                if future.set_running_or_notify_cancel():
                    row = self.policy._make_row(prompt, budget, seed, session)
                    futures[id(row)] = future
                    rows.append(row)
            return rows

        def admit(room: int) -> list[_Row]:
            nonlocal closing
            items = []
            while not closing and len(items) < room:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                else:
                    items.append(nxt)
            return rows_of(items)

        def finished(row: _Row) -> None:
            futures.pop(id(row)).set_result((row.out, row.logps, row.finish))

        try:
            rows = rows_of(batch)
            with self.policy._model_lock, torch.inference_mode():
                self.policy._run_rows(rows, admit, finished)
        except BaseException as exc:  # noqa: BLE001 - every waiting turn gets the error
            for future in futures.values():
                future.set_exception(exc)
        return closing
