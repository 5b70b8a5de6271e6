"""What the two vLLM policies share: the client, the model lookups, the request's sampling fields.

:class:`VLLMPolicyBase` holds the configuration common to
:class:`~agent_gym.policy.VLLMPolicy` (token-in ``/v1/completions``) and
:class:`~agent_gym.policy.VLLMChatPolicy` (``/v1/chat/completions``): the
:class:`~agent_gym.policy.vllm_client.VLLMClient` (built from addresses and
:class:`~agent_gym.policy.client_options.ClientOptions`, or given ready), the tokenizer and its
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder`, the sampling parameters and the
logprobs mode every turn records, the seed's raw ``completions`` callables, and closing.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent_gym.checks import check_int
from agent_gym.errors import PromptTooLong
from agent_gym.inference.logits import check_logprobs_mode
from agent_gym.policy.base import TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.client_options import ClientOptions
from agent_gym.policy.completions import CompletionsFn, ServerCompletions
from agent_gym.policy.sampling import SamplingParams
from agent_gym.policy.vllm_client import VLLMClient
from agent_gym.types import Message, PolicyOutput

__all__ = ["StreamEvent", "VLLMPolicyBase"]


@dataclass
class StreamEvent:
    """One event of a vLLM policy's ``astream``.

    Attributes:
        text: Text the server added (its ``text`` delta; may be empty).
        token_ids: Ids the server sampled since the previous event.
        logprobs: Their logprobs, when the server sent them.
        output: Set on the last event only: the complete turn.
    """

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    output: PolicyOutput | None = None


class VLLMPolicyBase(TokenPolicyBase):
    """The configuration and plumbing shared by the vLLM policies.

    The arguments are documented with :class:`~agent_gym.policy.VLLMPolicy`;
    :class:`~agent_gym.policy.VLLMChatPolicy` takes the same ones. ``server_addresses`` may be
    a ready :class:`~agent_gym.policy.vllm_client.VLLMClient`, in which case ``client_options``
    must be None (the client has its options). ``tool_parser`` / ``reasoning_parser`` name the
    model family's formats as vLLM names them (None: read from the chat template where
    unambiguous): see :class:`~agent_gym.policy.ChatTokenBuilder`.

    Raises:
        TypeError: ``client_options`` given with a ready client, or an argument of the wrong type.
        ValueError: No or a malformed address, a tokenizer the policy cannot use, an option out
            of range (``ConfigError``), ``sampling.n`` > 1 (a policy samples one turn per call: use
            ``samples_per_task`` in ``collect``).
    """

    #: The API the policy samples through: ``"tokens"`` (``/v1/completions``) or ``"chat"``.
    mode: ClassVar[str]
    #: Whether the policy needs a tokenizer with a chat template (token-in prompts).
    needs_chat_template: ClassVar[bool] = True

    def __init__(
        self,
        server_addresses: Sequence[str] | str | VLLMClient,
        tokenizer: Any = None,
        sampling: SamplingParams | dict[str, Any] | None = None,
        *,
        max_model_len: int | None = None,
        max_response_length: int | None = None,
        model: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        logprobs_mode: str = "raw_logprobs",
        client_options: ClientOptions | Mapping[str, Any] | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
    ) -> None:
        super().__init__()
        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        if isinstance(server_addresses, VLLMClient):
            if client_options is not None:
                raise TypeError("client_options: expected None with a ready VLLMClient (it has its options)")
            self.client = server_addresses
        else:
            self.client = VLLMClient(server_addresses, client_options)
        for arg, value in (("max_model_len", max_model_len), ("max_response_length", max_response_length)):
            if value is not None:
                check_int(arg, value, low=1)
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        if tokenizer is None and self.needs_chat_template:
            raise ValueError(f"tokenizer: expected a Hugging Face tokenizer for {type(self).__name__}, got None")
        self.tokenizer = tokenizer
        # a turn is one sample: refuse n > 1 rather than drop it silently
        self.sampling = SamplingParams.coerce(sampling).require_single_sample(type(self).__name__)
        self.max_model_len = max_model_len
        self.max_response_length = max_response_length
        self.model = model
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.builder = (
            ChatTokenBuilder(tokenizer, self.chat_template_kwargs, track_retokenization=False,
                             tool_parser=tool_parser, reasoning_parser=reasoning_parser)
            if tokenizer is not None and getattr(tokenizer, "chat_template", None)
            else None
        )
        if self.builder is None and self.needs_chat_template:
            raise ValueError(f"tokenizer: expected a tokenizer with a chat template for {type(self).__name__}")
        # A final id of these ends a "stop" turn (not part of the text).
        self._stop_ids = (
            frozenset(self.builder.stop_ids) | frozenset(self.sampling.stop_token_ids)
            if self.builder is not None
            else frozenset()
        )
        #: The weight version recorded for ids whose answer names none (the trainer sets it; -1: unknown).
        self.weight_version = -1
        # session -> the prompt and sampled ids of its last turn as the server reported them (chat)
        self._server_ids: dict[str, list[int]] = {}
        self._completions = [
            ServerCompletions(self.client, name, default_max_tokens=self.sampling.max_tokens, model=model)
            for name in self.client.server_addresses
        ]
        self._remember_config(
            server_addresses=self.client,  # pickles as its addresses and options
            tokenizer=tokenizer,
            sampling=self.sampling,
            max_model_len=max_model_len,
            max_response_length=max_response_length,
            model=model,
            chat_template_kwargs=self.chat_template_kwargs,
            logprobs_mode=logprobs_mode,
            tool_parser=tool_parser,
            reasoning_parser=reasoning_parser,
        )

    @property
    def completions(self) -> list[CompletionsFn]:
        """The seed's raw ``/v1/completions`` callable of each server, in the client's order.

        ``await policy.completions[0](request)`` posts ``request`` (``max_tokens`` defaults to
        ``sampling.max_tokens``, ``model`` to the policy's) through the policy's client.
        """
        return list(self._completions)

    async def _info(self, server: str, *, need_len: bool = True) -> dict[str, Any]:
        """``{"model", "max_model_len"}`` of ``server``; {} when the policy knows what it needs, or while unknown.

        Args:
            server: The server.
            need_len: Whether the turn needs the context length (else only the model name).
        """
        if self.model is not None and (self.max_model_len is not None or not need_len):
            return {}
        return await self.client.server_info(server)

    def _budget(self, info: dict[str, Any], prompt_len: int, response_len: int) -> int:
        """Ids this turn may sample (the context and response budgets left).

        Raises:
            PromptTooLong: The prompt leaves no room to sample.
        """
        budget = self._max_tokens(prompt_len, response_len, self.max_model_len or info.get("max_model_len"))
        if budget <= 0:
            raise PromptTooLong(f"prompt of {prompt_len} ids leaves no room to sample")
        return budget

    def _request(self, info: dict[str, Any], budget: int, seed: int | None, **fields: Any) -> dict[str, Any]:
        """A request body: the sampling fields for ``budget`` ids, the turn's seed, ``fields``, the model."""
        body = self.sampling.to_request(max_tokens=budget, n=1)
        if seed is not None:
            body["seed"] = seed
        body.update(fields)
        model = self.model or info.get("model")
        if model:
            body["model"] = model
        return body

    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Sample the next assistant turn for ``messages`` (see the class docs).

        Raises:
            ServerError: Every attempt failed, a request was rejected, or a body was malformed.
        """
        self._check_session(session_id)
        start = time.perf_counter()
        return await self._turn(messages, session_id, self._session_tools(session_id, tools), start)

    @abc.abstractmethod
    async def _turn(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, start: float
    ) -> PolicyOutput:
        """Sample one turn with the session's ``tools`` (``start``: when the turn began)."""

    async def astream(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Sample the next assistant turn and yield it as one delta, then the whole turn.

        Yields:
            A :class:`StreamEvent` with the turn's text, ids and logprobs, then one whose
            ``output`` is the :class:`~agent_gym.types.PolicyOutput` that :meth:`aact` returns.
        """
        out = await self.aact(messages, session_id=session_id, tools=tools)
        yield StreamEvent(text=out.text, token_ids=list(out.token_ids or []), logprobs=out.logprobs)
        yield StreamEvent(output=out)

    def close_session(self, session_id: str) -> None:
        """Forget the token state, tools and server assignment of ``session_id``."""
        super().close_session(session_id)
        self._server_ids.pop(session_id, None)
        self.client.release(session_id)

    async def aclose(self) -> None:
        """Close the HTTP connections of the running event loop."""
        await self.client.aclose()

    async def _aclose_resources(self) -> None:
        await self.client.aclose()
