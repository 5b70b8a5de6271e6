"""A policy backed by one or more vLLM (OpenAI-compatible) servers.

:class:`VLLMPolicy` is token-in by default: each turn's prompt ids come from a
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder` and are sent to
``POST /v1/completions`` as a list of ints with ``return_token_ids``, so the recorded
tokens are exactly the ids the server sampled. :meth:`VLLMPolicy.astream` sends the same
request streamed and yields the sampled text and ids as they arrive. A chat mode (``/v1/chat/completions``)
serves servers that cannot take token ids; its outputs are marked ``retokenized``
unless the server returned token ids.

Every turn records its sampling (``PolicyOutput.sampling``): the policy's
:class:`~agent_gym.policy.sampling.SamplingParams` and the ``logprobs_mode`` the policy is
told the server runs with (vLLM's ``--logprobs-mode``, ``raw_logprobs`` by default), so a
trajectory says whether its logprobs are the model's raw log-softmax or the processed
distribution.

This module holds the turn logic (request bodies, reading the answers); the HTTP side
(session-affine routing, retries, failover, ``/v1/models``) is
:class:`~agent_gym.policy.vllm_client.VLLMClient`, and the steps shared with
:class:`~agent_gym.policy.TransformersPolicy` live in
:class:`~agent_gym.policy.base.TokenPolicyBase`. Requests carry the session id in
``x-session-id`` and ``X-SMG-Routing-Key`` (for vllm-router and the SGLang gateway) and
stick to one server per session. Connection errors, timeouts, HTTP 5xx and 429 are retried
with exponential backoff on another server; a 400 is not retried; an over-long prompt ends
the turn with ``finish_reason="prompt_truncation"``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.checks import check_int
from agent_gym.errors import ServerError
from agent_gym.policy.base import TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder, _normalize
from agent_gym.policy.routing import SessionRouter
from agent_gym.policy.sampling import SamplingParams, check_logprobs_mode
from agent_gym.policy.vllm_client import StreamInterrupted, VLLMClient
from agent_gym.policy.vllm_protocol import PromptTooLong, map_finish_reason, parse_completion_choice
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["StreamEvent", "VLLMPolicy", "parse_completion_choice"]


@dataclass
class StreamEvent:
    """One event of :meth:`VLLMPolicy.astream`.

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


class VLLMPolicy(TokenPolicyBase):
    """Policy talking to vLLM-compatible servers with exact token capture.

    Args:
        server_addresses: ``"IP:PORT"`` strings or URLs (one or several servers of the same model).
        tokenizer: The model's Hugging Face tokenizer (or a path/name to load one). Required in
            ``"tokens"`` mode; optional in ``"chat"`` mode.
        sampling: ``SamplingParams`` (or a dict of them).
        mode: ``"tokens"`` (``/v1/completions`` with prompt ids, the default) or ``"chat"``.
        max_model_len: Context length; when None it is read from the server's ``/v1/models``.
        max_response_length: Most ids after a segment's first prompt (sampled and environment
            ids); each turn's ``max_tokens`` is capped by what is left.
        concurrency: Most requests in flight at once (per event loop).
        timeout: Seconds to wait for one response.
        connect_timeout: Seconds to wait for a connection.
        max_retries: Retries after the first attempt (connection errors, timeouts, 5xx, 429).
        backoff: First retry delay in seconds; doubles each retry (with jitter).
        max_backoff: Cap of the retry delay.
        unhealthy_seconds: How long a failed server is avoided by new picks.
        model: Model name to send; when None the server's first model is used.
        chat_template_kwargs: Extra chat template variables (e.g. ``{"enable_thinking": False}``).
        api_key: Sent as a bearer token when given.
        logprobs_mode: The ``--logprobs-mode`` the servers run with: ``"raw_logprobs"``
            (vLLM's default: the log-softmax of the model's logits before temperature,
            penalties and top-k/top-p/min-p) or ``"processed_logprobs"`` (after them). The
            server decides what it returns; this names it in each turn's ``sampling`` record
            (and so in the trajectories).

    ``tools`` given to a turn stay with the session: a later turn called with ``tools=None``
    renders the same tools, ``tools=[]`` removes them.

    The HTTP connections of each event loop are pooled. ``act``, ``collect`` and the context
    manager close them; in your own event loop use ``async with VLLMPolicy(...) as policy:``
    or ``await policy.aclose()`` before the loop ends. A pool left open is released quietly
    when its loop is gone or at exit.

    The policy pickles as its configuration (servers, tokenizer, sampling, options); the
    copy opens its own connections on first use (e.g. in a Ray actor).

    Example:
        >>> policy = VLLMPolicy(["127.0.0.1:8000"], tokenizer, SamplingParams(temperature=1.0))  # doctest: +SKIP
        >>> out = policy.act(obs, session_id=info["episode_id"], tools=info["policy_tools"])  # doctest: +SKIP
    """

    def __init__(
        self,
        server_addresses: Sequence[str] | str,
        tokenizer: Any = None,
        sampling: SamplingParams | dict[str, Any] | None = None,
        *,
        mode: str = "tokens",
        max_model_len: int | None = None,
        max_response_length: int | None = None,
        concurrency: int = 64,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        unhealthy_seconds: float = 10.0,
        model: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        api_key: str | None = None,
        logprobs_mode: str = "raw_logprobs",
    ) -> None:
        super().__init__()
        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        if mode not in ("tokens", "chat"):
            raise ValueError(f"mode: expected 'tokens' or 'chat', got {mode!r}")
        self.client = VLLMClient(
            server_addresses,
            concurrency=concurrency,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            unhealthy_seconds=unhealthy_seconds,
            api_key=api_key,
        )
        for arg, value in (("max_model_len", max_model_len), ("max_response_length", max_response_length)):
            if value is not None:
                check_int(arg, value, low=1)
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        if tokenizer is None and mode == "tokens":
            raise ValueError("tokenizer: expected a Hugging Face tokenizer in 'tokens' mode, got None")
        self.tokenizer = tokenizer
        self.sampling = SamplingParams.coerce(sampling)
        self.mode = mode
        self.max_model_len = max_model_len
        self.max_response_length = max_response_length
        self.model = model
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.builder = (
            ChatTokenBuilder(tokenizer, self.chat_template_kwargs, track_retokenization=False)
            if tokenizer is not None and getattr(tokenizer, "chat_template", None)
            else None
        )
        if self.builder is None and mode == "tokens":
            raise ValueError("tokenizer: expected a tokenizer with a chat template in 'tokens' mode")
        # A final id of these ends a "stop" turn (not part of the text).
        self._stop_ids = (
            frozenset(self.builder.stop_ids) | frozenset(self.sampling.stop_token_ids)
            if self.builder is not None
            else frozenset()
        )
        self._chat_history: dict[str, list[int]] = {}
        self.completions: list[Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = [
            _ServerCompletions(self, name) for name in self.client.server_addresses
        ]
        self._remember_config(
            server_addresses=self.client.server_addresses,
            tokenizer=tokenizer,
            sampling=self.sampling,
            mode=mode,
            max_model_len=max_model_len,
            max_response_length=max_response_length,
            concurrency=concurrency,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            unhealthy_seconds=unhealthy_seconds,
            model=model,
            chat_template_kwargs=self.chat_template_kwargs,
            api_key=api_key,
            logprobs_mode=logprobs_mode,
        )

    # ------------------------------------------------------------------ client settings
    @property
    def server_addresses(self) -> list[str]:
        """The servers as ``"IP:PORT"`` strings, in the order given."""
        return self.client.server_addresses

    @property
    def router(self) -> SessionRouter:
        """The session-to-server router of the client."""
        return self.client.router

    @property
    def concurrency(self) -> int:
        """Most requests in flight at once (per event loop)."""
        return self.client.concurrency

    @property
    def timeout(self) -> float:
        """Seconds to wait for one response."""
        return self.client.timeout

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for a connection."""
        return self.client.connect_timeout

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt."""
        return self.client.max_retries

    @property
    def backoff(self) -> float:
        """First retry delay in seconds."""
        return self.client.backoff

    @property
    def max_backoff(self) -> float:
        """Cap of the retry delay in seconds."""
        return self.client.max_backoff

    @property
    def api_key(self) -> str | None:
        """The bearer token sent with each request, if any."""
        return self.client.api_key

    @property
    def _resources(self) -> Any:
        return self.client._resources

    @property
    def _info_failures(self) -> dict[str, tuple[int, float]]:
        return self.client._info_failures

    # ------------------------------------------------------------------ requests
    async def _info(self, server: str) -> dict[str, Any]:
        """``{"model", "max_model_len"}`` of ``server`` when the policy needs them; {} otherwise or while unknown."""
        if self.model is not None and (self.max_model_len is not None or self.mode == "chat"):
            return {}
        return await self.client.server_info(server)

    async def _post(
        self,
        session_id: str | None,
        path: str,
        make_body: Callable[[str], Awaitable[dict[str, Any]]],
        *,
        server: str | None = None,
    ) -> tuple[dict[str, Any], str]:
        """Send a request through the client (see :meth:`VLLMClient.post`); return ``(JSON, server)``."""
        return await self.client.post(session_id, path, make_body, server=server)

    # ------------------------------------------------------------------ policy
    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Sample the next assistant turn for ``messages`` (see the class docs).

        Raises:
            ServerError: Every attempt failed, a request was rejected, or a body was malformed.
        """
        self._check_session(session_id)
        start = time.perf_counter()
        tools = self._session_tools(session_id, tools)
        if self.mode == "chat":
            return self._stamped(await self._chat_turn(messages, session_id, tools, start))
        plan, make_body = self._token_request(messages, session_id, tools, stream=False)
        try:
            data, server = await self._post(session_id, "/v1/completions", make_body)
        except PromptTooLong as exc:
            return self._stamped(self._truncated(plan.prompt_ids, plan.new_segment, start, str(exc)))
        return self._stamped(self._token_output(plan, data["choices"][0], server, start))

    def _stamped(self, out: PolicyOutput) -> PolicyOutput:
        """``out`` with this policy's sampling record (``PolicyOutput.sampling``)."""
        out.sampling = self.sampling.record(self.logprobs_mode)
        return out

    async def astream(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Sample the next assistant turn as a stream: deltas as the server samples them, then the turn.

        The request is the one :meth:`aact` sends, with ``"stream": true``; routing, session
        affinity, seeds and token state are the same, and the last event's ``output`` equals what
        :meth:`aact` returns for the same sample. Retries and failover happen only before the first
        chunk arrived; a stream that breaks later ends the turn with ``finish_reason="error"`` (the
        turn is not committed). In ``"chat"`` mode the turn is sampled whole and sent as one delta.

        Yields:
            :class:`StreamEvent` deltas (``text``, ``token_ids``, ``logprobs``), then one event
            whose ``output`` is the complete :class:`~agent_gym.types.PolicyOutput`.

        Raises:
            ServerError: Before the first chunk: every attempt failed, a request was rejected, or
                a body was malformed.
        """
        if self.mode == "chat":
            out = await self.aact(messages, session_id=session_id, tools=tools)
            yield StreamEvent(text=out.text, token_ids=list(out.token_ids or []), logprobs=out.logprobs)
            yield StreamEvent(output=out)
            return
        self._check_session(session_id)
        start = time.perf_counter()
        tools = self._session_tools(session_id, tools)
        plan, make_body = self._token_request(messages, session_id, tools, stream=True)
        ids: list[int] = []
        lps: list[float] = []
        texts: list[str] = []
        ids_ok = lps_ok = True
        finish: Any = None
        stop_reason: Any = None
        server: str | None = None
        broken: str | None = None
        try:
            async for chunk, server in self.client.post_stream(session_id, "/v1/completions", make_body):
                choices = chunk.get("choices")
                if not choices:  # the usage chunk
                    continue
                choice = choices[0]
                if not isinstance(choice, dict):
                    raise StreamInterrupted(f"server {server} sent a chunk without a choice object",
                                            server=server, status=200)
                token_ids, logprobs = parse_completion_choice(choice)
                text = str(choice.get("text") or "")
                if token_ids is None:
                    ids_ok = False
                elif token_ids:
                    ids += token_ids
                    if logprobs is None:
                        lps_ok = False
                    else:
                        lps += logprobs
                texts.append(text)
                if choice.get("finish_reason") is not None:
                    finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
                if text or token_ids:
                    yield StreamEvent(text=text, token_ids=token_ids or [], logprobs=logprobs if token_ids else None)
        except PromptTooLong as exc:
            yield StreamEvent(output=self._stamped(self._truncated(plan.prompt_ids, plan.new_segment, start,
                                                                   str(exc))))
            return
        except ServerError as exc:
            if server is None:  # nothing was handed on: the caller sees the failure as aact would
                raise
            broken = str(exc)
        if broken is None and finish is None:
            broken = f"server {server}: the stream ended without a finish_reason"
        if broken is not None:
            token_ids = ids if ids_ok else self.tokenizer.encode("".join(texts), add_special_tokens=False)
            yield StreamEvent(output=self._stamped(PolicyOutput(
                text=self.tokenizer.decode(token_ids, skip_special_tokens=False),
                prompt_token_ids=list(plan.prompt_ids),
                token_ids=token_ids,
                logprobs=lps if ids_ok and lps_ok and len(lps) == len(ids) else None,
                finish_reason=FinishReason.ERROR,
                llm_time=time.perf_counter() - start,
                retokenized=not ids_ok,
                new_segment=plan.new_segment,
                server=server,
                error=broken if broken.startswith("server ") else f"server {server}: {broken}",
            )))
            return
        whole: dict[str, Any] = {"text": "".join(texts), "finish_reason": finish, "stop_reason": stop_reason,
                                 "token_ids": ids if ids_ok else None}
        if lps_ok and self.sampling.logprobs is not None:
            whole["logprobs"] = {"token_logprobs": lps}
        yield StreamEvent(output=self._stamped(self._token_output(plan, whole, server, start)))

    def _token_request(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, *, stream: bool
    ) -> tuple[Any, Callable[[str], Awaitable[dict[str, Any]]]]:
        """The prompt plan of a token-mode turn and the builder of its request body per server."""
        assert self.builder is not None
        plan = self.builder.prepare(session_id, messages, tools)
        stop_ids = sorted(set(self.sampling.stop_token_ids) | {self.builder.eot_token_id})
        seed = self._next_seed(session_id)

        async def make_body(server: str) -> dict[str, Any]:
            info = await self._info(server)
            model_len = self.max_model_len or info.get("max_model_len")
            budget = self._max_tokens(len(plan.prompt_ids), plan.response_length, model_len)
            if budget <= 0:
                raise PromptTooLong(f"prompt of {len(plan.prompt_ids)} ids leaves no room to sample")
            body = self.sampling.to_request(max_tokens=budget, n=1)
            body["stop_token_ids"] = stop_ids
            if seed is not None:
                body["seed"] = seed
            body.update(
                prompt=plan.prompt_ids,
                logprobs=self.sampling.logprobs,
                return_token_ids=True,
                return_tokens_as_token_ids=True,
                skip_special_tokens=False,
                spaces_between_special_tokens=False,
                include_stop_str_in_output=True,
            )
            if stream:
                body["stream"] = True
            model = self.model or info.get("model")
            if model:
                body["model"] = model
            return body

        return plan, make_body

    def _token_output(self, plan: Any, choice: dict[str, Any], server: str, start: float) -> PolicyOutput:
        """The turn of a token-mode answer's choice (committed unless the server reported an error)."""
        token_ids, logprobs = parse_completion_choice(choice)
        retokenized = token_ids is None
        finish, error = map_finish_reason(choice.get("finish_reason"))
        if token_ids is None:  # a server that does not return ids: fall back to re-tokenizing its text
            token_ids = self.tokenizer.encode(str(choice.get("text") or ""), add_special_tokens=False)
            if finish == FinishReason.STOP:
                token_ids.append(self.builder.eot_token_id)
            logprobs = None
        if error is not None:  # the turn is not committed: the episode ends with POLICY_ERROR
            return PolicyOutput(
                text=self.tokenizer.decode(token_ids, skip_special_tokens=False),
                prompt_token_ids=list(plan.prompt_ids),
                token_ids=token_ids,
                logprobs=logprobs,
                finish_reason=finish,
                llm_time=time.perf_counter() - start,
                retokenized=retokenized,
                new_segment=plan.new_segment,
                server=server,
                error=f"server {server}: {error}",
            )
        # A turn stopped by a stop string keeps its last id in the text.
        ended_by_id = not isinstance(choice.get("stop_reason"), str)
        return self._commit_turn(
            plan,
            token_ids,
            logprobs,
            finish,
            start,
            stop_ids=self._stop_ids if ended_by_id else (),
            retokenized=retokenized,
            server=server,
        )

    async def _chat_turn(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, start: float
    ) -> PolicyOutput:
        msgs = _normalize(messages)
        local_prompt = self.builder.render_ids(msgs, tools) if self.builder is not None else None
        previous = self._chat_history.get(session_id)
        seed = self._next_seed(session_id)

        async def make_body(server: str) -> dict[str, Any]:
            info = await self._info(server)
            model_len = self.max_model_len or info.get("max_model_len")
            budget = self.sampling.max_tokens
            if local_prompt is not None:
                response_len = len(local_prompt) - len(previous) if previous else 0
                budget = self._max_tokens(len(local_prompt), max(0, response_len), model_len)
                if budget <= 0:
                    raise PromptTooLong(f"prompt of {len(local_prompt)} ids leaves no room to sample")
            body = self.sampling.to_request(max_tokens=budget, n=1)
            if seed is not None:
                body["seed"] = seed
            body.update(
                messages=msgs,
                logprobs=True,
                top_logprobs=self.sampling.logprobs,
                return_token_ids=True,
                skip_special_tokens=False,
                include_stop_str_in_output=True,
            )
            if tools:
                body["tools"] = tools
            if self.chat_template_kwargs:
                body["chat_template_kwargs"] = self.chat_template_kwargs
            model = self.model or info.get("model")
            if model:
                body["model"] = model
            return body

        try:
            data, server = await self._post(session_id, "/v1/chat/completions", make_body)
        except PromptTooLong as exc:
            return self._truncated(local_prompt, False, start, str(exc))
        choice = data["choices"][0]
        message = choice.get("message") or {}
        text = str(message.get("content") or "")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            text = f"<think>\n{reasoning}\n</think>\n\n{text}"
        finish, error = map_finish_reason(choice.get("finish_reason"), chat=True)
        token_ids = choice.get("token_ids")
        retokenized = token_ids is None
        if token_ids is None and self.builder is not None:
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            if finish == FinishReason.STOP:
                token_ids.append(self.builder.eot_token_id)
        logprobs = None
        content = (choice.get("logprobs") or {}).get("content") if not retokenized else None
        if content is not None and token_ids is not None and len(content) == len(token_ids):
            logprobs = [float(c.get("logprob", 0.0)) for c in content]
        prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids") or local_prompt
        prompt_ids = [int(t) for t in prompt_ids] if prompt_ids is not None else None
        new_segment = False
        if prompt_ids is not None and token_ids is not None:
            if previous is not None:
                new_segment = prompt_ids[: len(previous)] != previous
            if error is None:
                self._chat_history[session_id] = prompt_ids + [int(t) for t in token_ids]
        return PolicyOutput(
            text=text,
            prompt_token_ids=prompt_ids,
            token_ids=[int(t) for t in token_ids] if token_ids is not None else None,
            logprobs=logprobs,
            finish_reason=finish,
            llm_time=time.perf_counter() - start,
            retokenized=retokenized,
            new_segment=new_segment,
            server=server,
            error=f"server {server}: {error}" if error is not None else None,
        )

    def close_session(self, session_id: str) -> None:
        """Forget the token state, tools and server assignment of ``session_id``."""
        super().close_session(session_id)
        self._chat_history.pop(session_id, None)
        self.client.release(session_id)

    async def aclose(self) -> None:
        """Close the HTTP connections of the running event loop."""
        await self.client.aclose()

    async def _aclose_resources(self) -> None:
        await self.client.aclose()


class _ServerCompletions:
    """Async callable posting a raw ``/v1/completions`` request to one server (the seed's ``completions``)."""

    def __init__(self, policy: VLLMPolicy, server: str) -> None:
        self._policy = policy
        self.server = server

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request`` to this server's ``/v1/completions`` and return the response JSON.

        Transient failures are retried on the same server. An over-long prompt raises
        ``ServerError`` with status 400.

        Raises:
            ServerError: The request failed.
        """
        if not isinstance(request, dict):
            raise TypeError(f"request: expected a dict, got {type(request).__name__}")
        policy = self._policy

        async def make_body(server: str) -> dict[str, Any]:
            body = dict(request)
            body.setdefault("max_tokens", policy.sampling.max_tokens)
            if "model" not in body:
                model = policy.model or (await policy._info(server)).get("model")
                if model:
                    body["model"] = model
            return body

        try:
            data, _ = await policy._post(None, "/v1/completions", make_body, server=self.server)
        except PromptTooLong as exc:
            raise ServerError(f"server {self.server}: {exc}", server=self.server, status=400) from None
        return data

    def __repr__(self) -> str:
        return f"<completions {self.server}>"
