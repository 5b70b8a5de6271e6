"""A policy backed by one or more vLLM (OpenAI-compatible) servers.

:class:`VLLMPolicy` is token-in by default: each turn's prompt ids come from a
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder` and are sent to
``POST /v1/completions`` as a list of ints with ``return_token_ids``, so the recorded
tokens are exactly the ids the server sampled. A chat mode (``/v1/chat/completions``)
serves servers that cannot take token ids; its outputs are marked ``retokenized``
unless the server returned token ids.

Requests carry the session id in ``x-session-id`` and ``X-SMG-Routing-Key`` (for
vllm-router and the SGLang gateway) and stick to one server per session
(:class:`~agent_gym.policy.routing.SessionRouter`). Connection errors, timeouts,
HTTP 5xx and 429 are retried with exponential backoff on another server; a 400 is not
retried; an over-long prompt ends the turn with ``finish_reason="prompt_truncation"``.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent_gym.errors import ServerError
from agent_gym.policy.base import AsyncPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder, _normalize
from agent_gym.policy.http_transport import HttpTransport, TransportFailure, TransportTimeout
from agent_gym.policy.routing import SessionRouter, normalize_address
from agent_gym.policy.sampling import SamplingParams
from agent_gym.policy.vllm_protocol import (
    CONTEXT_ERROR,
    LoopResources,
    PromptTooLong,
    error_text,
    map_finish_reason,
    parse_completion_choice,
)
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["VLLMPolicy", "parse_completion_choice"]

class VLLMPolicy(AsyncPolicyBase):
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

    The HTTP connections of each event loop are pooled. ``act``, ``collect`` and the context
    manager close them; in your own event loop use ``async with VLLMPolicy(...) as policy:``
    or ``await policy.aclose()`` before the loop ends.

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
    ) -> None:
        super().__init__()
        if isinstance(server_addresses, str):
            server_addresses = [server_addresses]
        names: dict[str, str] = {}
        for address in server_addresses:
            name, base = normalize_address(address)
            names.setdefault(name, base)
        if not names:
            raise ValueError("server_addresses: expected at least one 'IP:PORT' address, got none")
        if mode not in ("tokens", "chat"):
            raise ValueError(f"mode: expected 'tokens' or 'chat', got {mode!r}")
        for arg, value, lo in (("concurrency", concurrency, 1), ("max_retries", max_retries, 0)):
            if not isinstance(value, int) or value < lo:
                raise ValueError(f"{arg}: expected an int >= {lo}, got {value!r}")
        for arg, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not value > 0:
                raise ValueError(f"{arg}: expected seconds > 0, got {value!r}")
        for arg, value in (("max_model_len", max_model_len), ("max_response_length", max_response_length)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{arg}: expected an int >= 1 or None, got {value!r}")
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        if tokenizer is None and mode == "tokens":
            raise ValueError("tokenizer: expected a Hugging Face tokenizer in 'tokens' mode, got None")
        self._bases = names
        self.tokenizer = tokenizer
        self.sampling = SamplingParams.coerce(sampling)
        self.mode = mode
        self.max_model_len = max_model_len
        self.max_response_length = max_response_length
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.connect_timeout = float(min(connect_timeout, timeout))
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.model = model
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.api_key = api_key
        self.router = SessionRouter(list(names), unhealthy_seconds=unhealthy_seconds)
        self.builder = (
            ChatTokenBuilder(tokenizer, self.chat_template_kwargs, track_retokenization=False)
            if tokenizer is not None and getattr(tokenizer, "chat_template", None)
            else None
        )
        if self.builder is None and mode == "tokens":
            raise ValueError("tokenizer: expected a tokenizer with a chat template in 'tokens' mode")
        self._resources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopResources] = (
            weakref.WeakKeyDictionary()
        )
        self._server_info: dict[str, dict[str, Any]] = {}
        # server -> (failed /v1/models lookups in a row, monotonic time before which not to retry)
        self._info_failures: dict[str, tuple[int, float]] = {}
        self._chat_history: dict[str, list[int]] = {}
        self._turns: dict[str, int] = {}  # session -> turns requested so far (seeds each turn)
        self.completions: list[Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = [
            _ServerCompletions(self, name) for name in names
        ]

    # ------------------------------------------------------------------ properties
    @property
    def server_addresses(self) -> list[str]:
        """The servers as ``"IP:PORT"`` strings, in the order given."""
        return list(self._bases)

    def _url(self, server: str, path: str) -> str:
        return f"{self._bases[server]}{path}"

    def _loop_resources(self) -> LoopResources:
        loop = asyncio.get_running_loop()
        res = self._resources.get(loop)
        if res is None:
            # As at most `concurrency` requests are in flight, the few extra connections
            # serve the /v1/models lookups made outside the limit.
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
            transport = HttpTransport(
                max_connections=self.concurrency + 8,
                timeout=self.timeout,
                connect_timeout=self.connect_timeout,
                headers=headers,
            )
            res = LoopResources(transport, asyncio.Semaphore(self.concurrency))
            self._resources[loop] = res
        return res

    async def _info(self, server: str) -> dict[str, Any]:
        """``{"model", "max_model_len"}`` of ``server`` from ``/v1/models``; {} while unknown.

        Only a successful answer (HTTP 200 listing at least one model) is cached. A failed
        lookup (a server still loading answers 503; a connection error) is retried on a later
        request, no sooner than a backoff that doubles per failure (``backoff`` up to
        ``max_backoff``), so a dead server is not asked on every request.
        """
        info = self._server_info.get(server)
        if info is not None:
            return info
        if self.model is not None and (self.max_model_len is not None or self.mode == "chat"):
            return {}
        failures, retry_at = self._info_failures.get(server, (0, 0.0))
        if time.monotonic() < retry_at:
            return {}
        try:
            resp = await self._loop_resources().transport.get(
                self._url(server, "/v1/models"), timeout=min(self.timeout, 10.0)
            )
            data = resp.json() if resp.status == 200 else None
        except (TransportTimeout, TransportFailure, ValueError):
            data = None
        models = data.get("data") if isinstance(data, dict) else None
        first = models[0] if isinstance(models, list) and models else None
        if not isinstance(first, dict):
            delay = min(self.max_backoff, self.backoff * 2**failures)
            self._info_failures[server] = (failures + 1, time.monotonic() + delay)
            return {}
        info = {"model": first.get("id"), "max_model_len": first.get("max_model_len")}
        self._server_info[server] = info
        self._info_failures.pop(server, None)
        return info

    # ------------------------------------------------------------------ transport
    async def _post(
        self,
        session_id: str | None,
        path: str,
        make_body: Callable[[str], Awaitable[dict[str, Any]]],
        *,
        server: str | None = None,
    ) -> tuple[dict[str, Any], str]:
        """POST with retries and failover; return ``(response JSON, server)``.

        Args:
            session_id: Session for routing (None with a fixed ``server``).
            path: Endpoint path.
            make_body: Builds the body for the chosen server (may raise ``PromptTooLong``).
            server: Use only this server (no failover).

        Raises:
            PromptTooLong: The server reported an over-long prompt.
            ServerError: A non-retryable error, malformed JSON, or every attempt failed.
        """
        res = self._loop_resources()
        headers = {"x-session-id": session_id, "X-SMG-Routing-Key": session_id} if session_id else {}
        failed: list[str] = []
        errors: list[str] = []
        last_status: int | None = None
        for attempt in range(self.max_retries + 1):
            target = server or self.router.pick(session_id or "", exclude=failed)
            body = await make_body(target)
            retry_after: float | None = None
            try:
                async with res.semaphore:
                    self.router.begin(target)
                    try:
                        resp = await res.transport.post_json(self._url(target, path), body, headers=headers)
                    finally:
                        self.router.end(target)
            except TransportTimeout:
                error, last_status = f"no response within {self.timeout:g}s (timeout)", None
            except TransportFailure as exc:
                error, last_status = f"connection failed ({exc})", None
            else:
                last_status = resp.status
                if resp.status == 200:
                    try:
                        data = resp.json()
                    except ValueError as exc:
                        raise ServerError(
                            f"server {target} returned malformed JSON for POST {path}: {exc}; "
                            f"body starts with {resp.text[:120]!r}",
                            server=target,
                            status=200,
                        ) from None
                    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
                        raise ServerError(
                            f"server {target} returned an unexpected JSON body for POST {path}: {str(data)[:200]}",
                            server=target,
                            status=200,
                        )
                    return data, target
                message = error_text(resp)
                if resp.status == 400 and CONTEXT_ERROR in message.lower():
                    raise PromptTooLong(message)
                if resp.status != 429 and resp.status < 500:
                    raise ServerError(
                        f"server {target} rejected POST {path} with HTTP {resp.status}: {message}",
                        server=target,
                        status=resp.status,
                    )
                error = f"HTTP {resp.status}: {message[:200]}"
                if resp.status == 429:
                    try:
                        retry_after = float(resp.headers.get("retry-after", ""))
                    except ValueError:
                        retry_after = None
            errors.append(f"{target}: {error}")
            if server is None:
                self.router.mark_unhealthy(target)
                failed.append(target)
            if attempt < self.max_retries:
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
                if retry_after is not None:
                    delay = max(delay, min(retry_after, self.max_backoff))
                await asyncio.sleep(delay)
        tried = sorted(set(failed) or {server or ""})
        raise ServerError(
            f"POST {path} failed after {self.max_retries + 1} attempt(s) on {', '.join(tried)}: " + "; ".join(errors),
            server=", ".join(tried),
            status=last_status,
        )

    # ------------------------------------------------------------------ policy
    def _max_tokens(self, prompt_len: int, response_len: int, model_len: int | None) -> int:
        """Tokens allowed this turn (<= 0 means the context or response budget is full)."""
        limit = self.sampling.max_tokens
        if model_len is not None:
            limit = min(limit, model_len - prompt_len)
        if self.max_response_length is not None:
            limit = min(limit, self.max_response_length - response_len)
        return limit

    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Sample the next assistant turn for ``messages`` (see the class docs).

        Raises:
            ServerError: Every attempt failed, a request was rejected, or a body was malformed.
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id: expected a non-empty str, got {session_id!r}")
        start = time.perf_counter()
        if self.mode == "chat":
            return await self._chat_turn(messages, session_id, tools, start)
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
            model = self.model or info.get("model")
            if model:
                body["model"] = model
            return body

        try:
            data, server = await self._post(session_id, "/v1/completions", make_body)
        except PromptTooLong as exc:
            return self._truncated(plan.prompt_ids, plan.new_segment, start, str(exc))
        choice = data["choices"][0]
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
        stop_reason = choice.get("stop_reason")
        if finish == FinishReason.STOP and not isinstance(stop_reason, str):
            text = self.builder.decode_response(token_ids, self.sampling.stop_token_ids)
        else:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        self.builder.commit(plan, token_ids, text)
        return PolicyOutput(
            text=text,
            prompt_token_ids=list(plan.prompt_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish,
            llm_time=time.perf_counter() - start,
            retokenized=retokenized,
            new_segment=plan.new_segment,
            server=server,
        )

    def _next_seed(self, session_id: str) -> int | None:
        """This turn's request seed (see ``SamplingParams.request_seed``); counts the turn."""
        turn = self._turns.get(session_id, 0)
        self._turns[session_id] = turn + 1
        return self.sampling.request_seed(session_id, turn)

    def _truncated(self, prompt_ids: list[int] | None, new_segment: bool, start: float, why: str) -> PolicyOutput:
        return PolicyOutput(
            text="",
            prompt_token_ids=list(prompt_ids) if prompt_ids is not None else None,
            token_ids=[],
            logprobs=[],
            finish_reason=FinishReason.PROMPT_TRUNCATION,
            llm_time=time.perf_counter() - start,
            new_segment=new_segment,
            error=why,
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
        """Forget the token state and server assignment of ``session_id``."""
        if self.builder is not None:
            self.builder.close(session_id)
        self._chat_history.pop(session_id, None)
        self._turns.pop(session_id, None)
        self.router.release(session_id)

    async def aclose(self) -> None:
        """Close the HTTP connections of the running event loop."""
        res = self._resources.pop(asyncio.get_running_loop(), None)
        if res is not None:
            await res.transport.aclose()

    async def _aclose_resources(self) -> None:
        await self.aclose()


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
