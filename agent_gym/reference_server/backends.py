"""Token generation behind the reference server (the server's generation backends).

:class:`TransformersBackend` runs a Hugging Face causal LM in one background worker thread
with the continuous batching engine ``TransformersPolicy`` uses
(:class:`~agent_gym.inference.BatchEngine`): the samples of concurrent requests are
decoded together with a KV cache, a request that arrives joins the running batch between
decode steps (never more than ``max_batch`` samples at once: the samples of a request with a
large ``n`` join as others leave), so concurrent HTTP requests never block the event loop or
each other's I/O. Prompt heads shared between requests are encoded once and kept in a cache
bounded by bytes (``prefix_cache_bytes``).

Sampling follows vLLM: logits in float32; repetition/frequency/presence penalties; then
temperature, top-k, top-p and min-p, and one inverse-CDF draw per sample from its own
seeded generator (:func:`~agent_gym.inference.draw_tokens`, batched over the samples
with the same settings): a seed gives the same ids alone or in a batch.
The reported logprobs follow ``logprobs_mode``, named as vLLM's ``--logprobs-mode``:
``"raw_logprobs"`` (the default, as vLLM) is the log-softmax of the model's logits before
penalties, temperature and truncation, what a plain forward pass re-scoring the ids gives;
``"processed_logprobs"`` is the log-softmax of the distribution the id was drawn from
(after them; at temperature 0, after the penalties only). Top logprobs follow the same mode.
Generation stops on an EOS id (tokenizer or generation config), a ``stop_token_ids`` id, a
stop string, or ``max_tokens``.

:class:`FakeBackend` returns a fixed token sequence without any model (for benchmarks and
fault tests).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from agent_gym.checks import check_int
from agent_gym.inference import DEFAULT_CACHE_BYTES, BatchEngine, Batcher, Row, check_logprobs_mode

__all__ = ["FakeBackend", "GenRequest", "SeqResult", "TransformersBackend"]

logger = logging.getLogger(__name__)


@dataclass
class GenRequest:
    """One generation request: ``n`` samples continuing ``prompt_ids``.

    Attributes mirror vLLM's sampling parameters; ``seed`` seeds sample ``i`` with ``seed + i``.
    ``on_token``, when set, is called as ``on_token(i, token_id, logprob, top_logprobs)`` for
    each id sample ``i`` draws, as it is drawn (from the engine's thread; it must not block).
    """

    prompt_ids: list[int]
    max_tokens: int
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    top_logprobs: int = 0
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    on_token: Callable[[int, int, float, list[tuple[int, float]]], None] | None = field(
        default=None, repr=False, compare=False
    )


@dataclass
class SeqResult:
    """One finished sample.

    Attributes:
        token_ids: Sampled ids, including the final EOS/stop token when one ended the sample.
        logprobs: Logprob of each sampled id (raw or processed, the engine's ``logprobs_mode``).
        top_logprobs: Per position, ``[(id, logprob), ...]`` of the most likely ids (may be empty).
        text: Decoded output text (stop string / stop token text removed unless asked to keep it).
        finish_reason: ``"stop"`` or ``"length"``.
        stop_reason: The stop string or stop token id that ended the sample, else ``None``.
        weight_versions: The weight version of each sampled id, when the server tracks versions
            (see :mod:`agent_gym.reference_server.rl_control`).
    """

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str
    stop_reason: int | str | None = None
    weight_versions: list[int] | None = None


class _Seq:
    """Server-side state of one sample (a row of the shared :class:`BatchEngine`)."""

    __slots__ = ("cancelled", "hit", "index", "out", "req", "stop_by_token", "stop_reason", "text")

    def __init__(self, req: GenRequest, index: int, cancelled: threading.Event) -> None:
        self.req = req
        self.cancelled = cancelled  # set when nobody waits for the request any more
        self.index = index
        self.out: list[int] = []
        self.stop_by_token = False
        self.stop_reason: int | str | None = None
        self.text = ""
        self.hit = False  # ended by a stop string


def _decode_output(tokenizer: Any, seq: _Seq, *, check_stop: bool = False) -> tuple[str, str | None]:
    """Return (text, matched stop string) for the sequence's tokens so far.

    Stop strings follow vLLM's rule (``check_stop_strings``): only the text the last id added is
    searched, from ``len(stop) - 1`` characters before it; the string that ends first wins (ties
    in list order); the text ends before it, or right after it with ``include_stop_str_in_output``.
    """
    req = seq.req
    ids = seq.out
    if seq.stop_by_token and not req.include_stop_str_in_output:
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
    if not check_stop or not req.stop:
        return text, None
    new_from = len(tokenizer.decode(ids[:-1], skip_special_tokens=req.skip_special_tokens))
    best: tuple[int, str] | None = None
    for stop in req.stop:
        pos = text.find(stop, max(0, new_from - len(stop) + 1))
        if pos >= 0 and (best is None or pos + len(stop) < best[0] + len(best[1])):
            best = (pos, stop)
    if best is None:
        return text, None
    pos, stop = best
    return text[:pos + len(stop) if req.include_stop_str_in_output else pos], stop


class TransformersBackend:
    """Continuous batched sampling from a Hugging Face causal LM in a background thread.

    The decoding is :class:`~agent_gym.inference.BatchEngine`'s, the one
    ``TransformersPolicy`` uses: every sample of every waiting request is a row of one batch of
    at most ``max_batch`` rows; requests that arrive join the running batch between decode
    steps (samples that do not fit wait for others to leave), a finished sample leaves it;
    each decode step draws the next id of all rows at once (rows with the same
    temperature/top-k/top-p/min-p together), each row from its own generator; prompts are
    encoded in chunks whose keys/values are shared between prompts that start alike.

    Args:
        model_path: Directory (or hub id available offline) of the model and tokenizer.
        max_model_len: Context length; defaults to the config's ``max_position_embeddings``.
        max_batch: Maximum number of sequences (samples) decoded together.
        dtype: Torch dtype name of the weights (default ``"float32"``).
        device: Torch device (default ``"cpu"``).
        logprobs_mode: ``"raw_logprobs"`` (default, as vLLM) or ``"processed_logprobs"``
            (see the module docs).
        prefix_cache_bytes: Byte budget of the cached keys/values of shared prompt heads
            (least recently used leave first; 0 keeps none).
    """

    def __init__(
        self,
        model_path: str,
        *,
        max_model_len: int | None = None,
        max_batch: int = 64,
        dtype: str = "float32",
        device: str = "cpu",
        logprobs_mode: str = "raw_logprobs",
        prefix_cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        check_int("max_batch", max_batch, low=1)
        check_int("prefix_cache_bytes", prefix_cache_bytes, low=0)
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model: Any = cast(Any, AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)))
        self.model.to(device).eval()
        self.device = device
        cfg_len = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_model_len = int(max_model_len or cfg_len)
        self.vocab_size = int(self.model.config.vocab_size)
        self.eos_ids = self._collect_eos_ids()
        self.max_batch = max_batch
        pad = self.tokenizer.pad_token_id
        #: The shared decoding core; ``engine.stats`` counts its passes and rows per step.
        self.engine = BatchEngine(self.model, pad_id=pad if pad is not None else 0, vocab=self.vocab_size,
                                  logprobs_mode=self.logprobs_mode, max_batch=max_batch, reuse_kv=True,
                                  prefix_cache_bytes=prefix_cache_bytes)
        self._batcher = Batcher(self.engine, gather_s=0.0, name="agent-gym-reference-server")
        self._seed_rng = random.SystemRandom()

    def _collect_eos_ids(self) -> set[int]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(i) for i in ([gen_eos] if isinstance(gen_eos, int) else gen_eos))
        return ids

    @property
    def healthy(self) -> bool:
        """Whether the worker thread is alive."""
        return self._batcher.alive

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        """Queue ``req`` and wait (without blocking the event loop) for its ``n`` samples.

        Cancelling the wait (a client that went away) ends the request's samples at their next
        id, so they leave the batch.
        """
        cancelled = threading.Event()
        fut = self._batcher.submit(lambda: self._rows(req, cancelled), self._results, rows=req.n)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def close(self) -> None:
        """Stop the worker thread after the current batch."""
        self._batcher.close()

    async def reload_weights(self, model_path: str) -> None:
        """Load the weights of the checkpoint directory ``model_path`` (same architecture).

        The checkpoint is read off the event loop; the weights are copied in the worker thread
        between two decode steps, and every cached key/value (computed with the old weights) is
        dropped.
        """
        from transformers import AutoModelForCausalLM

        dtype = self.model.dtype
        loaded = await asyncio.to_thread(lambda: AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype))
        state = loaded.state_dict()

        def swap() -> list[Row]:
            self.model.load_state_dict(state, strict=False)
            self.engine.clear()
            return []

        await asyncio.wrap_future(self._batcher.submit(swap, lambda rows: None))

    # ----------------------------------------------------------------- worker thread
    def _rows(self, req: GenRequest, cancelled: threading.Event) -> list[Row]:
        """The rows of ``req``'s samples (sample ``i`` seeded with ``seed + i``)."""
        stop_ids = set(req.stop_token_ids) | (set() if req.ignore_eos else self.eos_ids)
        rows = []
        for index in range(req.n):
            seq = _Seq(req, index, cancelled)
            seed = req.seed + index if req.seed is not None else self._seed_rng.randrange(2**63)
            row = self.engine.new_row(req.prompt_ids, req.max_tokens, seed, req, sorted(stop_ids),
                                      min_tokens=req.min_tokens, top_logprobs=req.top_logprobs,
                                      listener=self._listener)
            row.tag = seq
            rows.append(row)
        return rows

    def _listener(self, row: Row) -> bool:
        """After each id of a sample: pass it to ``on_token``; True when a stop string ended the sample."""
        seq: _Seq = row.tag
        req = seq.req
        seq.out = row.out
        token = row.out[-1]
        if seq.cancelled.is_set():
            return True
        if req.on_token is not None:
            try:
                req.on_token(seq.index, token, row.logps[-1], row.tops[-1] if row.top_n else [])
            except Exception:  # a listener's failure must not stop the batch
                logger.exception("on_token callback failed")
        if req.stop and len(row.out) > req.min_tokens and token not in row.stop_ids:
            text, hit = _decode_output(self.tokenizer, seq, check_stop=True)
            if hit is not None:
                seq.hit, seq.stop_reason, seq.text = True, hit, text
                return True
        return False

    def _results(self, rows: list[Row]) -> list[SeqResult]:
        results = []
        for row in rows:
            seq: _Seq = row.tag
            req = seq.req
            seq.out = row.out
            if row.finish == "stop" and not seq.hit:
                token = row.out[-1]
                seq.stop_by_token = True
                # vLLM: the id that ended the sample, unless it is the tokenizer's end of sequence
                eos = getattr(self.tokenizer, "eos_token_id", None)
                seq.stop_reason = token if token in req.stop_token_ids and token != eos else None
            if not seq.hit:
                seq.text = _decode_output(self.tokenizer, seq)[0]
            tops = row.tops if row.top_n else [[] for _ in row.out]
            results.append(SeqResult(row.out, row.logps, tops, seq.text, str(row.finish), seq.stop_reason))
        return results


class FakeBackend:
    """A model-free backend returning a fixed token sequence (benchmarks and fault tests).

    Every sample is ``num_tokens - 1`` copies of ``token_id`` followed by the EOS id (cut to
    ``max_tokens``, finish reason ``"length"``, when that is shorter; a prompt that ends with copies
    of the id gets only the rest of the answer, so a turn continued after a pause ends where it would
    have), each with logprob
    ``-0.5`` (in either ``logprobs_mode``), after ``latency_ms`` of non-blocking sleep, then
    ``token_latency_ms`` per token (the ids are passed to ``GenRequest.on_token`` one by one,
    so a streamed answer arrives token by token). There is no concurrency limit.

    Args:
        tokenizer: Tokenizer used for chat templates, ``/tokenize`` and decoding.
        num_tokens: Length of the fixed answer (>= 1).
        latency_ms: Delay before each answer.
        max_model_len: Context length reported and enforced.
        token_id: The repeated id (defaults to the id of ``" ok"``'s first token).
        token_latency_ms: Delay of each token after the first delay.
        logprobs_mode: The mode the server reports (the fixed logprob does not depend on it).
    """

    LOGPROB = -0.5

    def __init__(
        self,
        tokenizer: Any,
        *,
        num_tokens: int,
        latency_ms: float = 0.0,
        max_model_len: int = 32768,
        token_id: int | None = None,
        token_latency_ms: float = 0.0,
        logprobs_mode: str = "raw_logprobs",
    ) -> None:
        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        if num_tokens < 1:
            raise ValueError(f"expected num_tokens >= 1, got {num_tokens}")
        self.tokenizer = tokenizer
        self.model_path = "fake"
        self.num_tokens = num_tokens
        self.latency = latency_ms / 1000.0
        self.token_latency = token_latency_ms / 1000.0
        self.max_model_len = max_model_len
        self.vocab_size = len(tokenizer)
        self.eos_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        self.eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.token_id = token_id if token_id is not None else tokenizer.encode(" ok", add_special_tokens=False)[0]
        self._texts: dict[tuple[int, bool, bool], str] = {}

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        """Return ``req.n`` copies of the fixed answer after the configured latency."""
        if self.latency:
            await asyncio.sleep(self.latency)
        # A prompt that ends with copies of the id continues the answer (a turn resumed after a pause).
        head = 0
        while head < min(len(req.prompt_ids), self.num_tokens - 1) and req.prompt_ids[-1 - head] == self.token_id:
            head += 1
        ids = [self.token_id] * (self.num_tokens - 1 - head) + [self.eos]
        finish = "stop"
        if len(ids) > req.max_tokens:
            ids, finish = ids[: req.max_tokens], "length"
        key = (len(ids), finish == "stop" and not req.include_stop_str_in_output, req.skip_special_tokens)
        text = self._texts.get(key)
        if text is None:
            shown = ids[:-1] if key[1] else ids
            text = self.tokenizer.decode(shown, skip_special_tokens=req.skip_special_tokens)
            self._texts[key] = text
        tops: list[list[tuple[int, float]]] = [[(i, self.LOGPROB)] if req.top_logprobs else [] for i in ids]
        if self.token_latency or req.on_token is not None:
            for k, token in enumerate(ids):
                if self.token_latency:
                    await asyncio.sleep(self.token_latency)
                if req.on_token is not None:
                    for i in range(req.n):
                        req.on_token(i, token, self.LOGPROB, tops[k])
        return [SeqResult(list(ids), [self.LOGPROB] * len(ids), tops, text, finish, None) for _ in range(req.n)]

    async def reload_weights(self, model_path: str) -> None:
        """Record ``model_path`` as ``checkpoint`` (there are no weights: the answers do not change)."""
        self.checkpoint = model_path

    def close(self) -> None:
        """Nothing to release."""
