"""The pooled asynchronous HTTP client under :class:`~agent_gym.policy.VLLMPolicy`.

:class:`HttpTransport` wraps one ``aiohttp.ClientSession`` (a keep-alive connection pool
with a C HTTP parser) bound to the event loop it was created on. It exposes only what the
policy needs (a JSON ``POST``, a streamed JSON ``POST`` read as server-sent events, and a
``GET``), returns complete replies as :class:`HttpReply` and turns every transport failure
into :class:`TransportTimeout` or :class:`TransportFailure`, so the policy's retry logic does
not depend on the HTTP library.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from agent_gym.errors import TransportFailure, TransportTimeout

__all__ = [
    "HttpReply",
    "HttpTransport",
    "SseReply",
    "shared_ssl_context",
]

_JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass
class HttpReply:
    """A complete HTTP answer.

    Attributes:
        status: HTTP status code.
        body: The raw body.
        headers: Response headers (case-insensitive lookup).
    """

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """Parse the body as JSON.

        Raises:
            ValueError: The body is not valid JSON.
        """
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:  # NaN / Infinity (Python's json writes them) or invalid
            return json.loads(self.body)


class SseReply:
    """The answer to a streamed POST: its status, and its server-sent events when it is 200.

    Attributes:
        status: HTTP status code.
        headers: Response headers.
        reply: The complete answer when it is not a 200 event stream (an error body), else None.
    """

    def __init__(self, status: int, headers: Mapping[str, str], reply: HttpReply | None, resp: Any, url: str) -> None:
        self.status = status
        self.headers = headers
        self.reply = reply
        self._resp = resp
        self._url = url

    async def events(self) -> AsyncIterator[bytes]:
        """Yield the ``data`` payload of each event as it arrives, until ``data: [DONE]``.

        Raises:
            TransportTimeout: The stream stalled past the timeout.
            TransportFailure: The connection broke, or the stream ended without ``[DONE]``.
        """
        if self._resp is None:
            return
        data: list[bytes] = []
        try:
            async for raw in self._resp.content:
                line = raw.rstrip(b"\r\n")
                if line:
                    if line.startswith(b"data:"):
                        value = line[5:]
                        data.append(value[1:] if value.startswith(b" ") else value)
                    continue  # event:, id:, retry: and comments carry nothing the policy reads
                if data:
                    payload = b"\n".join(data)
                    data = []
                    if payload == b"[DONE]":
                        return
                    yield payload
        except asyncio.TimeoutError as exc:
            raise TransportTimeout(f"the stream from {self._url} stalled") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        if data and b"\n".join(data) == b"[DONE]":
            return
        raise TransportFailure(f"the stream from {self._url} ended before data: [DONE]")


@functools.lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """Return a default verifying SSL context, built once.

    Loading the CA bundle takes tens of milliseconds; every pool (one per event loop,
    i.e. per ``collect`` call) would otherwise load its own.
    """
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # the system's CA store
        return ssl.create_default_context()


def _dump_json(value: Any) -> bytes:
    """Serialize ``value`` compactly (orjson; the standard library for what orjson rejects, e.g. huge ints)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


class HttpTransport:
    """A keep-alive HTTP connection pool for one event loop.

    Create it inside the running loop that will use it; close it with :meth:`aclose`
    on that loop.

    Args:
        max_connections: Most open connections (per pool; requests beyond wait for one).
        timeout: Seconds allowed for a whole request, answer included.
        connect_timeout: Seconds allowed to open a connection.
        headers: Headers sent with every request (e.g. ``Authorization``).
    """

    def __init__(
        self,
        *,
        max_connections: int,
        timeout: float,
        connect_timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, ssl=shared_ssl_context(), keepalive_timeout=30.0
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout),
            headers=dict(headers or {}),
            trust_env=False,
            auto_decompress=True,
        )

    async def post_json(
        self, url: str, body: Any, *, headers: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> HttpReply:
        """POST ``body`` as JSON and return the complete reply.

        Args:
            url: Absolute URL.
            body: A JSON-serializable value.
            headers: Extra request headers.
            timeout: Seconds for this request (default: the pool's ``timeout``).

        Raises:
            TransportTimeout: No complete answer in time.
            TransportFailure: The connection failed or broke.
        """
        data = _dump_json(body)
        merged = {**_JSON_HEADERS, **headers} if headers else _JSON_HEADERS
        return await self._request("POST", url, data=data, headers=merged, timeout=timeout)

    @contextlib.asynccontextmanager
    async def post_sse(
        self, url: str, body: Any, *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[SseReply]:
        """POST ``body`` as JSON and read the answer as server-sent events while it arrives.

        Use as ``async with transport.post_sse(url, body) as reply:`` then ``async for data in
        reply.events():``. A non-200 answer (or one that is not ``text/event-stream``) is read
        whole into ``reply.reply``. The pool's ``timeout`` bounds the whole stream.

        Raises:
            TransportTimeout: No answer in time.
            TransportFailure: The connection failed or broke.
        """
        data = _dump_json(body)
        merged = {**_JSON_HEADERS, "Accept": "text/event-stream", **(headers or {})}
        try:
            async with self._session.post(url, data=data, headers=merged) as resp:
                kind = resp.headers.get("content-type", "")
                if resp.status != 200 or not kind.startswith("text/event-stream"):
                    payload = await resp.read()
                    yield SseReply(resp.status, resp.headers, HttpReply(resp.status, payload, resp.headers), None, url)
                else:
                    yield SseReply(resp.status, resp.headers, None, resp, url)
        except asyncio.TimeoutError as exc:
            raise TransportTimeout(f"no answer from {url} in time") from exc
        except aiohttp.ClientError as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    async def request(self, method: str, url: str, *, params: Mapping[str, str] | None = None, body: Any = None,
                      timeout: float | None = None) -> HttpReply:
        """Send ``method`` to ``url`` and return the complete reply (errors as in :meth:`post_json`).

        Args:
            method: The HTTP method.
            url: Absolute URL.
            params: Query parameters.
            body: A JSON-serializable body (None: no body).
            timeout: Seconds for this request (default: the pool's ``timeout``).
        """
        kwargs: dict[str, Any] = {}
        if params:
            kwargs["params"] = dict(params)
        if body is not None:
            kwargs["data"] = _dump_json(body)
            kwargs["headers"] = _JSON_HEADERS
        return await self._request(method, url, timeout=timeout, **kwargs)

    async def get(self, url: str, *, timeout: float | None = None) -> HttpReply:
        """GET ``url`` and return the complete reply (errors as in :meth:`post_json`)."""
        return await self._request("GET", url, timeout=timeout)

    async def _request(self, method: str, url: str, *, timeout: float | None = None, **kwargs: Any) -> HttpReply:
        if timeout is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, self.connect_timeout))
        try:
            async with self._session.request(method, url, **kwargs) as resp:
                payload = await resp.read()
                return HttpReply(resp.status, payload, resp.headers)
        except asyncio.TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
            raise TransportTimeout(f"no answer from {url} in time") from exc
        except aiohttp.ClientConnectorError as exc:  # named for what failed, not for the library
            raise TransportFailure(f"ConnectError: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._session.closed

    async def aclose(self) -> None:
        """Close every connection of the pool."""
        await self._session.close()

    def discard(self) -> None:
        """Mark the pool closed at once, without awaiting (for a pool whose event loop no longer runs).

        Open sockets are dropped where possible; errors are ignored. Nothing is logged, so a
        pool discarded this way does not print aiohttp's "Unclosed client session" lines.
        """
        if self._session.closed:
            return
        connector = self._session.connector
        try:
            if connector is not None:
                connector._close(abort_ssl=True)  # sync part of close(): marks it closed, drops sockets
        except Exception:  # noqa: BLE001, S110 - the loop is gone; what remains is freed with it
            pass
        self._session._connector = None  # the session now reports closed
