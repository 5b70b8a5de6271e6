"""Continuous batched decoding of a causal LM with a KV cache.

:class:`BatchEngine` is the generation core shared by
:class:`~agent_gym.policy.transformers_policy.TransformersPolicy` and the reference server
(:mod:`agent_gym.server.generation`): it keeps one batch of sequences (rows) whose keys and
values live in a preallocated batch store (one slot per sequence, see ``_SlotStore``), encodes
the new ids of joining rows (rows that join together in one padded pass), runs one decode step
for all rows, and draws every row's next id in one batched call
(:func:`~agent_gym.policy.logits.draw_tokens`), rows with the same sampling settings together,
each row from its own seeded generator. Rows join between decode steps and leave when they stop.
With ``reuse_kv`` a session's keys/values stay cached between its turns and new prompts are
encoded in chunks whose keys/values are shared with prompts that start alike.

:class:`Batcher` is the worker thread in front of an engine: callers submit requests (each one
or more rows) and get a future; waiting requests join the running batch between decode steps.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from agent_gym.policy.kv_batching import (
    _CHUNK,
    _PLAN,
    LOGPROBS_MODES,
    _as_cache,
    _cache_of,
    _PrefixPlan,
    _register_attention,
    _Row,
    _SlotStore,
)
from agent_gym.policy.logits import Penalties, draw_tokens
from agent_gym.types import FinishReason

__all__ = ["BatchEngine", "Batcher"]

logger = logging.getLogger(__name__)

#: Decode steps with at least this many rows read shared prompt heads once per group.
_PREFIX_ROWS = 6


class BatchEngine:
    """Decodes rows of a causal LM together (continuous batching with a KV cache).

    Not thread-safe by itself: :meth:`run` holds :attr:`lock` (one batch at a time); a
    :class:`Batcher` feeds it from one worker thread.

    Args:
        model: A Hugging Face causal LM (in eval mode).
        pad_id: Id fed at padding positions (masked out).
        vocab: Number of logits columns that are real ids.
        logprobs_mode: ``"raw_logprobs"`` (log-softmax of the model's logits) or
            ``"processed_logprobs"`` (of the distribution each id was drawn from).
        max_batch: Most rows decoded together.
        reuse_kv: Keep sessions' keys/values between turns and share prompt-head chunks.

    Attributes:
        stats: Counters: ``"encode_passes"``, ``"decode_steps"``, ``"rows_decoded"`` (sum of
            the rows of every decode step) and ``"max_rows"`` (most rows of one step).
    """

    def __init__(
        self,
        model: Any,
        *,
        pad_id: int,
        vocab: int,
        logprobs_mode: str = "raw_logprobs",
        max_batch: int = 32,
        reuse_kv: bool = True,
    ) -> None:
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode: expected one of {', '.join(LOGPROBS_MODES)}, got {logprobs_mode!r}")
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab = int(vocab)
        self.pad_id = int(pad_id) if 0 <= int(pad_id) < self.vocab else 0
        self.logprobs_mode = logprobs_mode
        self.max_batch = int(max_batch)
        self.reuse_kv = bool(reuse_kv)
        self.lock = threading.Lock()
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        # masks built here and handed to the model as is (sdpa, full attention layers only);
        # otherwise the model builds them from a 2-D padding mask, one joining row at a time
        layer_types = getattr(model.config, "layer_types", None) or ["full_attention"]
        self.mask_dict = (getattr(model.config, "_attn_implementation", None) == "sdpa"
                          and all(t == "full_attention" for t in layer_types))
        self.store: _SlotStore | None = None  # the batch KV buffers, kept between batches
        # decode steps read shared prompt heads once (needs the sdpa path and shared heads)
        self._prefix_ok = self.mask_dict and self.reuse_kv
        # session id -> (ids whose keys/values are cached, per layer (keys, values), the shared prompt
        # head they start with (see _Row.prefix)); most recent last
        self.kv: OrderedDict[str, tuple[list[int], list[tuple[Any, Any]], Any]] = OrderedDict()
        self._kv_lock = threading.Lock()
        self._kv_max = max(64, 2 * self.max_batch)
        # ids before a chunk boundary -> per layer (keys, values) (see _prefix_chunks)
        self._chunks: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self.stats = {"encode_passes": 0, "decode_steps": 0, "rows_decoded": 0, "max_rows": 0}

    # ------------------------------------------------------------------ rows and caches
    def new_row(
        self,
        prompt: Sequence[int],
        budget: int,
        seed: int,
        settings: Any,
        stop_ids: Sequence[int] = (),
        *,
        min_tokens: int = 0,
        session: str | None = None,
        top_logprobs: int = 0,
        listener: Callable[[_Row], bool] | None = None,
    ) -> _Row:
        """A row to decode.

        Args:
            prompt: Prompt ids.
            budget: Most ids to sample.
            seed: Seeds the row's own generator.
            settings: Sampling settings (``temperature``, ``top_k``, ``top_p``, ``min_p`` and the
                penalties), e.g. a ``SamplingParams``.
            stop_ids: Ids that end the row (not drawn before ``min_tokens`` ids).
            min_tokens: Fewest ids sampled before a stop id may be drawn.
            session: Session whose cached keys/values the prompt may extend (with ``reuse_kv``).
            top_logprobs: How many most likely ids (and logprobs) to keep per position.
            listener: Called as ``listener(row)`` after each id; True ends the row (``"stop"``).
        """
        import torch

        row = _Row(list(prompt), budget, torch.Generator(device="cpu").manual_seed(seed % 2**63),
                   Penalties(settings, self.vocab, prompt, ()))
        row.settings = (float(settings.temperature), int(settings.top_k), float(settings.top_p), float(settings.min_p))
        row.stop_ids = frozenset(int(i) for i in stop_ids)
        row.stop_list = tuple(sorted(i for i in row.stop_ids if 0 <= i < self.vocab))
        row.min_tokens = int(min_tokens)
        row.top_n = int(top_logprobs)
        row.listener = listener
        if self.reuse_kv and session is not None:
            row.session = session
            with self._kv_lock:
                entry = self.kv.pop(session, None)
            # the prefix invariant: this prompt extends the ids cached for the session
            if entry is not None and len(entry[0]) < len(row.prompt) and row.prompt[: len(entry[0])] == entry[0]:
                row.start, row.past, row.prefix = len(entry[0]), entry[1], entry[2]
        return row

    def forget(self, session: str) -> None:
        """Drop ``session``'s cached keys/values."""
        with self._kv_lock:
            self.kv.pop(session, None)

    def clear(self) -> None:
        """Drop every cached key/value (sessions and prompt heads), e.g. after new weights."""
        with self._kv_lock:
            self.kv.clear()
            self._chunks.clear()

    def _prefix_chunks(self, row: _Row) -> None:
        """Encode a new prompt's head in ``_CHUNK``-id chunks, sharing them between prompts.

        The keys/values after each chunk boundary are kept, keyed by the ids before it, so
        prompts that start alike (the system prompt and tool list of one env) encode that head
        once. Every prompt is always encoded chunk by chunk, cached or not, so its values do not
        depend on which prompts came before.
        """
        import torch

        prompt = row.prompt
        bounds = list(range(_CHUNK, len(prompt), _CHUNK))
        start, past = 0, None
        chain: list[tuple[int, list[tuple[Any, Any]]]] = []  # the cached heads this prompt starts with
        with self._kv_lock:
            for bound in reversed(bounds):
                key = tuple(prompt[:bound])
                hit = self._chunks.get(key)
                if hit is not None:
                    self._chunks.move_to_end(key)
                    start, past = bound, hit
                    break
            for bound in bounds[: start // _CHUNK]:
                head = self._chunks.get(tuple(prompt[:bound]))
                if head is not None:
                    chain.append((bound, head))
        for bound in bounds:
            if bound <= start:
                continue
            kwargs: dict[str, Any] = {}
            if past is not None:
                kwargs[self._cache_kw] = _as_cache(past)
            ids = torch.tensor([prompt[start:bound]], dtype=torch.long, device=self.device)
            positions = torch.arange(start, bound, device=self.device)[None]
            result = self.model(input_ids=ids, position_ids=positions, use_cache=True, **self._keep_last, **kwargs)
            self.stats["encode_passes"] += 1
            past = [(layer.keys, layer.values) for layer in _cache_of(result).layers]
            start = bound
            chain.append((bound, past))
            with self._kv_lock:
                self._chunks[tuple(prompt[:bound])] = past
                while len(self._chunks) > self._kv_max:
                    self._chunks.popitem(last=False)
        row.start, row.past = start, past
        row.prefix = chain

    def _save_kv(self, store: _SlotStore, slot: int) -> None:
        """Keep a finished row's cached keys/values for its session's next turn."""
        row = store.rows[slot]
        cached = row.prompt + row.out[:-1]  # the last sampled id was never fed to the model
        count, kv = store.extract(slot)
        if count != len(cached):
            return  # not the layout expected: the next turn encodes its whole prompt
        with self._kv_lock:
            self.kv[row.session] = (cached, kv, row.prefix)
            while len(self.kv) > self._kv_max:
                self.kv.popitem(last=False)

    # ------------------------------------------------------------------ decoding
    def run(
        self,
        rows: list[_Row],
        admit: Callable[[int], list[_Row]] | None = None,
        finished: Callable[[_Row], None] | None = None,
    ) -> None:
        """Decode ``rows`` (and rows ``admit`` hands over between steps) until each stops.

        Continuous batching: before every decode step ``admit(room)`` may add up to ``room``
        new rows (a request of several rows may exceed it); they join the batch store and
        sample their first id with the others. A row that stops or reaches its budget leaves
        the batch, leaves its KV cache for its session's next turn and is passed to ``finished``.
        """
        import torch

        with self.lock, torch.inference_mode():
            store = self.store
            if store is None or store.rows:  # (a store left with rows by an error is not reused)
                config = self.model.config
                text = config.get_text_config() if hasattr(config, "get_text_config") else config
                store = self.store = _SlotStore(self.device, int(getattr(text, "num_hidden_layers", 0) or 0))
            self._decode_rows(store, rows, admit, finished)

    def _decode_rows(
        self,
        store: _SlotStore,
        rows: list[_Row],
        admit: Callable[[int], list[_Row]] | None,
        finished: Callable[[_Row], None] | None,
    ) -> None:
        import torch

        logits: Any = None  # next-token logits of the rows in the store, in slot order
        pending = list(rows)
        while True:
            if admit is not None and len(store.rows) + len(pending) < self.max_batch:
                pending.extend(admit(self.max_batch - len(store.rows) - len(pending)))
            joining = []
            for row in pending:
                if row.budget > 0:
                    joining.append(row)
                elif finished is not None:
                    finished(row)
            pending = []
            for group in self._groups(joining):
                group_logits = self._encode_group(store, group)
                logits = group_logits if logits is None else torch.cat([logits, group_logits])
            active = store.rows
            if not active:
                return
            self._draw(active, logits)
            done: list[int] = []
            for slot, row in enumerate(active):
                token = row.out[-1]
                hit = row.listener(row) if row.listener is not None else False
                if hit or (token in row.stop_ids and len(row.out) >= row.min_tokens):
                    row.finish = FinishReason.STOP
                    done.append(slot)
                elif len(row.out) >= row.budget:
                    done.append(slot)
            for slot in reversed(done):  # the last slot moves into a freed one
                row = active[slot]
                if self.reuse_kv and row.session is not None:
                    self._save_kv(store, slot)
                store.remove(slot)
                if finished is not None:
                    finished(row)
            logits = None
            if store.rows:
                logits = self._decode_step(store)

    def _draw(self, rows: list[_Row], logits: Any) -> None:
        """Draw every row's next id (rows with the same settings in one call) and record it."""
        import torch

        logits = logits.float()
        shaped = logits.clone()
        if any(r.penalties.seen is not None or r.penalties.counts is not None for r in rows):
            shaped = torch.stack([r.penalties.apply(x) for r, x in zip(rows, shaped.unbind(0), strict=True)])
        raw = self.logprobs_mode == "raw_logprobs"
        raw_logp = torch.log_softmax(logits, dim=-1) if raw else None
        groups: dict[tuple[Any, ...], list[int]] = {}
        for slot, row in enumerate(rows):
            banned = row.stop_list if len(row.out) < row.min_tokens else ()
            groups.setdefault((*row.settings, banned), []).append(slot)
        for (temperature, top_k, top_p, min_p, banned), slots in groups.items():
            whole = len(slots) == len(rows)
            index = None if whole else torch.tensor(slots, dtype=torch.long)
            part = shaped if whole else shaped.index_select(0, index)
            tokens, logp = draw_tokens(part, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                       generators=[rows[s].generator for s in slots], banned=banned)
            if raw_logp is not None:
                logp = raw_logp if whole else raw_logp.index_select(0, index)
            picked = logp.gather(1, torch.tensor(tokens, dtype=torch.long)[:, None])[:, 0].tolist()
            for i, (slot, token) in enumerate(zip(slots, tokens, strict=True)):
                row = rows[slot]
                row.out.append(token)
                row.logps.append(picked[i])
                if row.top_n > 0:
                    vals, ids = torch.topk(logp[i], min(row.top_n, logp.shape[1]))
                    row.tops.append(list(zip(ids.tolist(), vals.tolist(), strict=True)))
                if row.penalties.seen is not None or row.penalties.counts is not None:
                    row.penalties.add(token)

    def _groups(self, rows: list[_Row]) -> list[list[_Row]]:
        """Split joining rows into groups encoded together (similar numbers of new ids)."""
        if self.reuse_kv:
            for row in rows:
                if row.past is None:
                    self._prefix_chunks(row)
        if not self.mask_dict:
            return [[row] for row in rows]
        groups: list[list[_Row]] = []
        for row in sorted(rows, key=lambda r: len(r.prompt) - r.start, reverse=True):
            new = len(row.prompt) - row.start
            if groups:
                group = groups[-1]
                width = len(group[0].prompt) - group[0].start  # the longest of the group
                total = sum(len(r.prompt) - r.start for r in group) + new
                if width * (len(group) + 1) <= total + 16:  # at most 16 padding ids per group
                    group.append(row)
                    continue
            groups.append([row])
        return groups

    def _encode_group(self, store: _SlotStore, group: list[_Row]) -> Any:
        """Place ``group``'s rows in the store and encode their uncached ids in one pass; return their logits."""
        import torch

        news = [len(row.prompt) - row.start for row in group]
        width = max(news)
        store.reserve(width + max(row.start for row in group), len(group))
        first = len(store.rows)
        ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(group), width), dtype=torch.long)
        for i, (row, new) in enumerate(zip(group, news, strict=True)):
            store.place(row, new, width)
            ids[i, width - new :] = torch.tensor(row.prompt[row.start :], dtype=torch.long)
            positions[i] = torch.arange(row.start + new - width, row.start + new).clamp_(min=row.start)
        end = store.end
        lo = min(row.col0 for row in group)
        store.window(first, first + len(group), lo, end - width)
        valid = store.valid[first : first + len(group), lo:end]
        if self.mask_dict:
            cols = torch.arange(lo, end, device=self.device)
            queries = torch.arange(end - width, end, device=self.device)[:, None]
            allowed = (valid[:, None, :] & (cols <= queries)) | (cols == queries)  # a padding id sees itself
            mask: Any = {"full_attention": allowed[:, None]}
        else:
            mask = valid.long()
        result = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                            attention_mask=mask, use_cache=True, **{self._cache_kw: store.cache}, **self._keep_last)
        self.stats["encode_passes"] += 1
        return result.logits[:, -1, : self.vocab].to("cpu", torch.float32)

    def _decode_step(self, store: _SlotStore) -> Any:
        """Feed every row's last sampled id; return the next-token logits ``[rows, vocab]``."""
        import torch

        rows = store.rows
        stats = self.stats
        stats["decode_steps"] += 1
        stats["rows_decoded"] += len(rows)
        stats["max_rows"] = max(stats["max_rows"], len(rows))
        store.reserve(0, 0)
        end = store.end
        store.valid[: len(rows), end] = True
        if self._prefix_ok and len(rows) >= _PREFIX_ROWS and any(row.prefix for row in rows):
            logits = self._decode_shared(store)
            if logits is not None:
                store.end = end + 1
                return logits
        lo = min(row.col0 for row in rows)
        store.window(0, len(rows), lo, end)
        valid = store.valid[: len(rows), lo : end + 1]
        if self.mask_dict:
            # a single query attends to every column but padding: no mask at all when there is none
            mask: Any = {"full_attention": None if bool(valid.all()) else valid[:, None, None, :]}
        else:
            mask = valid.long()
        step, positions = self._step_inputs(rows)
        result = self.model(input_ids=step, position_ids=positions, attention_mask=mask, use_cache=True,
                            **{self._cache_kw: store.cache})
        store.end = end + 1
        return result.logits[:, -1, : self.vocab].to("cpu", torch.float32)

    def _step_inputs(self, rows: list[_Row]) -> tuple[Any, Any]:
        import torch

        step = torch.tensor([[row.out[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[len(row.prompt) + len(row.out) - 1] for row in rows], dtype=torch.long,
                                 device=self.device)
        return step, positions

    def _decode_shared(self, store: _SlotStore) -> Any:
        """:meth:`_decode_step` with shared prompt heads read once per group (see ``_PrefixPlan``).

        Returns None when no two rows share a head, and (turning the shared path off) when the
        model's attention layers did not all take the plan, e.g. a model whose layers keep their
        own attention setting.
        """
        import torch

        plan = _PrefixPlan.for_rows(store)
        if plan is None:
            return None
        step, positions = self._step_inputs(store.rows)
        config = self.model.config
        saved = config._attn_implementation
        # only for this pass: the masks the model builds itself elsewhere depend on the setting
        config._attn_implementation = _register_attention()
        _PLAN.plan = plan
        try:
            result = self.model(input_ids=step, position_ids=positions, attention_mask={"full_attention": None},
                                use_cache=True, **{self._cache_kw: store.cache})
        finally:
            _PLAN.plan = None
            config._attn_implementation = saved
        if plan.calls != len(store.keys):
            self._prefix_ok = False
            return None
        return result.logits[:, -1, : self.vocab].to("cpu", torch.float32)


class Batcher:
    """A worker thread that decodes waiting requests as one batch, admitting new ones as they come.

    A request is a function making its rows and a function turning its finished rows into the
    future's result. After the first waiting request the worker keeps collecting for as long
    as new ones keep arriving within ``gather_s`` (turns of episodes whose environment step is
    just finishing), but only when ``expect_more()`` says that other requests may come (e.g.
    other sessions are open); while a batch decodes, requests that arrive join it.

    Args:
        engine: The engine that decodes.
        gather_s: The gather window (0: take only what is waiting).
        expect_more: Whether to wait the gather window at all (None: always).
        name: The thread's name.
    """

    def __init__(self, engine: BatchEngine, *, gather_s: float = 0.004,
                 expect_more: Callable[[], bool] | None = None, name: str = "agent-gym-batcher") -> None:
        self.engine = engine
        self.gather_s = gather_s
        self.expect_more = expect_more
        self._queue: queue.Queue[tuple[Callable[[], list[_Row]], Callable[[list[_Row]], Any], Future] | None]
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the worker thread runs."""
        return self._thread.is_alive()

    def submit(self, make_rows: Callable[[], list[_Row]], collect: Callable[[list[_Row]], Any]) -> Future:
        """Queue a request; the future gets ``collect(rows)`` once all its rows are finished."""
        future: Future = Future()
        self._queue.put((make_rows, collect, future))
        return future

    def close(self) -> None:
        """Stop the worker after the current batch."""
        self._queue.put(None)

    def _run(self) -> None:
        room = self.engine.max_batch
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            closing = False
            wait = self.gather_s if self.gather_s > 0 and (self.expect_more is None or self.expect_more()) else 0.0
            while len(batch) < room:
                try:
                    nxt = self._queue.get(timeout=wait) if wait else self._queue.get_nowait()
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

    def _serve(self, batch: list[tuple[Callable[[], list[_Row]], Callable[[list[_Row]], Any], Future]]) -> bool:
        """Decode ``batch`` and the requests that arrive meanwhile; True when ``close`` was called."""
        closing = False
        owners: dict[int, list[Any]] = {}  # id(row) -> [future, collect, rows, rows left]

        def rows_of(items: list[tuple[Callable[[], list[_Row]], Callable[[list[_Row]], Any], Future]]) -> list[_Row]:
            out: list[_Row] = []
            for make_rows, collect, future in items:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    rows = make_rows()
                    if not rows:
                        future.set_result(collect(rows))
                        continue
                except Exception as exc:  # noqa: BLE001 - the request's error, not the batch's
                    future.set_exception(exc)
                    continue
                owner = [future, collect, rows, len(rows)]
                for row in rows:
                    owners[id(row)] = owner
                out.extend(rows)
            return out

        def admit(room: int) -> list[_Row]:
            nonlocal closing
            items: list[Any] = []
            while not closing and room > 0:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                else:
                    items.append(nxt)
                    room -= 1
            return rows_of(items)

        def finished(row: _Row) -> None:
            owner = owners.pop(id(row))
            owner[3] -= 1
            if owner[3] == 0:
                try:
                    owner[0].set_result(owner[1](owner[2]))
                except Exception as exc:  # noqa: BLE001 - a failing collect fails its own request
                    owner[0].set_exception(exc)

        try:
            self.engine.run(rows_of(batch), admit, finished)
        except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
            logger.exception("batched generation failed")
            failed = {id(owner[0]): owner[0] for owner in owners.values()}
            for future in failed.values():
                if not future.done():
                    future.set_exception(exc)
        return closing
