"""In-process inference: continuous batched decoding of a Hugging Face causal LM.

The engine :class:`~agent_gym.policy.transformers_policy.TransformersPolicy` and the reference
server (:mod:`agent_gym.reference_server`) both decode with:

* :class:`BatchEngine` - one batch of rows (sequences) with a KV cache: rows join between decode
  steps and leave when they stop, at most ``max_batch`` at once; each decode step draws every
  row's next id in one batched call, each row from its own seeded generator; prompt heads shared
  between prompts are encoded once (and, in steps of many rows, read once).
* :class:`Batcher` - the worker thread in front of an engine: requests (one or more rows each) in,
  futures out.
* :class:`Row` - the decoding state of one sequence.
* :class:`KVStore` - the byte-bounded LRU behind the engine's prompt-head and session caches.
* :func:`draw_tokens`, :func:`draw_token`, :func:`sample_next`, :class:`Penalties` - next-token
  selection (penalties, temperature, top-k / top-p / min-p, the draw), and
  :data:`LOGPROBS_MODES`, which distribution a recorded logprob comes from.

Nothing here imports ``torch`` or ``transformers`` until it runs.
"""

from __future__ import annotations

from agent_gym.inference.batch_engine import CHUNK, DEFAULT_CACHE_BYTES, BatchEngine
from agent_gym.inference.batcher import Batcher
from agent_gym.inference.kv_cache import KVStore
from agent_gym.inference.logits import (
    LOGPROBS_MODES,
    DrawParams,
    Penalties,
    PenaltyParams,
    check_logprobs_mode,
    draw_token,
    draw_tokens,
    sample_next,
    sample_with_penalties,
)
from agent_gym.inference.row import Row
from agent_gym.inference.slot_store import SlotStore

__all__ = [
    "CHUNK",
    "DEFAULT_CACHE_BYTES",
    "LOGPROBS_MODES",
    "BatchEngine",
    "Batcher",
    "DrawParams",
    "KVStore",
    "Penalties",
    "PenaltyParams",
    "Row",
    "SlotStore",
    "check_logprobs_mode",
    "draw_token",
    "draw_tokens",
    "sample_next",
    "sample_with_penalties",
]
