"""Run a server of the package with uvicorn: say where it listens, stop within seconds of a signal.

:func:`run_server` prints one line naming the address, whether only this machine can reach it
(``127.0.0.1``, the default of every server) and how clients authenticate; then it serves until
SIGINT or SIGTERM. Requests in flight get ``graceful_s`` seconds to finish, after which uvicorn
cancels them; the ``on_stop`` callbacks run (closing a trajectory writer, say); then the process
runs its exit handlers (finalizers included) and ends with the exit code a shell expects for the
signal (130 for SIGINT, 143 for SIGTERM), without the second or more an interpreter takes to tear
down a large module graph. Should the stop hang anyway (a request stuck in code that never
yields), the process ends itself ``hard_stop_s`` seconds after the signal.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["HARD_STOP_S", "GRACEFUL_S", "bind_note", "is_loopback", "run_server"]

GRACEFUL_S = 3
"""Seconds requests in flight get to finish after a stop signal."""

HARD_STOP_S = 8.0
"""Seconds after a stop signal when the process ends itself, whatever still runs."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_note(host: str, authenticated: bool) -> str:
    """Who can reach a server bound to ``host``, with a warning for an open, reachable one."""
    if is_loopback(host):
        return "loopback only: clients on this machine (bind another interface with --host)"
    note = f"bound to {host}: reachable from other machines"
    if not authenticated:
        note += " WITHOUT a token: anyone who reaches the port is served"
    return note


class _Server:
    """uvicorn's server whose stop signal also arms the hard stop."""

    @staticmethod
    def make(config: Any, hard_stop_s: float) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                if not getattr(self, "_hard_stop_armed", False):
                    self._hard_stop_armed = True
                    timer = threading.Timer(hard_stop_s, _hard_exit, (128 + int(sig),))
                    timer.daemon = True
                    timer.start()
                super().handle_exit(sig, frame)

        return Server(config)


def _hard_exit(code: int) -> None:
    sys.stderr.write(f"stop signal: requests still running after the grace period; exiting ({code})\n")
    sys.stderr.flush()
    os._exit(code)


def run_server(
    app: Any,
    *,
    host: str,
    port: int,
    name: str,
    auth: str,
    authenticated: bool,
    log_level: str = "warning",
    graceful_s: int = GRACEFUL_S,
    hard_stop_s: float = HARD_STOP_S,
    ws_max_size: int | None = None,
    on_stop: Iterable[Callable[[], Any]] = (),
    extra_lines: Iterable[str] = (),
    exit_on_signal: bool = True,
) -> int:
    """Serve ``app`` until a stop signal; returns the exit code (0, 130 after SIGINT, 143 after SIGTERM).

    Args:
        app: The ASGI application.
        host: Interface to bind.
        port: Port to bind.
        name: What the start line calls the server (``agent-gym gateway``).
        auth: How clients authenticate, for the start line.
        authenticated: Whether requests need a token (the start line warns about a reachable open server).
        log_level: uvicorn's log level.
        graceful_s: Seconds requests in flight get after a stop signal.
        hard_stop_s: Seconds after the signal when the process ends whatever still runs.
        ws_max_size: Largest WebSocket message accepted (uvicorn's ``ws_max_size``).
        on_stop: Called after serving ends (in order; a failure is printed, the rest still run).
        extra_lines: More lines printed after the start line.
        exit_on_signal: After a signal (in the main thread), run the exit handlers and end the process
            with its code at once instead of returning it.
    """
    import uvicorn

    print(f"{name} on http://{host}:{port} ({bind_note(host, authenticated)}); {auth}", flush=True)
    for line in extra_lines:
        print(line, flush=True)
    options: dict[str, Any] = {"ws_max_size": ws_max_size} if ws_max_size is not None else {}
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, timeout_keep_alive=30,
                            timeout_graceful_shutdown=max(int(graceful_s), 1), **options)
    server = _Server.make(config, hard_stop_s)
    received: list[int] = []
    main_thread = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}

    def note(sig: int, _frame: Any) -> None:
        received.append(int(sig))
        server.should_exit = True  # a signal before uvicorn listens for them still stops it

    if main_thread:  # uvicorn re-raises the signal it stopped on once done: note it instead of dying by it
        for stop in (signal.SIGINT, signal.SIGTERM):
            previous[stop] = signal.signal(stop, note)
    try:
        server.run()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for callback in on_stop:
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - every callback runs
                print(f"{name}: stopping: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if not received:
        return 0
    code = 128 + int(received[0])
    if exit_on_signal and main_thread:
        atexit._run_exitfuncs()  # finalizers (sandboxes, pools) and log flushing, then no teardown
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    return code
