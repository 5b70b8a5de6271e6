"""Python stdio MCP servers started by forking a preloaded process: a fresh server per episode in milliseconds.

A :class:`ForkServer` runs the server's zygote (:mod:`agent_gym.tools.mcp.zygote`: one process of
the server's interpreter that imported the ``mcp`` SDK and the server's code once) and asks it for a
child per connection. The child is a new process serving one MCP session over a Unix socket, used
as its stdin and stdout, so it speaks the stdio transport's newline-delimited JSON-RPC;
:func:`socket_transport` is the client's side of that stream. Isolation is that of a server started
from scratch (a process of its own, its own memory); the start costs a ``fork`` and the server's
own set-up instead of an interpreter start and the SDK's imports.

Failures: a child that dies ends its connection like an exited stdio server (the session's
requests fail with "connection closed", so an episode's server loss is ``ENV_ERROR`` as before). A
zygote that died or stopped answering is killed and started again at the next request. A
connection whose child cannot be had starts its server the plain way (an interpreter start, as
without a fork server); after ``max_start_failures`` failed zygote starts in a row the fork server
gives up and every later connection does so (:attr:`ForkServer.fallback_reason` says why). Children
outlive a zygote that died (each serves its client until the client lets go).

Talking to the zygote blocks (``fork``, ``SCM_RIGHTS``): it runs on one worker thread per fork
server, which also keeps the requests in order (a child is released before the zygote is told to
quit).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from agent_gym.tools.mcp.connection import ConnectionLost, ServerSpec, default_transport
from agent_gym.tools.mcp.zygote import RELEASE_GRACE_S, PythonCommand, split_python_command

__all__ = ["ForkServer", "ForkServerError", "ZYGOTE_PATH", "socket_transport"]

logger = logging.getLogger(__name__)

ZYGOTE_PATH = str(Path(__file__).resolve().with_name("zygote.py"))
"""The zygote's file, run as a script by the server's interpreter (it imports only the standard library)."""

_FORK_REPLY_TIMEOUT_S = 30.0
_READ_CHUNK = 1 << 16


class ForkServerError(Exception):
    """The zygote could not be started, or could not fork a child."""


# ---------------------------------------------------------------------- the transport


def _jsonrpc_parser() -> Callable[[bytes], Any]:
    """Bytes of one JSON-RPC message -> the SDK's message model (``mcp`` 2.x, else 1.x)."""
    import mcp.types as types

    adapter = getattr(types, "jsonrpc_message_adapter", None)
    if adapter is not None:
        return lambda line: adapter.validate_json(line, by_name=False)
    return types.JSONRPCMessage.model_validate_json  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def socket_transport(sock: socket.socket) -> AsyncIterator[tuple[Any, Any]]:
    """An MCP client transport over a connected stream socket: newline-delimited JSON-RPC, as over stdio.

    Yields the read and write streams a ``ClientSession`` takes. The read stream ends when the peer
    closes its end (a server that exited); the socket is closed on exit, which ends the server's stdin.
    """
    import anyio
    from mcp.shared.message import SessionMessage

    parse = _jsonrpc_parser()
    sock.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=_READ_CHUNK * 4)
    read_sender, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_receiver = anyio.create_memory_object_stream[Any](0)

    async def read_loop() -> None:
        buffer = b""
        try:
            async with read_sender:
                while True:
                    chunk = await reader.read(_READ_CHUNK)
                    if not chunk:
                        return  # the server's end closed
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            item: Any = SessionMessage(parse(line))
                        except ValueError as exc:  # the session reports what the server sent wrong
                            item = exc
                        await read_sender.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
            return

    async def write_loop() -> None:
        try:
            async with write_receiver:
                async for message in write_receiver:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(data.encode() + b"\n")
                    await writer.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
            await read_sender.aclose()  # the session sees the end instead of a request waiting forever

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_loop)
        tasks.start_soon(write_loop)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                write_stream.close()
                read_stream.close()
                writer.close()  # the server reads the end of its stdin and exits
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 2.0)
            tasks.cancel_scope.cancel()


# ---------------------------------------------------------------------- the zygote's client


class ForkServer:
    """The zygote of one Python stdio server spec and the children it forks (see the module docs).

    Args:
        spec: The server: a stdio command ``python [options] script.py ...`` or ``python [options] -m module ...``.
        max_start_failures: Failed zygote starts in a row after which connections start the server the plain way.

    Raises:
        ValueError: When the spec is not a command of that form.

    Attributes:
        stats: Counts: ``zygote_starts``, ``zygote_lost`` (found dead or unresponsive), ``forks``,
            ``plain_starts`` (connections started without it, after it failed).
        fallback_reason: Why connections are started the plain way (None while the zygote is used).
    """

    def __init__(self, spec: ServerSpec, *, max_start_failures: int = 3) -> None:
        if spec.command is None:
            raise ValueError("fork_server: needs a stdio command (a Python server), not a URL")
        self.command: PythonCommand = split_python_command(spec.command)
        self.spec = spec
        self.max_start_failures = max_start_failures
        self.stats = collections.Counter[str]()
        self.fallback_reason: str | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-fork-server")
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._generation = 0  # one per zygote started: a child's serial means something only to its zygote
        self._start_failures = 0
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running zygote's process id (None when none runs)."""
        return None if self._process is None else self._process.pid

    # ------------------------------------------------------------------ on the worker thread

    def _zygote_command(self, control_fd: int) -> list[str]:
        command = self.command
        return [command.interpreter, *command.options, ZYGOTE_PATH, "--control-fd", str(control_fd),
                *(f"--preload={name}" for name in self.spec.preload), "--", command.mode, command.target,
                *command.args]

    def _start(self) -> None:
        """Start a zygote and wait for its ``ready`` (the preload) within the spec's startup timeout."""
        from mcp.client.stdio import get_default_environment

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                self._zygote_command(theirs.fileno()), pass_fds=(theirs.fileno(),), cwd=self.spec.cwd,
                env=get_default_environment() | dict(self.spec.env), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if self.spec.stderr == "discard" else None,
                start_new_session=True)
        except OSError as exc:
            ours.close()
            raise ForkServerError(f"{self.spec.describe()}: the fork server could not start ({exc})") from exc
        finally:
            theirs.close()
        ours.settimeout(self.spec.startup_timeout)
        try:
            message = ours.recv(256)
        except OSError:
            message = b""
        if not message.startswith(b"ready"):
            ours.close()
            process.kill()
            code = process.wait()
            raise ForkServerError(f"{self.spec.describe()}: the fork server did not start (exit code {code}, "
                                  "or no answer within the startup timeout)")
        self._process, self._control = process, ours
        self._generation += 1
        self.stats["zygote_starts"] += 1

    def _spawn(self) -> tuple[socket.socket, int, int, int]:
        """A new child: its socket, the zygote's generation, the child's serial and pid."""
        for _ in range(2):  # a zygote found dead is replaced once per request
            if self._closed:
                raise ForkServerError(f"{self.spec.describe()}: the fork server is closed")
            if self._control is None:
                if self.fallback_reason is not None:
                    raise ForkServerError(self.fallback_reason)
                try:
                    self._start()
                except ForkServerError as exc:
                    self._start_failures += 1
                    if self._start_failures >= self.max_start_failures:
                        self.fallback_reason = f"{exc} ({self._start_failures} times in a row)"
                        logger.warning("%s; its servers are started without the fork server from now on", exc)
                    raise
                self._start_failures = 0
            assert self._control is not None
            fds: list[int] = []
            try:
                self._control.settimeout(min(self.spec.startup_timeout, _FORK_REPLY_TIMEOUT_S))
                self._control.send(b"fork")
                message, fds, _, _ = socket.recv_fds(self._control, 256, 1, socket.MSG_CMSG_CLOEXEC)
            except OSError:
                message = b""
            if message.startswith(b"child ") and len(fds) == 1:
                _, serial, pid = message.split()
                self.stats["forks"] += 1
                return socket.socket(fileno=fds[0]), self._generation, int(serial), int(pid)
            for fd in fds:
                os.close(fd)
            if message.startswith(b"error "):
                raise ForkServerError(f"{self.spec.describe()}: {message[6:].decode(errors='replace')}")
            self.stats["zygote_lost"] += 1
            logger.warning("%s: the fork server is gone or stopped answering; starting another", self.spec.describe())
            self._stop(kill=True)
        raise ForkServerError(f"{self.spec.describe()}: the fork server died twice in a row")

    def _release(self, generation: int, serial: int) -> None:
        """Tell the zygote a child's client let go (it is killed if it does not exit on its own)."""
        if self._control is not None and generation == self._generation:
            with contextlib.suppress(OSError):
                self._control.send(f"release {serial}".encode())

    def _stop(self, kill: bool) -> None:
        """Stop the zygote: ``kill`` it, or ask it to ``quit`` (released children wound down first)."""
        process, control = self._process, self._control
        self._process = self._control = None
        if control is not None:
            if not kill:
                with contextlib.suppress(OSError):
                    control.send(b"quit")
            control.close()
        if process is None:
            return
        if kill:
            process.kill()
        try:
            process.wait(2 * RELEASE_GRACE_S + 10.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # ------------------------------------------------------------------ on the event loop

    async def spawn(self) -> tuple[socket.socket, int, int, int]:
        """A new child (see :meth:`_spawn`); a child that arrives after the caller gave up is released."""
        future = self._executor.submit(self._spawn)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._discard)
            raise

    def _discard(self, future: concurrent.futures.Future[tuple[socket.socket, int, int, int]]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        sock, generation, serial, _ = future.result()
        sock.close()
        self._submit(self._release, generation, serial)

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the executor is shut down: the zygote is gone already
            self._executor.submit(fn, *args)

    def transport(self, spec: ServerSpec, errlog: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """The transport of one connection: a forked child, or a plain start after the fork server failed."""
        return self._connect(spec, errlog)

    @contextlib.asynccontextmanager
    async def _connect(self, spec: ServerSpec, errlog: Any) -> AsyncIterator[Any]:
        if self.fallback_reason is None:
            try:
                sock, generation, serial, _ = await self.spawn()
            except ForkServerError as exc:  # this connection starts the plain way; later ones try the zygote again
                if self._closed:
                    raise ConnectionLost(str(exc)) from exc
                logger.warning("%s; starting this connection's server without it", exc)
            else:
                try:
                    async with socket_transport(sock) as streams:
                        yield streams
                finally:
                    self._submit(self._release, generation, serial)
                return
        self.stats["plain_starts"] += 1
        async with default_transport(spec, errlog) as streams:
            yield streams

    async def aclose(self) -> None:
        """Stop the zygote after the releases already asked for (children still serving keep running)."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wrap_future(self._executor.submit(self._stop, False))
        finally:
            self._executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"ForkServer({self.spec.describe()}, pid={self.pid})"
