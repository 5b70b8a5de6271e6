"""An in-process policy on a Hugging Face causal LM (CPU development, tests, small models).

:class:`TransformersPolicy` speaks the same protocol as
:class:`~agent_gym.policy.vllm_policy.VLLMPolicy` and records the same things: the
exact prompt ids (built incrementally by a
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder`), the sampled ids including the
final stop id, and each sampled id's processed logprob in float32 (log-softmax after
penalties, temperature, top-k, top-p and min-p, as vLLM's ``processed_logprobs``).
Generation runs in a worker thread so ``aact`` never blocks the event loop. The turn steps
it shares with ``VLLMPolicy`` (tools per session, seeds, budget, decode and commit) come
from :class:`~agent_gym.policy.base.TokenPolicyBase`.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.policy.base import TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.logits import Penalties, draw_token
from agent_gym.policy.sampling import SamplingParams
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["TransformersPolicy", "sample_next"]


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
    ) -> None:
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_model_len is not None:
            check_int("max_model_len", max_model_len, low=1)
        if max_response_length is not None:
            check_int("max_response_length", max_response_length, low=1)
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
        )

    # ------------------------------------------------------------------ generation
    def generate_ids(
        self, prompt_ids: list[int], max_tokens: int, seed: int | None = None
    ) -> tuple[list[int], list[float], str]:
        """Sample up to ``max_tokens`` ids after ``prompt_ids`` (blocking).

        ``seed`` seeds the draws; when None, ``sampling.seed`` (or a random one) does.

        Returns:
            ``(sampled ids, processed logprobs, finish_reason)``; the ids include the stop id
            when generation ended on one (``"stop"``), or end at ``max_tokens`` (``"length"``).
        """
        import torch

        sampling = self.sampling
        if seed is None:
            seed = sampling.seed if sampling.seed is not None else self._rng.randrange(2**31)
        generator = torch.Generator(device="cpu").manual_seed(seed % 2**63)
        out: list[int] = []
        logps: list[float] = []
        finish = FinishReason.LENGTH
        stop_ids = sorted(self.stop_ids)
        penalties = Penalties(sampling, self._vocab, prompt_ids, ())
        with self._model_lock, torch.inference_mode():
            cache = None
            step_input = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            for _ in range(max_tokens):
                kwargs = {self._cache_kw: cache} if cache is not None else {}
                result = self.model(input_ids=step_input, use_cache=True, **kwargs)
                cache = getattr(result, "cache", None)
                if cache is None:
                    cache = getattr(result, "past_key_values", None)
                logits = result.logits[0, -1, : self._vocab].to("cpu", torch.float32)
                banned = stop_ids if len(out) < sampling.min_tokens else ()
                token, logp = _sample(logits, sampling, penalties, banned, generator)
                out.append(token)
                penalties.add(token)
                logps.append(logp)
                if token in self.stop_ids:
                    finish = FinishReason.STOP
                    break
                if sampling.stop and self._hit_stop_string(out):
                    finish = FinishReason.STOP
                    break
                step_input = torch.tensor([[token]], dtype=torch.long, device=self.device)
        return out, logps, finish

    def _hit_stop_string(self, out: list[int]) -> bool:
        longest = max(len(s) for s in self.sampling.stop)
        tail = self.tokenizer.decode(out[-(longest + 4) :], skip_special_tokens=False)
        return any(s in tail for s in self.sampling.stop)

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
        ids, logprobs, finish = await asyncio.to_thread(self.generate_ids, plan.prompt_ids, budget, seed)
        return self._commit_turn(plan, ids, logprobs, finish, start, stop_ids=self.stop_ids)
