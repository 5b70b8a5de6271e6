"""An MCP server over streamable HTTP in a subprocess, for the tests: started on a free port, stopped after."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

__all__ = ["mcp_http_process"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def mcp_http_process(command: Callable[[int], list[str]], what: str, timeout: float = 60.0) -> Iterator[str]:
    """Run ``command(port)`` until it listens on ``port``; yield its ``/mcp`` URL, stop it after.

    Args:
        command: The server's argv for a port.
        what: The server's name, for errors.
        timeout: Seconds to wait for it to listen.

    Raises:
        RuntimeError: The process exited (its stderr's end included) or did not listen in time.
    """
    port = _free_port()
    log = tempfile.TemporaryFile()  # not a pipe: a server that logs every request must never block on it
    process = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                stderr = log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{what} exited with {process.returncode}: {stderr}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen in time")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
