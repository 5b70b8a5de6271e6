"""Token generation behind the reference server (the server's generation backends).

:class:`TransformersEngine` runs a Hugging Face causal LM in one background worker thread.
Requests are queued; the worker takes every request waiting at that moment, left-pads all
their sequences into one batch and decodes them together with a KV cache (static batching),
so concurrent HTTP requests never block the event loop or each other's I/O.

Sampling follows vLLM: logits in float32; repetition/frequency/presence penalties; then
temperature, top-k, top-p and min-p (the shared chooser of :mod:`agent_gym.policy.logits`).
The reported logprobs follow ``logprobs_mode``, named as vLLM's ``--logprobs-mode``:
``"raw_logprobs"`` (the default, as vLLM) is the log-softmax of the model's logits before
penalties, temperature and truncation, what a plain forward pass re-scoring the ids gives;
``"processed_logprobs"`` is the log-softmax of the distribution the id was drawn from
(after them; at temperature 0, after the penalties only). Top logprobs follow the same mode.
Generation stops on an EOS id (tokenizer or generation config), a ``stop_token_ids`` id, a
stop string, or ``max_tokens``.

:class:`FakeEngine` returns a fixed token sequence without any model (for benchmarks and
fault tests).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from agent_gym.policy.logits import Penalties, draw_token
from agent_gym.policy.sampling import check_logprobs_mode

__all__ = ["FakeEngine", "GenRequest", "SeqResult", "TransformersEngine"]

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
    """

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str
    stop_reason: int | str | None = None


class _Seq:
    """Mutable decoding state of one sample inside a batch."""

    def __init__(self, req: GenRequest, index: int, vocab_size: int) -> None:
        import torch

        self.req = req
        self.index = index
        self.penalties = Penalties(req, vocab_size, req.prompt_ids, ())
        self.out: list[int] = []
        self.lps: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self.done = False
        self.finish_reason = "length"
        self.stop_reason: int | str | None = None
        self.stop_by_token = False
        self.text = ""
        self.gen = torch.Generator()
        seed = req.seed + index if req.seed is not None else random.SystemRandom().randrange(2**63)
        self.gen.manual_seed(seed)


def _decode_output(tokenizer: Any, seq: _Seq) -> tuple[str, str | None]:
    """Return (text, matched stop string) for the sequence's tokens so far."""
    req = seq.req
    ids = seq.out
    if seq.stop_by_token and not req.include_stop_str_in_output:
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
    for s in req.stop:
        pos = text.find(s)
        if pos >= 0:
            end = pos + len(s) if req.include_stop_str_in_output else pos
            return text[:end], s
    return text, None


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


class TransformersEngine:
    """Batched sampling from a Hugging Face causal LM in a background thread.

    Args:
        model_path: Directory (or hub id available offline) of the model and tokenizer.
        max_model_len: Context length; defaults to the config's ``max_position_embeddings``.
        max_batch: Maximum number of sequences decoded together.
        dtype: Torch dtype name of the weights (default ``"float32"``).
        device: Torch device (default ``"cpu"``).
        logprobs_mode: ``"raw_logprobs"`` (default, as vLLM) or ``"processed_logprobs"``
            (see the module docs).
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
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device).eval()
        self.device = device
        cfg_len = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_model_len = int(max_model_len or cfg_len)
        self.vocab_size = int(self.model.config.vocab_size)
        self.eos_ids = self._collect_eos_ids()
        self.max_batch = max_batch
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self._queue: queue.Queue[tuple[GenRequest, Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._worker, name="agent-gym-engine", daemon=True)
        self._thread.start()

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
        return self._thread.is_alive()

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        """Queue ``req`` and wait (without blocking the event loop) for its ``n`` samples."""
        fut: Future = Future()
        self._queue.put((req, fut))
        return await asyncio.wrap_future(fut)

    def close(self) -> None:
        """Stop the worker thread after the current batch."""
        self._queue.put(None)

    # ----------------------------------------------------------------- worker thread
    def _worker(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            n_seqs = item[0].n
            while n_seqs < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
                n_seqs += nxt[0].n
            pending = [(r, f) for r, f in batch if f.set_running_or_notify_cancel()]
            if not pending:
                continue
            try:
                results = self._run_batch([r for r, _ in pending])
            except Exception as exc:  # report to every waiting request; keep serving
                logger.exception("generation failed")
                for _, f in pending:
                    f.set_exception(exc)
                continue
            for (_, f), res in zip(pending, results, strict=False):
                f.set_result(res)

    def _run_batch(self, reqs: list[GenRequest]) -> list[list[SeqResult]]:
        import torch

        seqs = [_Seq(r, i, self.vocab_size) for r in reqs for i in range(r.n)]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        width = max(len(s.req.prompt_ids) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, s in enumerate(seqs):
            p = s.req.prompt_ids
            ids[b, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[b, width - len(p) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.device
        out = self.model(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            position_ids=pos.to(dev),
            use_cache=True,
            **self._keep_last,
        )
        past = _cache_of(out)
        logits = out.logits[:, -1, :].float().cpu()
        last_pos = pos[:, -1]
        while True:
            next_ids = torch.full((len(seqs),), pad, dtype=torch.long)
            for b, s in enumerate(seqs):
                if not s.done:
                    next_ids[b] = self._step(s, logits[b])
            if all(s.done for s in seqs):
                break
            mask = torch.cat([mask, torch.ones((len(seqs), 1), dtype=torch.long)], dim=1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=next_ids[:, None].to(dev),
                attention_mask=mask.to(dev),
                position_ids=last_pos[:, None].to(dev),
                use_cache=True,
                **{self._cache_kw: past},
            )
            past = _cache_of(out)
            logits = out.logits[:, -1, :].float().cpu()
        results: list[list[SeqResult]] = []
        k = 0
        for r in reqs:
            group = []
            for s in seqs[k : k + r.n]:
                group.append(SeqResult(s.out, s.lps, s.tops, s.text, s.finish_reason, s.stop_reason))
            results.append(group)
            k += r.n
        return results

    def _step(self, s: _Seq, logits: Any) -> int:
        """Sample one token for ``s`` from its raw logits, update its state, return the id."""
        import torch

        req = s.req
        banned: set[int] = set()
        if len(s.out) < req.min_tokens:
            banned = set(req.stop_token_ids) | (set() if req.ignore_eos else self.eos_ids)
        raw = logits[: self.vocab_size].float()
        token, logp = draw_token(
            s.penalties.apply(raw.clone()),
            temperature=req.temperature,
            top_k=req.top_k,
            top_p=req.top_p,
            min_p=req.min_p,
            generator=s.gen,
            banned=banned,
        )
        if self.logprobs_mode == "raw_logprobs":
            logp = torch.log_softmax(raw, dim=-1)
        s.penalties.add(token)
        s.out.append(token)
        s.lps.append(float(logp[token]))
        if req.top_logprobs > 0:
            vals, idx = torch.topk(logp, min(req.top_logprobs, logp.numel()))
            s.tops.append([(int(i), float(v)) for i, v in zip(idx, vals, strict=False)])
        else:
            s.tops.append([])
        if req.on_token is not None:
            try:
                req.on_token(s.index, token, s.lps[-1], s.tops[-1])
            except Exception:  # a listener's failure must not stop the batch
                logger.exception("on_token callback failed")
        self._check_stop(s, token)
        return token

    def _check_stop(self, s: _Seq, token: int) -> None:
        req = s.req
        if len(s.out) >= req.min_tokens:
            if token in req.stop_token_ids or (not req.ignore_eos and token in self.eos_ids):
                s.done, s.finish_reason, s.stop_by_token = True, "stop", True
                s.stop_reason = token if token in req.stop_token_ids else None
        if req.stop and len(s.out) >= req.min_tokens and not s.done:
            text, hit = _decode_output(self.tokenizer, s)
            if hit is not None:
                s.done, s.finish_reason, s.stop_reason, s.text = True, "stop", hit, text
                return
        if not s.done and len(s.out) >= req.max_tokens:
            s.done, s.finish_reason = True, "length"
        if s.done:
            s.text = _decode_output(self.tokenizer, s)[0]


class FakeEngine:
    """A model-free engine returning a fixed token sequence (benchmarks and fault tests).

    Every sample is ``num_tokens - 1`` copies of ``token_id`` followed by the EOS id (cut to
    ``max_tokens``, finish reason ``"length"``, when that is shorter), each with logprob
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
        ids = [self.token_id] * (self.num_tokens - 1) + [self.eos]
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

    def close(self) -> None:
        """Nothing to release."""
