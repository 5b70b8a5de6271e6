"""The HTTP client under :class:`~agent_gym.policy.VLLMPolicy`: routing, retries, failover, health.

:class:`VLLMClient` knows servers, not conversations. It keeps one connection pool and
concurrency limit per event loop, sends each request of a session to the session's server
(:class:`~agent_gym.policy.routing.SessionRouter`), marks a failing server unhealthy and
retries on another with exponential backoff (connection errors, timeouts, HTTP 5xx and
429), does not retry other 4xx, and looks up each server's model name and context length
in ``/v1/models``. An over-long prompt (vLLM's "maximum context length" 400) raises
:class:`~agent_gym.policy.vllm_protocol.PromptTooLong` for the caller to turn into a status.
It also speaks vLLM's RL control routes (dev mode): :meth:`~VLLMClient.pause`,
:meth:`~VLLMClient.resume`, :meth:`~VLLMClient.is_paused`, :meth:`~VLLMClient.reload_weights`,
:meth:`~VLLMClient.set_weight_version` and :meth:`~VLLMClient.weight_version`.

Pools release themselves quietly: one whose event loop was closed or collected without
:meth:`VLLMClient.aclose` is discarded without aiohttp's "Unclosed client session"
warnings, and one whose loop still runs (a policy's private loop) is closed at exit.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agent_gym.errors import (
    PromptTooLong,
    ServerError,
    StreamErrorEvent,
    StreamInterrupted,
    TransportFailure,
    TransportTimeout,
)
from agent_gym.policy.client_options import ClientOptions
from agent_gym.policy.http_transport import HttpTransport
from agent_gym.policy.routing import SessionRouter, normalize_address
from agent_gym.policy.vllm_protocol import error_text, is_context_error

__all__ = ["LoopResources", "VLLMClient"]

# Seconds the exit handler waits for a still-running loop to close its pool.
_EXIT_CLOSE_TIMEOUT_S = 2.0


@dataclass
class LoopResources:
    """The HTTP connection pool and concurrency limit bound to one event loop."""

    transport: HttpTransport
    semaphore: asyncio.Semaphore
    finalizer: weakref.finalize | None = None


def _release_pool(loop_ref: weakref.ref, transport: HttpTransport) -> None:
    """Close ``transport`` without warnings: on its loop if that still runs elsewhere, else at once."""
    if transport.closed:
        return
    loop = loop_ref()
    if loop is not None and loop.is_running() and not loop.is_closed() and not _runs_here(loop):
        try:
            asyncio.run_coroutine_threadsafe(transport.aclose(), loop).result(timeout=_EXIT_CLOSE_TIMEOUT_S)
            return
        except Exception:  # noqa: BLE001 - fall back to discarding the pool
            pass
    transport.discard()


def _runs_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _routing_headers(session_id: str | None) -> dict[str, str]:
    """The headers that keep a session on one server behind vllm-router or the SGLang gateway."""
    return {"x-session-id": session_id, "X-SMG-Routing-Key": session_id} if session_id else {}


class _Attempts:
    """The retry step of one request: the server of each attempt, the wait between them, the final error.

    ``async for target in attempts`` yields the server to try, at most ``max_retries + 1`` times;
    :meth:`failed` records why an attempt failed (the server is then avoided by this request and by
    new picks, unless the request is pinned to it), and the next iteration first waits an
    exponential backoff with jitter (at least a 429's ``Retry-After``, at most ``max_backoff``).
    The whole request, waits and ``/v1/models`` lookups included, gets ``timeout x (max_retries + 1)``
    seconds: an attempt gets what is left of that (:meth:`remaining`, at most ``timeout``), and no
    attempt starts once it is spent.
    """

    def __init__(self, client: VLLMClient, session_id: str | None, path: str, server: str | None) -> None:
        self.client = client
        self.session_id = session_id or ""
        self.path = path
        self.server = server
        self.tried: list[str] = []
        self.errors: list[str] = []
        self.status: int | None = None
        self.retry_after: float | None = None
        options = client.options
        self.deadline = time.monotonic() + options.timeout * (options.max_retries + 1)

    def remaining(self) -> float | None:
        """Seconds for the next attempt when the request's time left is below ``timeout`` (else None)."""
        left = self.deadline - time.monotonic()
        return max(left, 0.001) if left < self.client.options.timeout else None

    def __aiter__(self) -> _Attempts:
        return self

    async def __anext__(self) -> str:
        options = self.client.options
        attempt = len(self.errors)
        if attempt > options.max_retries:
            raise StopAsyncIteration
        if attempt:
            delay = min(options.max_backoff, options.backoff * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            if self.retry_after is not None:
                delay = max(delay, min(self.retry_after, options.max_backoff))
            if time.monotonic() + delay >= self.deadline:
                self.errors.append(f"no time left for another attempt (the request's bound is "
                                   f"timeout x (max_retries + 1) = {options.timeout * (options.max_retries + 1):g}s)")
                raise StopAsyncIteration
            await asyncio.sleep(delay)
        return self.server or self.client.router.pick(self.session_id, exclude=self.tried)

    def failed(self, target: str, error: str, status: int | None = None, retry_after: float | None = None) -> None:
        """Record a failed attempt on ``target`` (``status``: the HTTP status, None without an answer)."""
        self.errors.append(f"{target}: {error}")
        self.status, self.retry_after = status, retry_after
        if self.server is None:
            self.client.router.mark_unhealthy(target)
            self.tried.append(target)

    def exhausted(self) -> ServerError:
        """The error raised when every attempt failed."""
        tried = sorted(set(self.tried) or {self.server or ""})
        return ServerError(
            f"POST {self.path} failed after {len(self.errors)} attempt(s) on {', '.join(tried)}: "
            + "; ".join(self.errors),
            server=", ".join(tried),
            status=self.status,
        )


class VLLMClient:
    """Requests to a set of vLLM-compatible servers with session affinity, retries and failover.

    Args:
        server_addresses: ``"IP:PORT"`` strings or URLs (duplicates are merged).
        options: :class:`~agent_gym.policy.client_options.ClientOptions` (or a dict of them):
            concurrency, timeouts, retries, backoff, how long a failed server is avoided, API key.

    The client pickles as its addresses and options (pools and session assignments are not
    carried over).

    Raises:
        ValueError: No address, or a malformed one; an option out of range (``ConfigError``).
        TypeError: An option of the wrong type.

    Example:
        >>> client = VLLMClient(["127.0.0.1:8000"], ClientOptions(max_retries=1))
        >>> client.options.max_retries
        1
    """

    def __init__(
        self, server_addresses: Sequence[str] | str, options: ClientOptions | Mapping[str, Any] | None = None
    ) -> None:
        if isinstance(server_addresses, str):
            server_addresses = [server_addresses]
        names: dict[str, str] = {}
        for address in server_addresses:
            name, base = normalize_address(address)
            names.setdefault(name, base)
        if not names:
            raise ValueError("server_addresses: expected at least one 'IP:PORT' address, got none")
        self._bases = names
        self.options = ClientOptions.coerce(options)
        self.router = SessionRouter(list(names), unhealthy_seconds=self.options.unhealthy_seconds)
        self._resources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopResources] = (
            weakref.WeakKeyDictionary()
        )
        self._resources_lock = threading.Lock()
        self._server_info: dict[str, dict[str, Any]] = {}
        # server -> (failed /v1/models lookups in a row, monotonic time before which not to retry)
        self._info_failures: dict[str, tuple[int, float]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (list(self._bases.values()), self.options)

    @property
    def server_addresses(self) -> list[str]:
        """The servers as ``"IP:PORT"`` strings, in the order given."""
        return list(self._bases)

    def url(self, server: str, path: str) -> str:
        """The absolute URL of ``path`` on ``server``."""
        return f"{self._bases[server]}{path}"

    # ------------------------------------------------------------------ pools
    def loop_resources(self) -> LoopResources:
        """The connection pool and concurrency limit of the running event loop (created on first use)."""
        loop = asyncio.get_running_loop()
        res = self._resources.get(loop)
        if res is None:
            with self._resources_lock:
                res = self._resources.get(loop)
                if res is None:
                    res = self._new_resources(loop)
                    self._resources[loop] = res
        return res

    def _new_resources(self, loop: asyncio.AbstractEventLoop) -> LoopResources:
        # As at most `concurrency` requests are in flight, the few extra connections
        # serve the /v1/models lookups made outside the limit.
        headers = {"Authorization": f"Bearer {self.options.api_key}"} if self.options.api_key else None
        transport = HttpTransport(
            max_connections=self.options.concurrency + 8,
            timeout=self.options.timeout,
            connect_timeout=self.options.connect_timeout,
            headers=headers,
        )
        # Released when the loop is collected (a closed asyncio.run loop) or at exit (a loop still
        # running in its thread), whichever comes first, unless aclose() released it before.
        finalizer = weakref.finalize(loop, _release_pool, weakref.ref(loop), transport)
        return LoopResources(transport, asyncio.Semaphore(self.options.concurrency), finalizer)

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop."""
        with self._resources_lock:
            res = self._resources.pop(asyncio.get_running_loop(), None)
        if res is not None:
            if res.finalizer is not None:
                res.finalizer.detach()
            await res.transport.aclose()

    # ------------------------------------------------------------------ /v1/models
    async def server_info(self, server: str) -> dict[str, Any]:
        """``{"model", "max_model_len"}`` of ``server`` from ``/v1/models``; {} while unknown.

        Only a successful answer (HTTP 200 listing at least one model) is cached. A failed
        lookup (a server still loading answers 503; a connection error) is retried on a later
        call, no sooner than a backoff that doubles per failure (``backoff`` up to
        ``max_backoff``), so a dead server is not asked on every request.
        """
        info = self._server_info.get(server)
        if info is not None:
            return info
        failures, retry_at = self._info_failures.get(server, (0, 0.0))
        if time.monotonic() < retry_at:
            return {}
        try:
            resp = await self.loop_resources().transport.get(
                self.url(server, "/v1/models"), timeout=min(self.options.timeout, 10.0)
            )
            data = resp.json() if resp.status == 200 else None
        except (TransportTimeout, TransportFailure, ValueError):
            data = None
        models = data.get("data") if isinstance(data, dict) else None
        first = models[0] if isinstance(models, list) and models else None
        if not isinstance(first, dict):
            delay = min(self.options.max_backoff, self.options.backoff * 2**failures)
            self._info_failures[server] = (failures + 1, time.monotonic() + delay)
            return {}
        info = {"model": first.get("id"), "max_model_len": first.get("max_model_len")}
        self._server_info[server] = info
        self._info_failures.pop(server, None)
        return info

    # ------------------------------------------------------------------ RL control routes
    def control_url(self, server: str, path: str) -> str:
        """The URL of ``path`` on ``server``: one of the client's (its base URL) or any other address."""
        name, base = normalize_address(server)
        return f"{self._bases.get(name, base)}{path}"

    async def control(self, method: str, server: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, timeout: float | None = None) -> Any:
        """One call to a server's RL control route (no retry, no failover, outside the concurrency limit).

        Args:
            method: ``"GET"`` or ``"POST"``.
            server: ``"IP:PORT"`` or a URL (need not be one of the client's servers).
            path: The route, e.g. ``"/pause"``.
            params: Query parameters.
            body: A JSON body (None: no body).
            timeout: Seconds for the call (default: the client's ``timeout``).

        Returns:
            The answer's JSON (None when it is not JSON).

        Raises:
            ServerError: The server could not be reached, answered an HTTP error (404: vLLM serves
                these routes only with ``VLLM_SERVER_DEV_MODE=1``, and the message says so).
        """
        url = self.control_url(server, path)
        try:
            reply = await self.loop_resources().transport.request(method, url, params=params, body=body,
                                                                  timeout=timeout)
        except (TransportTimeout, TransportFailure) as exc:
            raise ServerError(f"{method} {url}: {exc}", server=server) from exc
        if reply.status == 404:
            raise ServerError(f"{method} {url}: HTTP 404: the server has no such route; vLLM serves its RL routes "
                              "(pause, resume, weight updates) only with VLLM_SERVER_DEV_MODE=1",
                              server=server, status=404)
        if reply.status >= 400:
            raise ServerError(f"{method} {url}: HTTP {reply.status} {reply.text[:300]}", server=server,
                              status=reply.status)
        try:
            return reply.json()
        except ValueError:
            return None

    async def pause(self, server: str, mode: str = "abort", *, timeout: float | None = None) -> None:
        """``POST /pause?mode=...`` (``abort``, ``wait`` or ``keep``): stop ``server`` generating."""
        await self.control("POST", server, "/pause", params={"mode": mode}, timeout=timeout)

    async def resume(self, server: str, *, timeout: float | None = None) -> None:
        """``POST /resume``: let ``server`` generate again."""
        await self.control("POST", server, "/resume", timeout=timeout)

    async def is_paused(self, server: str, *, timeout: float | None = None) -> bool:
        """``GET /is_paused``: whether ``server`` is paused."""
        return bool(self._json_object(await self.control("GET", server, "/is_paused", timeout=timeout),
                                      server, "/is_paused").get("is_paused"))

    async def reload_weights(self, server: str, weights_path: str, *, timeout: float | None = None) -> None:
        """``POST /collective_rpc``, method ``reload_weights``: ``server`` loads the checkpoint ``weights_path``."""
        await self.control("POST", server, "/collective_rpc", timeout=timeout,
                           body={"method": "reload_weights", "kwargs": {"weights_path": weights_path}})

    async def set_weight_version(self, server: str, version: int | str, *, timeout: float | None = None) -> None:
        """``POST /update_weight_version``: label ``server``'s weights with ``version`` (sent as a string)."""
        await self.control("POST", server, "/update_weight_version", body={"new_version": str(version)},
                           timeout=timeout)

    async def weight_version(self, server: str, *, timeout: float | None = None) -> Any:
        """``GET /weight_info``: the label of ``server``'s weights (None when it reports none)."""
        return self._json_object(await self.control("GET", server, "/weight_info", timeout=timeout),
                                 server, "/weight_info").get("weight_version")

    def _json_object(self, data: Any, server: str, path: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ServerError(f"GET {self.control_url(server, path)}: expected a JSON object, got {str(data)[:200]}",
                              server=server, status=200)
        return data

    # ------------------------------------------------------------------ requests
    async def post(
        self,
        session_id: str | None,
        path: str,
        make_body: Callable[[str], Awaitable[dict[str, Any]]],
        *,
        server: str | None = None,
        required_key: str = "choices",
    ) -> tuple[dict[str, Any], str]:
        """POST with retries and failover; return ``(response JSON, server)``.

        Args:
            session_id: Session for routing and the routing headers (None with a fixed ``server``).
            path: Endpoint path.
            make_body: Builds the body for the chosen server (may raise ``PromptTooLong``).
            server: Use only this server (no failover).
            required_key: A key a successful answer must hold with a non-empty value
                (``choices`` must be a list).

        Raises:
            PromptTooLong: The server reported an over-long prompt.
            ServerError: A non-retryable error, malformed JSON, or every attempt failed.
        """
        res = self.loop_resources()
        headers = _routing_headers(session_id)
        attempts = _Attempts(self, session_id, path, server)
        async for target in attempts:
            body = await make_body(target)
            try:
                async with res.semaphore:
                    self.router.begin(target)
                    try:
                        resp = await res.transport.post_json(self.url(target, path), body, headers=headers,
                                                             timeout=attempts.remaining())
                    finally:
                        self.router.end(target)
            except (TransportTimeout, TransportFailure) as exc:
                attempts.failed(target, self._transport_error(exc))
                continue
            if resp.status == 200:
                return self._parse_ok(resp, target, path, required_key), target
            error, retry_after = self._rejection(resp, target, path)
            attempts.failed(target, error, resp.status, retry_after)
        raise attempts.exhausted()

    def _transport_error(self, exc: Exception) -> str:
        """The words for a request that got no answer."""
        if isinstance(exc, TransportTimeout):
            return f"no response within {self.options.timeout:g}s (timeout)"
        return f"connection failed ({exc})"

    @staticmethod
    def _parse_ok(resp: Any, target: str, path: str, required_key: str = "choices") -> dict[str, Any]:
        """The JSON of a 200 answer, which must hold a non-empty ``required_key`` (``choices``: a list)."""
        try:
            data = resp.json()
        except ValueError as exc:
            raise ServerError(
                f"server {target} returned malformed JSON for POST {path}: {exc}; "
                f"body starts with {resp.text[:120]!r}",
                server=target,
                status=200,
            ) from None
        value = data.get(required_key) if isinstance(data, dict) else None
        if not value or (required_key == "choices" and not isinstance(value, list)):
            raise ServerError(
                f"server {target} returned an unexpected JSON body for POST {path}: {str(data)[:200]}",
                server=target,
                status=200,
            )
        return data

    def _rejection(self, resp: Any, target: str, path: str) -> tuple[str, float | None]:
        """Return ``(error, Retry-After seconds)`` of a retryable non-200 answer; raise for the others.

        Raises:
            PromptTooLong: The server reported an over-long prompt.
            ServerError: A 4xx other than 429.
        """
        message = error_text(resp)
        if resp.status == 400 and is_context_error(message):
            raise PromptTooLong(message)
        if resp.status != 429 and resp.status < 500:
            raise ServerError(
                f"server {target} rejected POST {path} with HTTP {resp.status}: {message}",
                server=target,
                status=resp.status,
            )
        retry_after = None
        if resp.status == 429:
            try:
                retry_after = float(resp.headers.get("retry-after", ""))
            except ValueError:
                retry_after = None
        return f"HTTP {resp.status}: {message[:200]}", retry_after

    async def post_stream(
        self,
        session_id: str | None,
        path: str,
        make_body: Callable[[str], Awaitable[dict[str, Any]]],
    ) -> AsyncIterator[tuple[dict[str, Any], str]]:
        """POST a streamed request; yield ``(chunk JSON, server)`` for each event as it arrives.

        Routing, retries and failover are those of :meth:`post`, but only until the first chunk
        has arrived: a request that fails before is retried elsewhere; once a chunk was yielded,
        a failure raises :class:`StreamInterrupted` (what was handed on cannot be taken back).

        Raises:
            PromptTooLong: The server reported an over-long prompt.
            StreamInterrupted: The stream broke after its first chunk.
            ServerError: A non-retryable error, a malformed chunk, or every attempt failed.
        """
        res = self.loop_resources()
        headers = _routing_headers(session_id)
        attempts = _Attempts(self, session_id, path, None)
        async for target in attempts:
            body = await make_body(target)
            started = False
            try:
                async with res.semaphore:
                    self.router.begin(target)
                    try:
                        async with res.transport.post_sse(self.url(target, path), body, headers=headers) as reply:
                            if reply.reply is None:
                                async for payload in reply.events():
                                    chunk = self._parse_chunk(payload, target, path, started)
                                    started = True
                                    yield chunk, target
                                return
                            if reply.status == 200:
                                raise ServerError(
                                    f"server {target} answered a streamed POST {path} without an event "
                                    f"stream: {reply.reply.text[:120]!r}", server=target, status=200)
                            status = reply.status
                            error, retry_after = self._rejection(reply.reply, target, path)
                    finally:
                        self.router.end(target)
            except (TransportTimeout, TransportFailure) as exc:
                if started:
                    broke = "stalled past the timeout" if isinstance(exc, TransportTimeout) else f"broke: {exc}"
                    raise StreamInterrupted(f"the stream from {target} {broke}", server=target,
                                            status=200) from None
                error, status, retry_after = self._transport_error(exc), None, None
            except StreamErrorEvent as exc:
                error, status, retry_after = str(exc), 200, None
            attempts.failed(target, error, status, retry_after)
        raise attempts.exhausted()

    @staticmethod
    def _parse_chunk(payload: bytes, target: str, path: str, started: bool) -> dict[str, Any]:
        """One event's JSON; an error event raises (retryable before the first chunk)."""
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ServerError(f"server {target} sent a malformed chunk for POST {path}: {exc}; "
                              f"it starts with {payload[:120]!r}", server=target, status=200) from None
        if not isinstance(data, dict):
            raise ServerError(f"server {target} sent an unexpected chunk for POST {path}: {str(data)[:200]}",
                              server=target, status=200)
        if "error" in data:
            err = data["error"]
            message = str(err.get("message") if isinstance(err, dict) else err)
            if started:
                raise StreamInterrupted(f"server {target} reported an error mid-stream: {message}", server=target,
                                        status=200)
            raise StreamErrorEvent(f"error event: {message[:200]}")
        return data

    def release(self, session_id: str) -> None:
        """Forget the server assignment of ``session_id``."""
        self.router.release(session_id)
