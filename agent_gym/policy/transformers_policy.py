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
loop is never blocked and ``n_parallel`` speeds up local rollouts. The decoding is
:class:`~agent_gym.inference.BatchEngine`'s (``policy.engine``), which the reference
server's backend uses too. The worker waits a few milliseconds for other turns to join a new batch
only while another session is open. The batch's keys/values live
in preallocated per-layer buffers with one slot per sequence: a sequence joins by copying only
its own cached keys/values into a free slot (turns that arrive together encode their new ids in
one padded pass), and leaves by moving the last slot into its place, so no step copies the whole
batch. In a decode step of several sequences whose prompts start with the same cached head (an
env's system prompt and tools), that head's keys/values are read once for all of them instead
of once per sequence (``PrefixPlan``; attention is memory-bound at these sizes). Each decode
step draws the next id of every sequence in one batched call
(:func:`~agent_gym.inference.draw_tokens`), each sequence from its own seeded generator:
a seed gives the same ids whatever ``n_parallel`` is (up to float rounding of batched products). With
``reuse_kv`` (the default) little is encoded twice: each session keeps its KV cache between
turns, and a turn whose prompt extends the ids the previous turn left in the cache (its prompt
and sampled ids) encodes only the new ids; a new prompt is encoded in chunks of ``CHUNK`` ids
whose keys/values are shared with prompts that start alike (an env's system prompt and tools).
A prompt is always encoded chunk by chunk, so its values do not depend on what was cached.
The turn steps it shares with ``VLLMPolicy`` (tools per session, seeds, budget,
decode and commit) come from :class:`~agent_gym.policy.base.TokenPolicyBase`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.inference import BatchEngine, Batcher, Row, check_logprobs_mode
from agent_gym.policy.base import TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.sampling import SamplingParams, cut_at_stop_string
from agent_gym.types import Message, PolicyOutput

__all__ = ["TransformersPolicy"]

_BATCHER_JOIN_S = 30.0  # longest wait for the batching thread to leave the model at close


class TransformersPolicy(TokenPolicyBase):
    """Policy running a Hugging Face causal LM in-process.

    Args:
        model_or_path: A ``PreTrainedModel`` or a path/name for ``AutoModelForCausalLM``.
        tokenizer: Its tokenizer (a chat template is required); loaded from the path if None.
        sampling: ``SamplingParams`` (or a dict of them) with ``n=1`` (one turn per call). ``seed``
            makes each turn reproducible per (session id, turn index) (see
            ``SamplingParams.request_seed``). ``stop`` strings end a turn as in vLLM: only a string
            completed by the last sampled id (after ``min_tokens`` ids) ends it, the ids are kept
            and the text ends right after the string (see :func:`~agent_gym.policy.sampling.turn_text`).
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
        tool_parser: The model family's tool-call parser name (vLLM's names; None: read from the
            chat template where unambiguous, else ``hermes``): how messages are rendered and
            turns end (see :class:`~agent_gym.policy.ChatTokenBuilder`).
        reasoning_parser: ``deepseek_r1``, ``qwen3``, ``openai`` or None.

    ``tools`` given to a turn stay with the session: a later turn called with ``tools=None``
    renders the same tools, ``tools=[]`` removes them.

    Raises:
        ValueError: ``sampling.n`` > 1 (for K samples of a task use ``samples_per_task=K`` in
            ``collect``), or a model object without a tokenizer.

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
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
    ) -> None:
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # a turn is one sample: refuse n > 1 (before loading anything) rather than drop it silently
        sampling = SamplingParams.coerce(sampling).require_single_sample(type(self).__name__)

        if max_model_len is not None:
            check_int("max_model_len", max_model_len, low=1)
        if max_response_length is not None:
            check_int("max_response_length", max_response_length, low=1)
        check_int("max_batch", max_batch, low=1)
        check_logprobs_mode(logprobs_mode)
        given_model, given_tokenizer = model_or_path, tokenizer
        if isinstance(model_or_path, (str,)) or hasattr(model_or_path, "__fspath__"):
            path = str(model_or_path)
            model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
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
        self.sampling = sampling
        self.device = next(model.parameters()).device
        config_len = getattr(model.config, "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or config_len or 4096)
        self.max_response_length = max_response_length
        self.builder = ChatTokenBuilder(tokenizer, chat_template_kwargs, tool_parser=tool_parser,
                                        reasoning_parser=reasoning_parser)
        self._vocab = int(model.get_output_embeddings().weight.shape[0])
        eos = set(self.builder.stop_ids) | set(self.sampling.stop_token_ids)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {int(gen_eos)}
        self.stop_ids = frozenset(i for i in eos if 0 <= i < self._vocab)
        self._rng = random.Random()
        pad = getattr(tokenizer, "pad_token_id", None)
        self.logprobs_mode = logprobs_mode
        self.max_batch = max_batch
        self.reuse_kv = bool(reuse_kv)
        #: The decoding core (batch KV store, session KV caches, batched draws), shared with the server.
        self.engine = BatchEngine(model, pad_id=pad if pad is not None else 0, vocab=self._vocab,
                                  logprobs_mode=logprobs_mode, max_batch=max_batch, reuse_kv=reuse_kv)
        self._batcher_lock = threading.Lock()
        self._batcher_obj: Batcher | None = None
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
            tool_parser=tool_parser,
            reasoning_parser=reasoning_parser,
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
        if not (len(prompts) == len(max_tokens) == len(seeds)):
            raise ValueError(f"expected as many max_tokens and seeds as prompts, got {len(prompts)} prompts, "
                             f"{len(max_tokens)} max_tokens and {len(seeds)} seeds")
        if sessions is None:
            sessions = [None] * len(prompts)
        elif len(sessions) != len(prompts):
            raise ValueError(f"expected as many sessions as prompts, got {len(sessions)} sessions "
                             f"for {len(prompts)} prompts")
        rows = [self.make_row(p, n, s, sid)
                for p, n, s, sid in zip(prompts, max_tokens, seeds, sessions, strict=True)]
        self.engine.run(rows)
        return [(r.out, r.logps, r.finish) for r in rows]

    def make_row(self, prompt: Sequence[int], budget: int, seed: int | None, session: str | None = None) -> Row:
        """An engine row sampling with the policy's settings (to decode with ``policy.engine.run``).

        Args:
            prompt: Prompt ids.
            budget: Most ids to sample.
            seed: Seeds the row's generator (None: ``sampling.seed`` or a random one).
            session: Session whose cached keys/values the prompt may extend.
        """
        sampling = self.sampling
        if seed is None:
            seed = sampling.seed if sampling.seed is not None else self._rng.randrange(2**31)
        listener = (lambda row: self._hit_stop_string(row.out)) if sampling.stop else None
        return self.engine.new_row(prompt, budget, seed, sampling, sorted(self.stop_ids),
                                   min_tokens=sampling.min_tokens, session=session, listener=listener)

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load new weights into the model in place (between sampling calls, never during one).

        Args:
            state_dict: A full ``state_dict`` of the same architecture (e.g. a trainer's copy).
        """
        with self.engine.lock:
            self.model.load_state_dict(dict(state_dict))
            self.model.eval()
            self.engine.clear()

    def _hit_stop_string(self, out: list[int]) -> bool:
        """Whether the last id completed a stop string (vLLM's check: after ``min_tokens`` ids, in its new text)."""
        if len(out) <= self.sampling.min_tokens or out[-1] in self.stop_ids:
            return False
        window = out[-(max(len(s) for s in self.sampling.stop) + 4) :]
        before = self.tokenizer.decode(window[:-1], skip_special_tokens=False)
        text = self.tokenizer.decode(window, skip_special_tokens=False)
        return cut_at_stop_string(before, text, self.sampling.stop) is not None

    def _batcher(self) -> Batcher:
        with self._batcher_lock:
            if self._batcher_obj is None or not self._batcher_obj.alive:
                # the gather window only when another session may send a turn (n_parallel > 1)
                self._batcher_obj = Batcher(self.engine, expect_more=lambda: len(self._turns) > 1,
                                            name="agent-gym-transformers-batcher")
            return self._batcher_obj

    async def _aclose_resources(self) -> None:
        self._close_batcher()

    def _close_batcher(self) -> None:
        with self._batcher_lock:
            batcher, self._batcher_obj = self._batcher_obj, None
        if batcher is not None:
            # turns still decoding end now (with an error); the worker is waited for, so that no
            # thread is inside the model when a closing process shuts the interpreter down
            batcher.close(abort=True, timeout=_BATCHER_JOIN_S)

    def close_session(self, session_id: str) -> None:
        """Forget ``session_id``'s token state, seed count, tools and KV cache."""
        super().close_session(session_id)
        self.engine.forget(session_id)

    def close(self) -> None:
        """Stop the batching thread and the private event loop. The policy stays usable.

        Turns still being sampled end with an error (their episodes with ``POLICY_ERROR``).
        """
        self._close_batcher()
        self.engine.clear(prompt_heads=False)
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
            return self._truncated(plan.prompt_ids, plan.new_segment, start, why)
        seed = self._next_seed(session_id)
        future = self._batcher().submit(
            lambda: [self.make_row(plan.prompt_ids, budget, seed, session_id)],
            lambda rows: (rows[0].out, rows[0].logps, rows[0].finish),
        )
        ids, logprobs, finish = await asyncio.wrap_future(future)
        return self._commit_turn(plan, ids, logprobs, finish, start, stop_ids=self.stop_ids,
                                 stops=self.sampling.stop)
