"""One client connection to an MCP server, held open by a task of an asyncio event loop.

:class:`ServerSpec` says how to reach a server: a command run as a subprocess speaking stdio, or
the URL of a streamable HTTP endpoint. :class:`MCPConnection` opens it (transport, then an MCP
``ClientSession`` and its ``initialize`` handshake), lists tools, calls them and closes it. The
SDK's transports and sessions are async context managers whose cancel scopes must be entered and
left by the same task, so every connection lives in a task of its own that holds them open until
:meth:`MCPConnection.close`; requests are sent from any other task of the same loop.

Failures are sorted into three kinds: the connection is gone (:class:`ConnectionLost`: a
server process that exited, a closed stream), a transport hiccup the request may be retried
after (:class:`TransportDrop`: a refused or reset HTTP request on a live connection), and an
error the server answered with (:class:`ServerReplyError`, e.g. invalid parameters), which is
the call's own failure.

Works with the ``mcp`` SDK 1.x and 2.x: only the names both export are used (``ClientSession``,
``StdioServerParameters``, ``stdio_client``, ``streamable_http_client``), results are read as their
JSON wire form (camelCase fields in both), and the module imports nothing from agent_gym, so a
test can load it from its file under an interpreter with mcp 1.x.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONNECTION_CLOSED",
    "REQUEST_TIMEOUT",
    "ConnectionLost",
    "MCPConnection",
    "MCPConnectionError",
    "ServerReplyError",
    "ServerSpec",
    "Transport",
    "TransportDrop",
    "default_transport",
    "wire",
]

CONNECTION_CLOSED = -32000
"""JSON-RPC error code the SDK gives requests whose connection closed."""

REQUEST_TIMEOUT = -32001
"""JSON-RPC error code of a request that timed out."""


Transport = Callable[["ServerSpec", Any], Any]
"""Makes a connection's transport (an async context manager yielding the read and write streams) from
``(spec, errlog)``."""


class MCPConnectionError(Exception):
    """A request to an MCP server failed (base class)."""


class ConnectionLost(MCPConnectionError):
    """The connection is gone: the server exited, its stream closed, or the session expired."""


class TransportDrop(MCPConnectionError):
    """A request failed in transit on a connection that may still be alive (it may be retried)."""


class ServerReplyError(MCPConnectionError):
    """The server answered a request with a JSON-RPC error (the request's own failure).

    Attributes:
        code: The JSON-RPC error code.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ServerSpec:
    """How to reach an MCP server: a stdio command or a streamable HTTP URL (exactly one).

    Attributes:
        command: The program and its arguments; the server speaks MCP on its stdin/stdout.
        url: The streamable HTTP endpoint, e.g. ``http://127.0.0.1:8765/mcp``.
        env: Environment variables of the command (merged over the SDK's safe defaults).
        cwd: Working directory of the command.
        headers: HTTP headers of every request to ``url`` (e.g. an ``Authorization``).
        startup_timeout: Seconds to start the server and finish the ``initialize`` handshake.
        stderr: Where a command's stderr goes: ``"inherit"`` (this process's) or ``"discard"``.
        fork_server: Start a Python stdio server's processes by forking a preloaded one (see
            :mod:`agent_gym.tools.mcp.fork_server`); the command must be ``python [options] script.py ...``
            or ``python [options] -m module ...``.
        preload: Modules the fork server imports once before forking (besides the ``mcp`` SDK and the
            server's own code), e.g. a heavy library the server imports inside a function.
    """

    command: tuple[str, ...] | None = None
    url: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    startup_timeout: float = 60.0
    stderr: str = "discard"
    fork_server: bool = False
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("expected exactly one of command= (a stdio server) and url= (a streamable HTTP server)")
        if self.command is not None:
            if isinstance(self.command, str) or not self.command or not all(isinstance(p, str) for p in self.command):
                raise TypeError(f"command: expected a non-empty sequence of str, got {self.command!r}")
            object.__setattr__(self, "command", tuple(self.command))
        if self.url is not None and not (isinstance(self.url, str) and self.url.startswith(("http://", "https://"))):
            raise ValueError(f"url: expected an http:// or https:// address, got {self.url!r}")
        if self.stderr not in ("inherit", "discard"):
            raise ValueError(f"stderr: expected 'inherit' or 'discard', got {self.stderr!r}")
        if not self.startup_timeout > 0:
            raise ValueError(f"startup_timeout: expected seconds > 0, got {self.startup_timeout!r}")
        if not isinstance(self.fork_server, bool):
            raise TypeError(f"fork_server: expected a bool, got {self.fork_server!r}")
        if self.fork_server and self.command is None:
            raise ValueError("fork_server: only for a stdio command (a Python server), not a URL")
        if isinstance(self.preload, str) or not all(isinstance(m, str) and m for m in self.preload):
            raise TypeError(f"preload: expected a sequence of module names, got {self.preload!r}")
        object.__setattr__(self, "preload", tuple(self.preload))

    @classmethod
    def make(cls, command: Sequence[str] | None = None, url: str | None = None, *,
             env: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None, **options: Any
             ) -> ServerSpec:
        """A spec from plain arguments (mappings become sorted tuples, so that specs hash)."""
        if not isinstance(options.get("preload", ""), str):
            options["preload"] = tuple(options["preload"])
        return cls(command=None if command is None else tuple(command), url=url,
                   env=tuple(sorted((env or {}).items())), headers=tuple(sorted((headers or {}).items())), **options)

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """The server in a few words, for error messages."""
        if self.command is not None:
            return "MCP server `" + " ".join(self.command)[:120] + "`"
        return f"MCP server {self.url}"


def wire(model: Any) -> dict[str, Any]:
    """A result model of the SDK as its JSON wire form (camelCase keys under 1.x and 2.x)."""
    if isinstance(model, dict):
        return model
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _error_code(exc: BaseException) -> int | None:
    """The JSON-RPC code of an SDK error (``MCPError`` in 2.x, ``McpError`` in 1.x), else None."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def default_transport(spec: ServerSpec, errlog: Any) -> Any:
    """The SDK's transport context manager for ``spec`` (yields the read and write streams first).

    Args:
        spec: The server: a stdio command is started as a subprocess, a URL is reached over streamable HTTP.
        errlog: The file a stdio server's stderr goes to.
    """
    if spec.command is not None:
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]),
                                       env=dict(spec.env) or None, cwd=spec.cwd)
        return stdio_client(params, errlog=errlog)
    from mcp.client.streamable_http import streamable_http_client

    assert spec.url is not None
    if not spec.headers:
        return streamable_http_client(spec.url)
    return _http_with_headers(spec)


@contextlib.asynccontextmanager
async def _http_with_headers(spec: ServerSpec) -> Any:
    """``streamable_http_client`` over an HTTP client that sends ``spec.headers`` (httpx2 in 2.x, httpx in 1.x)."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert spec.url is not None
    async with create_mcp_http_client(headers=dict(spec.headers)) as client:
        async with streamable_http_client(spec.url, http_client=client) as streams:
            yield streams


class MCPConnection:
    """A connected, initialised MCP client session, held open by its own task (see the module docs).

    Create it with :meth:`open` on the loop that will use it; every method must run on that loop.

    Attributes:
        spec: The server.
        server_name: ``serverInfo.name`` from the handshake.
        server_version: ``serverInfo.version`` from the handshake.
        protocol_version: The protocol version the server chose.
    """

    def __init__(self, spec: ServerSpec, transport: Transport | None = None) -> None:
        self.spec = spec
        self._transport = transport or default_transport
        self.server_name = ""
        self.server_version = ""
        self.protocol_version = ""
        self._session: Any = None
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lost: str | None = None
        self._errlog: Any = None

    # ------------------------------------------------------------------ life cycle

    @classmethod
    async def open(cls, spec: ServerSpec, transport: Transport | None = None) -> MCPConnection:
        """Start (or reach) the server and finish the handshake within ``spec.startup_timeout``.

        Args:
            spec: The server.
            transport: Makes the connection's transport from ``(spec, errlog)`` (default:
                :func:`default_transport`; a fork server's children for a ``fork_server`` spec).

        Raises:
            ConnectionLost: When the server cannot be started or reached, or the handshake fails.
        """
        connection = cls(spec, transport)
        connection._ready = asyncio.get_running_loop().create_future()
        # read the outcome even when open() is cancelled (a closing pool), so that no error goes unretrieved
        connection._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        connection._task = asyncio.create_task(connection._hold(), name=f"mcp-connection {spec.describe()}")
        try:
            await asyncio.wait_for(asyncio.shield(connection._ready), spec.startup_timeout)
        except BaseException as exc:
            await connection.close()
            if isinstance(exc, asyncio.TimeoutError):
                raise ConnectionLost(f"{spec.describe()}: no handshake within {spec.startup_timeout:g} s") from None
            if isinstance(exc, ConnectionLost):
                raise
            if isinstance(exc, Exception):
                raise ConnectionLost(f"{spec.describe()}: could not connect ({type(exc).__name__}: {exc})") from exc
            raise
        return connection

    async def _hold(self) -> None:
        """The connection's task: enter the transport and the session, initialise, wait for close."""
        from mcp import ClientSession

        assert self._ready is not None
        try:
            self._errlog = open(os.devnull, "w") if self.spec.stderr == "discard" else sys.stderr  # noqa: SIM115
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport(self.spec, self._errlog))
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                result = wire(await session.initialize())
                info = result.get("serverInfo") or {}
                self.server_name = str(info.get("name", ""))
                self.server_version = str(info.get("version", ""))
                self.protocol_version = str(result.get("protocolVersion", ""))
                self._session = session
                if not self._ready.done():
                    self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to open() or recorded as the loss
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else ConnectionLost(repr(exc)))
            elif self._lost is None:
                self._lost = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None
            if self._lost is None and not self._stop.is_set():
                self._lost = "the connection closed"
            if self._errlog is not None and self._errlog is not sys.stderr:
                self._errlog.close()

    async def close(self) -> None:
        """Close the session and the transport (a stdio server is stopped); safe twice."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 10.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a server that will not stop is killed
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    @property
    def alive(self) -> bool:
        """True while the connection is open and nothing said it was lost."""
        return self._session is not None and self._lost is None and not self._stop.is_set()

    @property
    def loss(self) -> str | None:
        """Why the connection was lost (None while it is alive or after a :meth:`close`)."""
        return self._lost

    def mark_lost(self, reason: str) -> None:
        """Record that the connection is unusable (the first reason stays)."""
        if self._lost is None:
            self._lost = reason

    # ------------------------------------------------------------------ requests

    async def _request(self, what: str, coro_fn: Any, timeout: float | None) -> Any:
        if not self.alive:
            raise ConnectionLost(f"{self.spec.describe()}: {what} on a lost connection ({self._lost or 'closed'})")
        try:
            if timeout is None:
                return await coro_fn()
            return await asyncio.wait_for(coro_fn(), timeout)
        except asyncio.TimeoutError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted into the three kinds
            code = _error_code(exc)
            if code == REQUEST_TIMEOUT:
                raise asyncio.TimeoutError() from exc
            if code is not None and code != CONNECTION_CLOSED:
                raise ServerReplyError(code, str(getattr(exc.error, "message", exc))) from exc  # type: ignore[attr-defined]
            if code == CONNECTION_CLOSED or self._task is None or self._task.done() or self._session is None:
                self.mark_lost(f"{what}: connection closed")
                raise ConnectionLost(f"{self.spec.describe()}: connection closed during {what}") from exc
            raise TransportDrop(f"{self.spec.describe()}: {what} failed in transit ({type(exc).__name__}: {exc})"
                                ) from exc

    async def list_tools(self, timeout: float | None = 60.0) -> list[dict[str, Any]]:
        """Every tool the server offers, as wire dicts (``name``, ``description``, ``inputSchema``, ...)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = wire(await self._request("tools/list", lambda c=cursor: self._list_page(c), timeout))
            tools.extend(page.get("tools") or [])
            cursor = page.get("nextCursor")
            if not cursor:
                return tools

    async def _list_page(self, cursor: str | None) -> Any:
        if cursor is None:
            return await self._session.list_tools()
        try:
            from mcp.types import PaginatedRequestParams

            return await self._session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        except TypeError:  # older 1.x: list_tools(cursor)
            return await self._session.list_tools(cursor)

    async def call_tool(self, name: str, arguments: Mapping[str, Any], timeout: float | None) -> dict[str, Any]:
        """Call a tool; returns the ``CallToolResult`` wire dict (``content``, ``structuredContent``, ``isError``).

        Raises:
            asyncio.TimeoutError: No answer within ``timeout`` seconds.
            ConnectionLost, TransportDrop, ServerReplyError: See the module docs.
        """
        return wire(await self._request(f"tools/call {name!r}", lambda: self._session.call_tool(name, dict(arguments)),
                                        timeout))

    async def ping(self, timeout: float = 10.0) -> None:
        """A ``ping`` round trip."""
        await self._request("ping", lambda: self._session.send_ping(), timeout)

