"""Pools of MCP server connections: a warm one per episode, or one shared by every episode.

``scope="episode"``: a :class:`ServerPool` keeps ``warm`` connections started and initialised
ahead of demand (for a stdio server, a process each; for an HTTP server, an MCP session each).
:meth:`ServerPool.acquire` hands one to a single episode as a :class:`Lease`; when the episode
ends, :meth:`Lease.release` closes that connection in the background (the process exits, the
HTTP session is deleted) and the pool starts a fresh one, so no state written by one episode is
ever seen by another, and an episode pays for no server start while the pool keeps up.

With ``spec.fork_server`` the pool's stdio connections are children forked from a preloaded
process of the server (:class:`~agent_gym.tools.mcp.fork_server.ForkServer`): a fresh process per
episode still, started in milliseconds instead of an interpreter start, so recycling keeps up with
many more episodes per second.

``scope="shared"``: one connection serves every episode, opened again when it is lost. State
written by one episode is visible to every other; use it only for stateless servers.

Calls go through :meth:`Lease.call`: a request that failed in transit is retried (``retries``
times, with a short backoff) on the same connection; a lost connection is replaced for a shared
lease, and raised as :class:`~agent_gym.tools.mcp.connection.ConnectionLost` for an episode's
(the episode's server state is gone with it). Tool lists are cached per server name and version:
a connection to a server version already listed costs no ``tools/list`` round trip.

Every method of :class:`ServerPool` and :class:`Lease` without ``async`` is called from sync code
on any thread; the work runs on the process's MCP loop (:func:`~agent_gym.tools.mcp.runtime.shared_loop`).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from agent_gym.tools.mcp.connection import ConnectionLost, MCPConnection, ServerSpec, TransportDrop
from agent_gym.tools.mcp.fork_server import ForkServer
from agent_gym.tools.mcp.runtime import LoopThread, shared_loop

__all__ = ["SCOPES", "Lease", "ServerPool", "server_pool", "shutdown_pools"]

logger = logging.getLogger(__name__)

SCOPES = ("episode", "shared")
"""The scopes of an MCP server's state: one server (session) per episode, or one for all."""

_RETRY_BACKOFF = (0.05, 0.2, 0.5, 1.0)


class ServerPool:
    """The connections of one server spec and scope (see the module docs).

    Args:
        spec: The server.
        scope: ``"episode"`` or ``"shared"``.
        warm: Connections kept started ahead of demand (``"episode"`` scope).
        max_starting: Connections opened at once (default: the number of CPUs for a stdio server, since starting
            a Python server takes a core for about a second; four times that with a fork server, whose starts
            mostly wait; 32 for an HTTP server, where opening a session waits on the network).
        loop: The loop the connections run on (default: the process's MCP loop).

    Raises:
        ValueError: For a bad scope or ``warm``, or a ``fork_server`` spec whose command is not a Python server's.

    Attributes:
        fork_server: The fork server of a ``fork_server`` spec (None otherwise).
    """

    def __init__(self, spec: ServerSpec, *, scope: str = "episode", warm: int = 4, max_starting: int | None = None,
                 loop: LoopThread | None = None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope: expected one of {SCOPES}, got {scope!r}")
        if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
            raise ValueError(f"warm: expected an int >= 0, got {warm!r}")
        self.spec = spec
        self.scope = scope
        self.warm = warm
        self.max_starting = max_starting or self._default_max_starting(spec)
        self.fork_server = ForkServer(spec) if spec.fork_server else None
        self.loop = loop or shared_loop()
        self.listings: dict[tuple[str, str], list[dict[str, Any]]] = {}
        """Tool lists by ``(server name, server version)``."""
        self.stats = collections.Counter[str]()
        """Counts: ``started``, ``start_failures``, ``acquired``, ``recycled``, ``retries``, ``reconnects``."""
        self._ready: collections.deque[MCPConnection] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[MCPConnection]] = collections.deque()
        self._starting = 0
        self._failures = 0  # consecutive start failures (they slow down further starts)
        self._shared: MCPConnection | None = None
        self._shared_lock: asyncio.Lock | None = None
        self._closed = False
        self._background: set[asyncio.Task[Any]] = set()

    @staticmethod
    def _default_max_starting(spec: ServerSpec) -> int:
        cores = max(2, os.cpu_count() or 2)
        if spec.command is None:
            return 32  # opening an HTTP session mostly waits on the network
        # a forked server's start is mostly waiting (fork, handshake round trips), ~0.1 s of CPU: overlap more
        return 4 * cores if spec.fork_server else cores

    # ------------------------------------------------------------------ sync API

    def acquire(self, timeout: float | None = None) -> Lease:
        """A lease on a connection for one episode (blocks until one is ready).

        Without ``timeout`` the caller waits its turn however many episodes wait before it: every
        start either succeeds or fails within ``spec.startup_timeout`` and a failure is handed to a
        waiter, so a waiter is never left waiting on a server that will not come.

        Raises:
            ConnectionLost: The server could not be started or reached.
            TimeoutError: No connection within ``timeout``.
        """
        connection = self.loop.run(self._acquire(), timeout)
        return Lease(self, connection)

    def prestart(self) -> None:
        """Start the warm connections now (without waiting for them)."""
        self.loop.submit(self._prestart())

    def tools(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The server's tools (wire dicts), listed once per server version."""
        lease = self.acquire(timeout)
        try:
            return lease.tools()
        finally:
            lease.release(reuse=True)

    def close(self) -> None:
        """Close every idle connection and refuse new leases (leases out close when released)."""
        if not self._closed:
            try:
                self.loop.run(self._close(), 30.0)
            except (TimeoutError, RuntimeError):
                logger.warning("%s: pool did not close within 30 s", self.spec.describe())

    @property
    def ready_count(self) -> int:
        """Connections started and waiting for an episode."""
        return len(self._ready)

    # ------------------------------------------------------------------ on the loop

    async def _prestart(self) -> None:
        self._refill()

    def _refill(self) -> None:
        """Start connections until the ready ones, those starting and those waited for reach the target."""
        if self._closed or self.scope != "episode":
            return
        target = self.warm + len(self._waiters)
        while len(self._ready) + self._starting < target and self._starting < self.max_starting:
            self._starting += 1
            self._spawn(self._start_one())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _start_one(self) -> None:
        try:
            if self._failures:
                await asyncio.sleep(min(5.0, 0.25 * 2 ** min(self._failures, 5)))
            connection = await self._open()
        except Exception as exc:  # noqa: BLE001 - a waiter gets it; the pool tries again later
            self._starting -= 1
            self._failures += 1
            self.stats["start_failures"] += 1
            if self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc)))
            if self._failures < 3 or self._waiters:
                self._refill()
            return
        self._starting -= 1
        self._failures = 0
        self.stats["started"] += 1
        if self._closed:
            await connection.close()
            return
        self._offer(connection)
        self._refill()

    async def _open(self) -> MCPConnection:
        transport = None if self.fork_server is None else self.fork_server.transport
        return await MCPConnection.open(self.spec, transport)

    def _offer(self, connection: MCPConnection) -> None:
        """Give a ready connection to the first waiter, or keep it ready."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._ready.append(connection)

    async def _acquire(self) -> MCPConnection:
        if self._closed:
            raise ConnectionLost(f"{self.spec.describe()}: the pool is closed")
        self.stats["acquired"] += 1
        if self.scope == "shared":
            return await self._shared_connection()
        while self._ready:
            connection = self._ready.popleft()
            if connection.alive:
                self._refill()
                return connection
            self._spawn(connection.close())
        waiter: asyncio.Future[MCPConnection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._refill()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._offer(waiter.result())  # handed over as the caller gave up: keep it for the next
            raise

    async def _shared_connection(self) -> MCPConnection:
        if self._shared_lock is None:
            self._shared_lock = asyncio.Lock()
        async with self._shared_lock:
            if self._shared is None or not self._shared.alive:
                if self._shared is not None:
                    self.stats["reconnects"] += 1
                    self._spawn(self._shared.close())
                self._shared = await self._open()
                self.stats["started"] += 1
            return self._shared

    async def _release(self, connection: MCPConnection, reuse: bool) -> None:
        if self.scope == "shared":
            return
        if reuse and connection.alive and not self._closed:
            self._offer(connection)  # never used by an episode (a tool listing): still clean
            return
        self.stats["recycled"] += 1
        self._spawn(connection.close())
        self._refill()

    async def _listing(self, connection: MCPConnection) -> list[dict[str, Any]]:
        key = (connection.server_name, connection.server_version)
        tools = self.listings.get(key)
        if tools is None:
            tools = await connection.list_tools()
            self.listings[key] = tools
        return tools

    async def _call(self, lease: Lease, name: str, arguments: Mapping[str, Any], timeout: float | None,
                    retries: int) -> dict[str, Any]:
        attempt = 0
        while True:
            connection = lease.connection
            if self.scope == "shared" and not connection.alive:
                connection = lease.connection = await self._shared_connection()
            try:
                return await connection.call_tool(name, arguments, timeout)
            except TransportDrop:
                if attempt >= retries:
                    raise
            except ConnectionLost:
                if self.scope != "shared" or attempt >= retries:
                    raise  # an episode's server state went with its connection
            self.stats["retries"] += 1
            await asyncio.sleep(_RETRY_BACKOFF[min(attempt, len(_RETRY_BACKOFF) - 1)])
            attempt += 1

    async def _close(self) -> None:
        self._closed = True
        closing = [c.close() for c in self._ready]
        self._ready.clear()
        if self._shared is not None:
            closing.append(self._shared.close())
            self._shared = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionLost(f"{self.spec.describe()}: the pool closed"))
        await asyncio.gather(*closing, return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        if self.fork_server is not None:
            await self.fork_server.aclose()  # after the releases of the connections just closed


class Lease:
    """One episode's hold on a connection of a :class:`ServerPool` (the shared one, for a shared pool).

    Attributes:
        pool: The pool.
        connection: The connection (replaced when a shared one is opened again).
        acquired_at: ``time.monotonic()`` when the lease was taken.
    """

    def __init__(self, pool: ServerPool, connection: MCPConnection) -> None:
        self.pool = pool
        self.connection = connection
        self.acquired_at = time.monotonic()
        self.released = False

    def tools(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The tools of this lease's server (cached per server version)."""
        return self.pool.loop.run(self.pool._listing(self.connection), timeout)

    def call(self, name: str, arguments: Mapping[str, Any], *, timeout: float | None, retries: int = 2
             ) -> dict[str, Any]:
        """Call a tool; returns the ``CallToolResult`` wire dict.

        Raises:
            TimeoutError: No answer within ``timeout`` seconds.
            ConnectionLost: The connection is gone (an episode's; a shared one is opened again first).
            TransportDrop: Every retry failed in transit.
            ServerReplyError: The server answered with a JSON-RPC error.
        """
        wait = None if timeout is None else timeout * (retries + 1) + 5.0
        try:
            return self.pool.loop.run(self.pool._call(self, name, arguments, timeout, retries), wait)
        except asyncio.TimeoutError as exc:
            raise TimeoutError(str(exc) or f"no answer within {timeout:g} s") from None

    def release(self, *, reuse: bool = False) -> None:
        """Give the connection back: closed and replaced (``reuse``: kept, for a lease no episode used); safe twice."""
        if self.released:
            return
        self.released = True
        try:
            self.pool.loop.run(self.pool._release(self.connection, reuse), 10.0)
        except (TimeoutError, RuntimeError):
            logger.warning("%s: a connection could not be released", self.pool.spec.describe())


_pools_lock = threading.Lock()
_pools: dict[tuple[int, ServerSpec, str], ServerPool] = {}


def server_pool(spec: ServerSpec, scope: str, *, warm: int = 4) -> ServerPool:
    """The process's pool for ``spec`` and ``scope`` (created on first use; ``warm`` only grows it)."""
    key = (os.getpid(), spec, scope)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool._closed:
            pool = _pools[key] = ServerPool(spec, scope=scope, warm=warm)
        elif warm > pool.warm:
            pool.warm = warm
        return pool


def shutdown_pools() -> None:
    """Close every pool of this process (their stdio servers stop)."""
    with _pools_lock:
        pools = [p for (pid, _, _), p in _pools.items() if pid == os.getpid()]
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(shutdown_pools)
