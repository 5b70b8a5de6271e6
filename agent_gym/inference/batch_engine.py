"""Continuous batched decoding of a causal LM with a KV cache.

:class:`BatchEngine` is the generation core shared by
:class:`~agent_gym.policy.transformers_policy.TransformersPolicy` and the reference server
(:mod:`agent_gym.reference_server.backends`): it keeps one batch of sequences (rows) whose keys
and values live in a preallocated batch store (one slot per sequence, see
:class:`~agent_gym.inference.slot_store.SlotStore`), encodes the new ids of joining rows (rows
that join together in one padded pass), runs one decode step for all rows, and draws every row's
next id in one batched call (:func:`~agent_gym.inference.logits.draw_tokens`), rows with the same
sampling settings together, each row from its own seeded generator. Rows join between decode
steps (never more than ``max_batch`` at once; the others wait their turn) and leave when they
stop. With ``reuse_kv`` a session's keys/values stay cached between its turns and new prompts are
encoded in chunks whose keys/values are shared with prompts that start alike; both caches are
bounded by the bytes they hold (:class:`~agent_gym.inference.kv_cache.KVStore`).
"""

from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.inference.kv_cache import KVStore, as_cache, cache_of, kv_nbytes
from agent_gym.inference.logits import DrawParams, Penalties, check_logprobs_mode, draw_tokens
from agent_gym.inference.row import KVLayers, Row
from agent_gym.inference.shared_heads import PrefixPlan, planned_attention
from agent_gym.inference.slot_store import SlotStore
from agent_gym.types import FinishReason

__all__ = ["CHUNK", "DEFAULT_CACHE_BYTES", "BatchEngine", "GenerationStopped"]


class GenerationStopped(RuntimeError):
    """Raised by :meth:`BatchEngine.run` when its ``should_stop`` asked it to end early."""

#: Prompt heads are encoded and shared in chunks of this many ids.
CHUNK = 64

#: Default byte budget of each of the engine's caches (prompt-head chunks, sessions).
DEFAULT_CACHE_BYTES = 1 << 30

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
        max_batch: Most rows decoded together (rows beyond it wait until others leave).
        reuse_kv: Keep sessions' keys/values between turns and share prompt-head chunks.
        prefix_cache_bytes: Byte budget of the cached prompt-head chunks (least recently used
            leave first).
        session_cache_bytes: Byte budget of the sessions' cached keys/values.

    Attributes:
        stats: Counters: ``"encode_passes"``, ``"decode_steps"``, ``"shared_head_steps"`` (decode
            steps that read shared prompt heads once), ``"rows_decoded"`` (sum of the rows of every
            decode step) and ``"max_rows"`` (most rows drawn together).
        store: The batch KV store, kept between batches (a new one is made when None).
        chunks: Prompt-head chunks: the ids before a chunk boundary -> per layer (keys, values).
        sessions: Session id -> ``(ids whose keys/values are cached, per layer (keys, values),
            the shared prompt heads they start with (see ``Row.prefix``))``.
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
        prefix_cache_bytes: int = DEFAULT_CACHE_BYTES,
        session_cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        check_logprobs_mode(logprobs_mode)
        check_int("max_batch", max_batch, low=1)
        check_int("prefix_cache_bytes", prefix_cache_bytes, low=0)
        check_int("session_cache_bytes", session_cache_bytes, low=0)
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
        self.store: SlotStore | None = None
        # decode steps read shared prompt heads once (needs the sdpa path and shared heads)
        self._prefix_ok = self.mask_dict and self.reuse_kv
        self.sessions: KVStore[str, tuple[list[int], KVLayers, list[tuple[int, KVLayers]]]]
        self.sessions = KVStore(session_cache_bytes)
        self.chunks: KVStore[tuple[int, ...], KVLayers] = KVStore(prefix_cache_bytes)
        self.stats = {"encode_passes": 0, "decode_steps": 0, "shared_head_steps": 0, "rows_decoded": 0,
                      "max_rows": 0}

    # ------------------------------------------------------------------ rows and caches
    def new_row(
        self,
        prompt: Sequence[int],
        budget: int,
        seed: int,
        settings: DrawParams,
        stop_ids: Sequence[int] = (),
        *,
        min_tokens: int = 0,
        session: str | None = None,
        top_logprobs: int = 0,
        listener: Callable[[Row], bool] | None = None,
    ) -> Row:
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

        row = Row(list(prompt), budget, torch.Generator(device="cpu").manual_seed(seed % 2**63),
                   Penalties(settings, self.vocab, prompt, ()))
        row.settings = (float(settings.temperature), int(settings.top_k), float(settings.top_p), float(settings.min_p))
        row.stop_ids = frozenset(int(i) for i in stop_ids)
        row.stop_list = tuple(sorted(i for i in row.stop_ids if 0 <= i < self.vocab))
        row.min_tokens = int(min_tokens)
        row.top_n = int(top_logprobs)
        row.listener = listener
        if self.reuse_kv and session is not None:
            row.session = session
            entry = self.sessions.pop(session)
            # the prefix invariant: this prompt extends the ids cached for the session
            if entry is not None and len(entry[0]) < len(row.prompt) and row.prompt[: len(entry[0])] == entry[0]:
                row.start, row.past, row.prefix = len(entry[0]), entry[1], entry[2]
        return row

    def forget(self, session: str) -> None:
        """Drop ``session``'s cached keys/values."""
        self.sessions.pop(session)

    def clear(self, *, prompt_heads: bool = True) -> None:
        """Drop every session's cached keys/values and (``prompt_heads``) the prompt-head chunks.

        After new weights both must go; closing a policy keeps the chunks for its next use.
        """
        self.sessions.clear()
        if prompt_heads:
            self.chunks.clear()

    def _prefix_chunks(self, row: Row) -> None:
        """Encode a new prompt's head in ``CHUNK``-id chunks, sharing them between prompts.

        The keys/values after each chunk boundary are kept, keyed by the ids before it, so
        prompts that start alike (the system prompt and tool list of one env) encode that head
        once. Every prompt is always encoded chunk by chunk, cached or not, so its values do not
        depend on which prompts came before.
        """
        import torch

        prompt = row.prompt
        bounds = list(range(CHUNK, len(prompt), CHUNK))
        start: int = 0
        past: KVLayers | None = None
        chain: list[tuple[int, KVLayers]] = []  # the cached heads this prompt starts with
        for bound in reversed(bounds):
            hit = self.chunks.get(tuple(prompt[:bound]))
            if hit is not None:
                start, past = bound, hit
                break
        for bound in range(CHUNK, start, CHUNK):  # the shorter heads before the hit
            head = self.chunks.peek(tuple(prompt[:bound]))
            if head is not None:
                chain.append((bound, head))
        if past is not None:
            chain.append((start, past))
        for bound in bounds:
            if bound <= start:
                continue
            kwargs: dict[str, Any] = {}
            if past is not None:
                kwargs[self._cache_kw] = as_cache(past)
            ids = torch.tensor([prompt[start:bound]], dtype=torch.long, device=self.device)
            positions = torch.arange(start, bound, device=self.device)[None]
            result = self.model(input_ids=ids, position_ids=positions, use_cache=True, **self._keep_last, **kwargs)
            self.stats["encode_passes"] += 1
            past = [(layer.keys, layer.values) for layer in cache_of(result).layers]
            start = bound
            chain.append((bound, past))
            self.chunks.put(tuple(prompt[:bound]), past, kv_nbytes(past))
        row.start, row.past = start, past
        row.prefix = chain

    def _save_kv(self, store: SlotStore, slot: int) -> None:
        """Keep a finished row's cached keys/values for its session's next turn."""
        row = store.rows[slot]
        cached = row.prompt + row.out[:-1]  # the last sampled id was never fed to the model
        count, kv = store.extract(slot)
        if count != len(cached) or row.session is None:
            return  # not the layout expected: the next turn encodes its whole prompt
        # (the prompt heads of ``row.prefix`` are the chunks' own tensors, counted with the chunks)
        self.sessions.put(row.session, (cached, kv, row.prefix), kv_nbytes(kv))

    # ------------------------------------------------------------------ decoding
    def run(
        self,
        rows: list[Row],
        admit: Callable[[int], list[Row]] | None = None,
        finished: Callable[[Row], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        """Decode ``rows`` (and rows ``admit`` hands over between steps) until each stops.

        Continuous batching: before every decode step ``admit(room)`` may hand over new rows
        when fewer than ``max_batch`` rows are decoding or waiting (``room`` is how many more
        fit; a request of several rows may exceed it). Waiting rows join the batch store in
        order while it holds fewer than ``max_batch`` rows, and sample their first id with the
        others; the rest wait for rows to leave. A row that stops or reaches its budget leaves
        the batch, leaves its KV cache for its session's next turn and is passed to ``finished``.
        ``should_stop()``, asked before every decode step, ends the run at once when true: the rows
        not yet finished are dropped and :class:`GenerationStopped` is raised.
        """
        import torch

        with self.lock, torch.inference_mode():
            store = self.store
            if store is None or store.rows:  # (a store left with rows by an error is not reused)
                config = self.model.config
                text = config.get_text_config() if hasattr(config, "get_text_config") else config
                store = self.store = SlotStore(self.device, int(getattr(text, "num_hidden_layers", 0) or 0))
            self._decode_rows(store, rows, admit, finished, should_stop)

    def _decode_rows(
        self,
        store: SlotStore,
        rows: list[Row],
        admit: Callable[[int], list[Row]] | None,
        finished: Callable[[Row], None] | None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        import torch

        logits: Any = None  # next-token logits of the rows in the store, in slot order
        pending = deque(rows)  # rows waiting for a slot, in order
        while True:
            if should_stop is not None and should_stop():
                raise GenerationStopped("generation stopped: the batching worker is closing")
            room = self.max_batch - len(store.rows) - len(pending)
            if admit is not None and room > 0:
                pending.extend(admit(room))
            joining: list[Row] = []
            while pending and len(store.rows) + len(joining) < self.max_batch:
                row = pending.popleft()
                if row.budget > 0:
                    joining.append(row)
                elif finished is not None:
                    finished(row)
            for group in self._groups(joining):
                group_logits = self._encode_group(store, group)
                logits = group_logits if logits is None else torch.cat([logits, group_logits])
            active = store.rows
            if not active:
                if pending:
                    continue
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

    def _draw(self, rows: list[Row], logits: Any) -> None:
        """Draw every row's next id (rows with the same settings in one call) and record it."""
        import torch

        self.stats["max_rows"] = max(self.stats["max_rows"], len(rows))
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
            index = None if len(slots) == len(rows) else torch.tensor(slots, dtype=torch.long)
            part = shaped if index is None else shaped.index_select(0, index)
            tokens, logp = draw_tokens(part, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                       generators=[rows[s].generator for s in slots], banned=banned)
            if raw_logp is not None:
                logp = raw_logp if index is None else raw_logp.index_select(0, index)
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

    def _groups(self, rows: list[Row]) -> list[list[Row]]:
        """Split joining rows into groups encoded together (similar numbers of new ids)."""
        if self.reuse_kv:
            for row in rows:
                if row.past is None:
                    self._prefix_chunks(row)
        if not self.mask_dict:
            return [[row] for row in rows]
        groups: list[list[Row]] = []
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

    def _encode_group(self, store: SlotStore, group: list[Row]) -> Any:
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

    def _decode_step(self, store: SlotStore) -> Any:
        """Feed every row's last sampled id; return the next-token logits ``[rows, vocab]``."""
        import torch

        rows = store.rows
        stats = self.stats
        stats["decode_steps"] += 1
        stats["rows_decoded"] += len(rows)
        store.reserve(0, 0)
        end = store.end
        store.valid[: len(rows), end] = True
        if self._prefix_ok and len(rows) >= _PREFIX_ROWS and any(row.prefix for row in rows):
            logits = self._decode_shared(store)
            if logits is not None:
                store.end = end + 1
                stats["shared_head_steps"] += 1
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

    def _step_inputs(self, rows: list[Row]) -> tuple[Any, Any]:
        import torch

        step = torch.tensor([[row.out[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[len(row.prompt) + len(row.out) - 1] for row in rows], dtype=torch.long,
                                 device=self.device)
        return step, positions

    def _decode_shared(self, store: SlotStore) -> Any:
        """:meth:`_decode_step` with shared prompt heads read once per group (see ``PrefixPlan``).

        Returns None when no two rows share a head, and (turning the shared path off) when the
        model's attention layers did not all take the plan, e.g. a model whose layers keep their
        own attention setting.
        """
        import torch

        plan = PrefixPlan.for_rows(store)
        if plan is None:
            return None
        step, positions = self._step_inputs(store.rows)
        with planned_attention(self.model, plan):
            result = self.model(input_ids=step, position_ids=positions, attention_mask={"full_attention": None},
                                use_cache=True, **{self._cache_kw: store.cache})
        if plan.calls != len(store.keys):
            self._prefix_ok = False
            return None
        return result.logits[:, -1, : self.vocab].to("cpu", torch.float32)
