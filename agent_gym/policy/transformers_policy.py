"""An in-process policy on a Hugging Face causal LM (CPU development, tests, small models).

:class:`TransformersPolicy` speaks the same protocol as
:class:`~agent_gym.policy.vllm_policy.VLLMPolicy` and records the same things: the
exact prompt ids (built incrementally by a
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder`), the sampled ids including the
final stop id, and each sampled id's logprob in float32. As in vLLM, ``logprobs_mode``
chooses which: ``"raw_logprobs"`` (the default, vLLM's too) is the log-softmax of the
model's logits before penalties, temperature and top-k/top-p/min-p; ``"processed_logprobs"``
is the log-softmax after them (the distribution the id was drawn from).

Concurrent turns (``aact`` from many episodes, e.g. ``collect(..., n_parallel=8)``) are
decoded together: a worker thread keeps one batch with a KV cache (continuous batching: a turn
that arrives joins the batch between decode steps, a finished sequence leaves it), so the event
loop is never blocked and ``n_parallel`` speeds up local rollouts. The batch's keys/values live
in preallocated per-layer buffers with one slot per sequence: a sequence joins by copying only
its own cached keys/values into a free slot (turns that arrive together encode their new ids in
one padded pass), and leaves by moving the last slot into its place, so no step copies the whole
batch. In a decode step of several sequences whose prompts start with the same cached head (an
env's system prompt and tools), that head's keys/values are read once for all of them instead
of once per sequence (``_PrefixPlan``; attention is memory-bound at these sizes). Each decode
step draws the next id of every sequence in one batched call
(:func:`~agent_gym.policy.logits.draw_tokens`), each sequence from its own seeded generator:
a seed gives the same ids whatever ``n_parallel`` is (up to float rounding of batched products). With
``reuse_kv`` (the default) little is encoded twice: each session keeps its KV cache between
turns, and a turn whose prompt extends the ids the previous turn left in the cache (its prompt
and sampled ids) encodes only the new ids; a new prompt is encoded in chunks of ``_CHUNK`` ids
whose keys/values are shared with prompts that start alike (an env's system prompt and tools).
A prompt is always encoded chunk by chunk, so its values do not depend on what was cached.
The turn steps it shares with ``VLLMPolicy`` (tools per session, seeds, budget,
decode and commit) come from :class:`~agent_gym.policy.base.TokenPolicyBase`.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.policy.base import TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.kv_batching import (
    _CHUNK,
    _PLAN,
    LOGPROBS_MODES,
    _as_cache,
    _Batcher,
    _cache_of,
    _PrefixPlan,
    _register_attention,
    _Row,
    _sample,  # noqa: F401 - the one-row draw, imported from here by callers
    _sample_rows,
    _SlotStore,
    sample_next,
)
from agent_gym.policy.logits import Penalties
from agent_gym.policy.sampling import SamplingParams
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["LOGPROBS_MODES", "TransformersPolicy", "sample_next"]

#: Decode steps with at least this many rows read shared prompt heads once per group.
_PREFIX_ROWS = 6



class TransformersPolicy(TokenPolicyBase):
    """Policy running a Hugging Face causal LM in-process.

    Args:
        model_or_path: A ``PreTrainedModel`` or a path/name for ``AutoModelForCausalLM``.
        tokenizer: Its tokenizer (a chat template is required); loaded from the path if None.
        sampling: ``SamplingParams`` (or a dict of them). ``seed`` makes each turn reproducible
            per (session id, turn index) (see ``SamplingParams.request_seed``).
        max_model_len: Context length; defaults to the model's ``max_position_embeddings``.
        max_response_length: Most ids after a segment's first prompt (sampled and environment ids).
        device: Torch device for a model loaded from a path.
        dtype: Torch dtype name for a model loaded from a path (default ``"float32"``).
        chat_template_kwargs: Extra chat template variables.
        logprobs_mode: ``"raw_logprobs"`` (default, as vLLM) or ``"processed_logprobs"``.
        max_batch: Most concurrent turns decoded together.
        reuse_kv: Keep each session's KV cache between its turns and encode only a turn's new
            prompt ids, and share the keys/values of prompt heads between prompts (False: every
            turn encodes its whole prompt in one pass, as a plain forward pass does).

    ``tools`` given to a turn stay with the session: a later turn called with ``tools=None``
    renders the same tools, ``tools=[]`` removes them.

    The policy pickles as its configuration: a model given as a path is loaded again from
    it, a model object is pickled with its weights.

    Example:
        >>> policy = TransformersPolicy(model_dir, sampling=SamplingParams(temperature=1.0))  # doctest: +SKIP
        >>> out = policy.act([{"role": "user", "content": "hi"}], session_id="ep-0")  # doctest: +SKIP
    """

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any = None,
        sampling: SamplingParams | dict[str, Any] | None = None,
        *,
        max_model_len: int | None = None,
        max_response_length: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        chat_template_kwargs: dict[str, Any] | None = None,
        logprobs_mode: str = "raw_logprobs",
        max_batch: int = 32,
        reuse_kv: bool = True,
    ) -> None:
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_model_len is not None:
            check_int("max_model_len", max_model_len, low=1)
        if max_response_length is not None:
            check_int("max_response_length", max_response_length, low=1)
        check_int("max_batch", max_batch, low=1)
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode: expected one of {', '.join(LOGPROBS_MODES)}, got {logprobs_mode!r}")
        given_model, given_tokenizer = model_or_path, tokenizer
        if isinstance(model_or_path, (str,)) or hasattr(model_or_path, "__fspath__"):
            path = str(model_or_path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
            model.to(device)
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(path)
        else:
            model = model_or_path
            if tokenizer is None:
                name = getattr(getattr(model, "config", None), "_name_or_path", None)
                if not name:
                    raise ValueError("tokenizer: expected a tokenizer for a model object without a saved path")
                tokenizer = AutoTokenizer.from_pretrained(name)
        if isinstance(tokenizer, str):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = SamplingParams.coerce(sampling)
        self.device = next(model.parameters()).device
        config_len = getattr(model.config, "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or config_len or 4096)
        self.max_response_length = max_response_length
        self.builder = ChatTokenBuilder(tokenizer, chat_template_kwargs)
        self._vocab = int(model.get_output_embeddings().weight.shape[0])
        eos = set(self.builder.stop_ids) | set(self.sampling.stop_token_ids)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {int(gen_eos)}
        self.stop_ids = frozenset(i for i in eos if 0 <= i < self._vocab)
        self._model_lock = threading.Lock()
        self._rng = random.Random()
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_id = int(pad) if pad is not None and 0 <= pad < self._vocab else 0
        self.logprobs_mode = logprobs_mode
        self.max_batch = max_batch
        # masks built here and handed to the model as is (sdpa, full attention layers only);
        # otherwise the model builds them from a 2-D padding mask, one joining row at a time
        layer_types = getattr(model.config, "layer_types", None) or ["full_attention"]
        self._mask_dict = (getattr(model.config, "_attn_implementation", None) == "sdpa"
                           and all(t == "full_attention" for t in layer_types))
        self._store: _SlotStore | None = None  # the batch KV buffers, kept between batches
        # decode steps read shared prompt heads once (needs the sdpa path and shared heads)
        self._prefix_ok = self._mask_dict and bool(reuse_kv)
        self._batcher_lock = threading.Lock()
        self._batcher_obj: _Batcher | None = None
        self.reuse_kv = bool(reuse_kv)
        # session id -> (ids whose keys/values are cached, per layer (keys, values), the shared prompt
        # head they start with (see _Row.prefix)); most recent last
        self._kv: OrderedDict[str, tuple[list[int], list[tuple[Any, Any]], Any]] = OrderedDict()
        self._kv_lock = threading.Lock()
        self._kv_max = max(64, 2 * max_batch)
        # ids before a chunk boundary -> per layer (keys, values) (see _prefix_chunks)
        self._chunks: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._remember_config(
            model_or_path=given_model,
            # A tokenizer loaded from the model's path is loaded again from it; one found through
            # a model object's config travels with the configuration.
            tokenizer=tokenizer if given_tokenizer is None and model is given_model else given_tokenizer,
            sampling=self.sampling,
            max_model_len=max_model_len,
            max_response_length=max_response_length,
            device=device,
            dtype=dtype,
            chat_template_kwargs=chat_template_kwargs,
            logprobs_mode=logprobs_mode,
            max_batch=max_batch,
            reuse_kv=reuse_kv,
        )

    # ------------------------------------------------------------------ generation
    def generate_ids(
        self, prompt_ids: list[int], max_tokens: int, seed: int | None = None
    ) -> tuple[list[int], list[float], str]:
        """Sample up to ``max_tokens`` ids after ``prompt_ids`` (blocking).

        ``seed`` seeds the draws; when None, ``sampling.seed`` (or a random one) does.

        Returns:
            ``(sampled ids, logprobs, finish_reason)``; the ids include the stop id when
            generation ended on one (``"stop"``), or end at ``max_tokens`` (``"length"``). The
            logprobs follow :attr:`logprobs_mode`.
        """
        return self.generate_batch([prompt_ids], [max_tokens], [seed])[0]

    def generate_batch(
        self,
        prompts: Sequence[list[int]],
        max_tokens: Sequence[int],
        seeds: Sequence[int | None],
        sessions: Sequence[str | None] | None = None,
    ) -> list[tuple[list[int], list[float], str]]:
        """Sample continuations of several prompts together (blocking).

        The prompts' uncached ids are encoded (prompts of similar length in one padded pass),
        then the sequences are decoded as one batch with a KV cache; a finished sequence leaves
        the batch. Each sequence draws from its own generator seeded like :meth:`generate_ids`,
        so a sequence samples the same ids alone or in a batch (up to floating-point differences
        of batched matrix products).

        Args:
            prompts: Prompt ids per sequence.
            max_tokens: Most ids to sample per sequence.
            seeds: Seed per sequence (None: ``sampling.seed`` or a random one).
            sessions: Session id per sequence (None: no session). With ``reuse_kv``, a
                sequence whose prompt extends the ids its session's previous call left in the KV
                cache encodes only the new ids, and leaves its own cache for the next call.

        Returns:
            ``(sampled ids, logprobs, finish_reason)`` per sequence, in order.
        """
        import torch

        if not (len(prompts) == len(max_tokens) == len(seeds)):
            raise ValueError(f"expected as many max_tokens and seeds as prompts, got {len(prompts)} prompts, "
                             f"{len(max_tokens)} max_tokens and {len(seeds)} seeds")
        if sessions is None:
            sessions = [None] * len(prompts)
        elif len(sessions) != len(prompts):
            raise ValueError(f"expected as many sessions as prompts, got {len(sessions)} sessions "
                             f"for {len(prompts)} prompts")
        rows = [self._make_row(p, n, s, sid) for p, n, s, sid in zip(prompts, max_tokens, seeds, sessions, strict=True)]
        with self._model_lock, torch.inference_mode():
            self._run_rows(rows)
        return [(r.out, r.logps, r.finish) for r in rows]

    def _make_row(self, prompt: Sequence[int], budget: int, seed: int | None, session: str | None) -> _Row:
        import torch

        sampling = self.sampling
        if seed is None:
            seed = sampling.seed if sampling.seed is not None else self._rng.randrange(2**31)
        row = _Row(list(prompt), budget, torch.Generator(device="cpu").manual_seed(seed % 2**63),
                   Penalties(sampling, self._vocab, prompt, ()))
        if self.reuse_kv and session is not None:
            row.session = session
            with self._kv_lock:
                entry = self._kv.pop(session, None)
            # the prefix invariant: this prompt extends the ids cached for the session
            if entry is not None and len(entry[0]) < len(row.prompt) and row.prompt[: len(entry[0])] == entry[0]:
                row.start, row.past, row.prefix = len(entry[0]), entry[1], entry[2]
        return row

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
            past = [(layer.keys, layer.values) for layer in _cache_of(result).layers]
            start = bound
            chain.append((bound, past))
            with self._kv_lock:
                self._chunks[tuple(prompt[:bound])] = past
                while len(self._chunks) > self._kv_max:
                    self._chunks.popitem(last=False)
        row.start, row.past = start, past
        row.prefix = chain

    def _run_rows(
        self,
        rows: list[_Row],
        admit: Callable[[int], list[_Row]] | None = None,
        finished: Callable[[_Row], None] | None = None,
    ) -> None:
        """Decode ``rows`` (and rows ``admit`` hands over between steps) until each stops.

        Continuous batching: before every decode step ``admit(room)`` may add up to ``room``
        new rows; they join the batch store (rows that join together encode their new ids in
        one padded pass) and sample their first id with the others. A row that stops or
        reaches its budget leaves the batch, leaves its KV cache for its session's next turn
        and is passed to ``finished``.
        """
        store = self._store
        if store is None or store.rows:  # (a store left with rows by an error is not reused)
            config = self.model.config
            layers = getattr(config.get_text_config() if hasattr(config, "get_text_config") else config,
                             "num_hidden_layers", 0)
            store = self._store = _SlotStore(self.device, int(layers or 0))
        self._decode_rows(store, rows, admit, finished)

    def _decode_rows(
        self,
        store: _SlotStore,
        rows: list[_Row],
        admit: Callable[[int], list[_Row]] | None,
        finished: Callable[[_Row], None] | None,
    ) -> None:
        import torch

        sampling = self.sampling
        stop_ids = sorted(self.stop_ids)
        raw = self.logprobs_mode == "raw_logprobs"
        penalized = sampling.repetition_penalty != 1.0 or bool(sampling.frequency_penalty or sampling.presence_penalty)
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
            banned_rows = [len(row.out) < sampling.min_tokens for row in active]
            tokens, logps, raw_logps = _sample_rows(logits, sampling, [row.penalties for row in active],
                                                    banned_rows, stop_ids, [row.generator for row in active], raw)
            done: list[int] = []
            for slot, (row, token) in enumerate(zip(active, tokens, strict=True)):
                row.out.append(token)
                row.logps.append(raw_logps[slot] if raw else logps[slot])
                if penalized:
                    row.penalties.add(token)
                if token in self.stop_ids or (sampling.stop and self._hit_stop_string(row.out)):
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

    def _groups(self, rows: list[_Row]) -> list[list[_Row]]:
        """Split joining rows into groups encoded together (similar numbers of new ids)."""
        if self.reuse_kv:
            for row in rows:
                if row.past is None:
                    self._prefix_chunks(row)
        if not self._mask_dict:
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
        ids = torch.full((len(group), width), self._pad_id, dtype=torch.long)
        positions = torch.zeros((len(group), width), dtype=torch.long)
        for i, (row, new) in enumerate(zip(group, news, strict=True)):
            store.place(row, new, width)
            ids[i, width - new :] = torch.tensor(row.prompt[row.start :], dtype=torch.long)
            positions[i] = torch.arange(row.start + new - width, row.start + new).clamp_(min=row.start)
        end = store.end
        lo = min(row.col0 for row in group)
        store.window(first, first + len(group), lo, end - width)
        valid = store.valid[first : first + len(group), lo:end]
        if self._mask_dict:
            cols = torch.arange(lo, end, device=self.device)
            queries = torch.arange(end - width, end, device=self.device)[:, None]
            allowed = (valid[:, None, :] & (cols <= queries)) | (cols == queries)  # a padding id sees itself
            mask: Any = {"full_attention": allowed[:, None]}
        else:
            mask = valid.long()
        result = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                            attention_mask=mask, use_cache=True, **{self._cache_kw: store.cache}, **self._keep_last)
        return result.logits[:, -1, : self._vocab].to("cpu", torch.float32)

    def _decode_step(self, store: _SlotStore) -> Any:
        """Feed every row's last sampled id; return the next-token logits ``[rows, vocab]``."""
        import torch

        rows = store.rows
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
        if self._mask_dict:
            # a single query attends to every column but padding: no mask at all when there is none
            mask: Any = {"full_attention": None if bool(valid.all()) else valid[:, None, None, :]}
        else:
            mask = valid.long()
        step = torch.tensor([[row.out[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[len(row.prompt) + len(row.out) - 1] for row in rows], dtype=torch.long,
                                 device=self.device)
        result = self.model(input_ids=step, position_ids=positions, attention_mask=mask, use_cache=True,
                            **{self._cache_kw: store.cache})
        store.end = end + 1
        return result.logits[:, -1, : self._vocab].to("cpu", torch.float32)

    def _decode_shared(self, store: _SlotStore) -> Any:
        """:meth:`_decode_step` with shared prompt heads read once per group (see ``_PrefixPlan``).

        Returns None when no two rows share a head, and (turning the shared path off) when the
        model's attention layers did not all take the plan, e.g. a model whose layers keep their
        own attention setting.
        """
        import torch

        rows = store.rows
        plan = _PrefixPlan.for_rows(store)
        if plan is None:
            return None
        step = torch.tensor([[row.out[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[len(row.prompt) + len(row.out) - 1] for row in rows], dtype=torch.long,
                                 device=self.device)
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
        return result.logits[:, -1, : self._vocab].to("cpu", torch.float32)

    def _save_kv(self, store: _SlotStore, slot: int) -> None:
        """Keep a finished row's cached keys/values for its session's next turn."""
        row = store.rows[slot]
        cached = row.prompt + row.out[:-1]  # the last sampled id was never fed to the model
        count, kv = store.extract(slot)
        if count != len(cached):
            return  # not the layout expected: the next turn encodes its whole prompt
        with self._kv_lock:
            self._kv[row.session] = (cached, kv, row.prefix)
            while len(self._kv) > self._kv_max:
                self._kv.popitem(last=False)

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load new weights into the model in place (between sampling calls, never during one).

        Args:
            state_dict: A full ``state_dict`` of the same architecture (e.g. a trainer's copy).
        """
        with self._model_lock:
            self.model.load_state_dict(dict(state_dict))
            self.model.eval()
            with self._kv_lock:
                self._kv.clear()
                self._chunks.clear()

    def _hit_stop_string(self, out: list[int]) -> bool:
        longest = max(len(s) for s in self.sampling.stop)
        tail = self.tokenizer.decode(out[-(longest + 4) :], skip_special_tokens=False)
        return any(s in tail for s in self.sampling.stop)

    def _batcher(self) -> _Batcher:
        with self._batcher_lock:
            if self._batcher_obj is None or not self._batcher_obj.alive:
                self._batcher_obj = _Batcher(self, self.max_batch)
            return self._batcher_obj

    async def _aclose_resources(self) -> None:
        self._close_batcher()

    def _close_batcher(self) -> None:
        with self._batcher_lock:
            batcher, self._batcher_obj = self._batcher_obj, None
        if batcher is not None:
            batcher.close()

    def close_session(self, session_id: str) -> None:
        """Forget ``session_id``'s token state, seed count, tools and KV cache."""
        super().close_session(session_id)
        with self._kv_lock:
            self._kv.pop(session_id, None)

    def close(self) -> None:
        """Stop the batching thread and the private event loop. The policy stays usable."""
        self._close_batcher()
        with self._kv_lock:
            self._kv.clear()
        super().close()

    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Sample the next assistant turn for ``messages`` in a worker thread."""
        self._check_session(session_id)
        start = time.perf_counter()
        tools = self._session_tools(session_id, tools)
        plan = self.builder.prepare(session_id, messages, tools)
        budget = self._max_tokens(len(plan.prompt_ids), plan.response_length, self.max_model_len)
        if budget <= 0:
            why = f"prompt of {len(plan.prompt_ids)} ids leaves no room to sample"
            out = self._truncated(plan.prompt_ids, plan.new_segment, start, why)
        else:
            seed = self._next_seed(session_id)
            future = self._batcher().submit(plan.prompt_ids, budget, seed, session_id)
            ids, logprobs, finish = await asyncio.wrap_future(future)
            out = self._commit_turn(plan, ids, logprobs, finish, start, stop_ids=self.stop_ids)
        out.sampling = self.sampling.record(self.logprobs_mode)  # the mode and what shaped the distribution
        return out
