"""Start ``python -m agent_gym.reference_server`` on a free local port for a benchmark and wait until it is healthy."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["start_reference_server"]


def start_reference_server(args: Sequence[str], *, timeout: float = 180.0) -> tuple[subprocess.Popen, str]:
    """Start the reference server with ``args`` (besides ``--port``) and wait for ``/health``.

    Args:
        args: Extra command-line arguments, e.g. ``["--fake-tokens", "8"]``.
        timeout: Seconds to wait for ``/health`` to answer 200.

    Returns:
        The server process and its address ``127.0.0.1:PORT`` (no scheme).

    Raises:
        RuntimeError: If the server exits or is not healthy within ``timeout``.
    """
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent_gym.reference_server", "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the reference server exited with code {proc.returncode}")
        try:
            if httpx.get(f"http://{address}/health", timeout=1.0).status_code == 200:
                return proc, address
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the reference server did not become healthy in {timeout:g}s")
