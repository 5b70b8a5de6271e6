"""The fork server ("zygote") of a Python stdio MCP server: import once, fork a fresh process per episode.

Starting a Python MCP server costs a whole interpreter start and the import of the ``mcp`` SDK
(about a second of CPU). This program does that once: it imports the SDK's server modules (and
``--preload`` modules), compiles the server's script, and serves one throwaway session itself
(``initialize``, ``tools/list``, then the end of its input, on a socket pair standing in for stdin
and stdout), so that the imports the server makes only when it runs and the SDK's caches are in
place. Then it waits. For every ``fork`` request it forks a child that runs the server's program
for real (as ``__main__``, with the server's ``sys.argv``) with both its stdin and stdout on one end
of a new Unix socket pair, and passes the other end back over the control socket (``SCM_RIGHTS``).
Each child is a separate process with its own memory, so what one episode's server stores no other
episode sees, exactly as with a server started from scratch; only the imports and caches are shared
(copy-on-write).

The control socket is a ``SOCK_SEQPACKET`` Unix socket (one message per datagram) given to this
process by file descriptor (``--control-fd``). Messages, client to zygote:

* ``fork``: answered ``child <serial> <pid>`` with the client's end of the child's socket attached,
  or ``error <reason>``.
* ``release <serial>``: the client closed that child's socket; the child should exit on the end of
  its stdin. After a grace period it is sent SIGTERM, and SIGKILL after another.
* ``quit``: wait for (or kill) the released children, then exit. Children still serving a client
  keep running and exit when their client closes the socket.

When the control socket reaches its end (the client process is gone), every child gets the same
treatment as a released one and the zygote exits. On start the zygote sends ``ready <pid>``. Only
this process's own children are ever signalled, and a child is known by its serial (never by a pid
that may have been reused), so no unrelated process can be hit.

The file imports only the standard library and runs as a script under the server's interpreter::

    python zygote.py --control-fd 5 -- script path/to/server.py [args ...]
    python zygote.py --control-fd 5 --preload numpy -- module package.server [args ...]

:func:`split_python_command` parses the server's command line (``python [options] script.py ...`` or
``python [options] -m module ...``) for the client side.
"""

from __future__ import annotations

import argparse
import array
import builtins
import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
import types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RELEASE_GRACE_S", "SDK_PRELOAD", "PythonCommand", "main", "split_python_command"]

RELEASE_GRACE_S = 2.0
"""Seconds a released child has to exit on its own before SIGTERM (and again before SIGKILL)."""

SDK_PRELOAD = ("mcp.server.stdio", "mcp.server.mcpserver", "mcp.server.fastmcp", "mcp.server.lowlevel",
               "anyio._backends._asyncio")
"""Modules imported before the server's own code (missing ones skipped: 2.x and 1.x name them differently)."""

_FLAGS_WITHOUT_VALUE = frozenset({"-u", "-B", "-E", "-I", "-O", "-OO", "-s", "-S", "-q", "-P", "-b", "-bb", "-d"})
_FLAGS_WITH_VALUE = frozenset({"-X", "-W"})


@dataclass(frozen=True)
class PythonCommand:
    """A Python server's command line, split.

    Attributes:
        interpreter: The interpreter (the command's first word).
        options: The interpreter's options before the script or ``-m`` (e.g. ``-u``, ``-X dev``).
        mode: ``"script"`` or ``"module"``.
        target: The script's path or the module's name.
        args: The arguments after it.
    """

    interpreter: str
    options: tuple[str, ...]
    mode: str
    target: str
    args: tuple[str, ...]


def split_python_command(command: Sequence[str]) -> PythonCommand:
    """``python [options] script.py [args]`` or ``python [options] -m module [args]``, split.

    Raises:
        ValueError: For any other form (``-c``, a program that is not run by an interpreter option list
            of this form, a missing script or module).
    """
    words = list(command)
    if not words:
        raise ValueError("fork_server: the command is empty")
    options: list[str] = []
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        if words[i] in _FLAGS_WITH_VALUE and i + 1 < len(words):
            options += words[i:i + 2]
            i += 2
        elif words[i] in _FLAGS_WITHOUT_VALUE:
            options.append(words[i])
            i += 1
        else:
            raise ValueError(f"fork_server: interpreter option {words[i]!r} is not supported; the command must be "
                             "`python [options] script.py ...` or `python [options] -m module ...`")
    if i < len(words) and words[i] == "-m":
        if i + 1 >= len(words):
            raise ValueError("fork_server: `-m` without a module name")
        return PythonCommand(words[0], tuple(options), "module", words[i + 1], tuple(words[i + 2:]))
    if i >= len(words):
        raise ValueError("fork_server: the command must be `python [options] script.py ...` or "
                         "`python [options] -m module ...`")
    return PythonCommand(words[0], tuple(options), "script", words[i], tuple(words[i + 1:]))


# ---------------------------------------------------------------------- the zygote process


@dataclass
class _Child:
    pid: int
    released_at: float | None = None
    signalled: int = 0  # 1: SIGTERM sent, 2: SIGKILL sent


class _Zygote:
    """The zygote's state: the control socket, the children by serial, the SIGCHLD wake-up pipe."""

    def __init__(self, control: socket.socket, program: _ServerProgram) -> None:
        self.control = control
        self.program = program
        self.children: dict[int, _Child] = {}
        self.serial = 0
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the wake-up fd hears it
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the client stops it; a terminal's ^C is for the client

    # ------------------------------------------------------------------ children

    def reap(self) -> None:
        """Collect every child that exited (the only place a serial is forgotten)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for serial, child in list(self.children.items()):
                if child.pid == pid:
                    del self.children[serial]

    def enforce_deadlines(self, now: float) -> float | None:
        """SIGTERM, then SIGKILL, released children past their grace; returns the seconds to the next deadline."""
        nearest: float | None = None
        for child in self.children.values():
            if child.released_at is None or child.signalled == 2:
                continue
            if now >= child.released_at + RELEASE_GRACE_S * (child.signalled + 1):
                child.signalled += 1
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM if child.signalled == 1 else signal.SIGKILL)
            if child.signalled < 2:
                left = child.released_at + RELEASE_GRACE_S * (child.signalled + 1) - now
                nearest = left if nearest is None else min(nearest, left)
        return nearest

    def fork(self) -> None:
        """Fork a child serving one client over a new socket pair; send the client its end."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            with contextlib.suppress(OSError):
                self.control.send(f"error fork failed: {exc}".encode())
            return
        if pid == 0:
            ours.close()
            self._become_server(theirs)  # never returns
        theirs.close()
        self.serial += 1
        self.children[self.serial] = _Child(pid)
        try:  # a client gone meanwhile: the child reads the end of its stdin and exits
            self.control.sendmsg([f"child {self.serial} {pid}".encode()],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ours.fileno()]))])
        except OSError:
            self.release(self.serial, time.monotonic())
        finally:
            ours.close()

    def _become_server(self, connection: socket.socket) -> None:
        """In the forked child: the connection becomes stdin and stdout, then the server runs as ``__main__``."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for fd in (self.wake_read, self.wake_write, self.control.fileno()):
                with contextlib.suppress(OSError):
                    os.close(fd)
            os.dup2(connection.fileno(), 0)
            os.dup2(connection.fileno(), 1)
            connection.close()
            _rebind_std_streams()
            code = self.program.run()
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # noqa: BLE001 - a child never returns into the zygote's loop
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)

    def release(self, serial: int, now: float) -> None:
        child = self.children.get(serial)
        if child is not None and child.released_at is None:
            child.released_at = now

    def release_all(self, now: float) -> None:
        for serial in list(self.children):
            self.release(serial, now)

    # ------------------------------------------------------------------ the loop

    def serve(self) -> None:
        """Answer control messages until ``quit`` or the control socket's end; then wind the children down."""
        quitting = False
        while True:
            self.reap()
            now = time.monotonic()
            wait = self.enforce_deadlines(now)
            if quitting and not any(c.released_at is not None for c in self.children.values()):
                return
            watched: list[Any] = [self.wake_read] if quitting else [self.wake_read, self.control]
            readable, _, _ = select.select(watched, [], [], 1.0 if wait is None else max(0.0, min(wait, 1.0)))
            if self.wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_read, 4096)
            if quitting or self.control not in readable:
                continue
            try:
                message = self.control.recv(4096)
            except OSError:
                message = b""
            if message == b"fork":
                self.fork()
            elif message.startswith(b"release "):
                with contextlib.suppress(ValueError):
                    self.release(int(message.split()[1]), time.monotonic())
            elif message == b"quit":
                quitting = True  # children still serving a client exit on their own when it lets go
            elif not message:  # the client process is gone: nobody will talk to any child again
                self.release_all(time.monotonic())
                quitting = True


def _rebind_std_streams() -> tuple[Any, Any]:
    """New ``sys.stdin`` / ``sys.stdout`` objects over fds 0 and 1 (after a ``dup2``); returns the old ones.

    The old objects were opened on another file (``/dev/null``): their buffers believe it seekable, and a server
    that wraps ``sys.stdin.buffer`` (``mcp`` 1.x) would seek a socket, and close the buffer when it is done.
    """
    previous = sys.stdin, sys.stdout
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - the process's stdin
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's stdout
    return previous


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


class _ServerProgram:
    """The server's script (compiled once) or module, run as a program with the server's ``sys.argv``."""

    def __init__(self, mode: str, target: str, args: Sequence[str]) -> None:
        self.mode = mode
        self.target = target
        self.args = list(args)
        self.code: types.CodeType | None = None

    def compile(self) -> None:
        """Compile the script once (the children execute the code object)."""
        if self.mode == "script":
            with open(self.target, "rb") as source:
                self.code = compile(source.read(), self.target, "exec", dont_inherit=True)  # not this file's __future__

    def run(self, run_name: str = "__main__") -> int:
        """Run it as module ``run_name`` (``sys.modules`` and ``sys.argv`` restored after); its exit code."""
        argv = sys.argv
        sys.argv = [self.target, *self.args]
        try:
            if self.mode == "module":
                runpy.run_module(self.target, run_name=run_name, alter_sys=True)
                return 0
            if self.code is None:
                self.compile()
            assert self.code is not None
            module = types.ModuleType(run_name)
            module.__dict__.update(__file__=self.target, __cached__=None, __loader__=None, __package__="",
                                   __spec__=None, __builtins__=builtins)
            previous = sys.modules.get(run_name)
            sys.modules[run_name] = module
            try:
                exec(self.code, module.__dict__)
            finally:
                if previous is None:
                    sys.modules.pop(run_name, None)
                else:
                    sys.modules[run_name] = previous
            return 0
        except SystemExit as exc:
            return _exit_code(exc)
        finally:
            sys.argv = argv


class _WarmUpTimeout(BaseException):
    """The throwaway session took too long."""


_WARM_UP_REQUESTS = (
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "agent-gym-fork-server", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
)


def _warm_up_client(sock: socket.socket, timeout: float) -> None:
    """The throwaway session's client: initialize, tools/list, each answer awaited, then the end of input."""
    sock.settimeout(timeout)
    buffer = b""

    def await_answer(request_id: int) -> None:
        nonlocal buffer
        while True:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("id") == request_id:
                        return
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the server closed the session")
            buffer += chunk

    with contextlib.suppress(OSError, ValueError):
        sock.sendall(json.dumps(_WARM_UP_REQUESTS[0]).encode() + b"\n")
        await_answer(1)
        sock.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in _WARM_UP_REQUESTS[1:]))
        await_answer(2)
        sock.shutdown(socket.SHUT_WR)  # the server reads the end of its stdin and returns
        while sock.recv(1 << 16):
            pass


def _warm_up(program: _ServerProgram, timeout: float) -> None:
    """Serve one throwaway session in this process: the SDK's lazy imports and caches are filled before a fork.

    A child then only builds its server and serves.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    saved = os.dup(0), os.dup(1)
    client = threading.Thread(target=_warm_up_client, args=(ours, timeout), name="warm-up client")
    client.start()

    def expire(signum: int, frame: Any) -> None:
        raise _WarmUpTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    os.dup2(theirs.fileno(), 0)
    os.dup2(theirs.fileno(), 1)
    theirs.close()
    streams = _rebind_std_streams()
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        program.run()
    except BaseException:  # noqa: BLE001 - a warm-up is an optimisation: the children run the server themselves
        print(f"mcp fork server: the warm-up session of {program.target!r} failed:", file=sys.stderr)
        traceback.print_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin, sys.stdout = streams
        for fd, original in zip((0, 1), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
        with contextlib.suppress(OSError):
            ours.shutdown(socket.SHUT_RDWR)
        client.join(timeout)
        ours.close()
    for thread in threading.enumerate():  # the SDK's worker threads stop with their event loop
        if thread is not threading.main_thread():
            thread.join(5.0)


def _preload(program: _ServerProgram, modules: Sequence[str], warm_up_timeout: float) -> None:
    """Import the SDK and the extra modules, compile the script, run the warm-up session (failures reported)."""
    for name in SDK_PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the children import it themselves
            print(f"mcp fork server: could not preload module {name!r}:", file=sys.stderr)
            traceback.print_exc()
    try:
        program.compile()
    except (OSError, SyntaxError, ValueError):  # a child reports it to its client
        traceback.print_exc()
        return
    if warm_up_timeout > 0:
        _warm_up(program, warm_up_timeout)
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of the children's collections: fewer pages copied


def main(argv: Sequence[str] | None = None) -> int:
    """Preload, report ``ready``, serve fork requests (see the module docs)."""
    parser = argparse.ArgumentParser(description="Fork server of a Python stdio MCP server.")
    parser.add_argument("--control-fd", type=int, required=True, help="the SOCK_SEQPACKET control socket")
    parser.add_argument("--preload", action="append", default=[], help="a module to import before forking")
    parser.add_argument("--warm-up-timeout", type=float, default=30.0,
                        help="seconds for the throwaway session that warms the SDK up (0: none)")
    parser.add_argument("mode", choices=("script", "module"))
    parser.add_argument("target", help="the server's script path or module name")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the server's arguments")
    options = parser.parse_args(argv)
    control = socket.socket(fileno=options.control_fd)
    if not (sys.flags.isolated or getattr(sys.flags, "safe_path", False)):
        # what `python script.py` / `python -m module` would put first, instead of this file's folder
        sys.path[0] = os.path.dirname(os.path.abspath(options.target)) if options.mode == "script" else os.getcwd()
    # a module preloaded by its own name and then run as __main__ is the point here, not a mistake
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning)
    program = _ServerProgram(options.mode, options.target, options.args)
    _preload(program, options.preload, options.warm_up_timeout)
    zygote = _Zygote(control, program)  # after the warm-up: its signal handling is the zygote's own
    control.send(f"ready {os.getpid()}".encode())
    zygote.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
