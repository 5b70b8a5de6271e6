"""The loopback HTTP server that serves the task pages: :class:`LoopbackServer`.

The browser reaches nothing but this server: the pages of Web-v0 (the MiniWoB++ files shipped
in the ``miniwob`` package) are served read-only from ``127.0.0.1`` on a free port, by a thread of
this process, so no page is ever opened over ``file://`` and a context's request filter can let
through exactly one origin.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["LoopbackServer", "static_server"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files below the server's folder; no directory listings, no log lines."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def list_directory(self, path: Any) -> None:
        self.send_error(404, "no listings")
        return None

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that went away mid-transfer (killed, its context closed) is not an error worth a traceback."""
        return


class LoopbackServer:
    """Serves the files under ``root`` on ``http://127.0.0.1:<port>/`` from a daemon thread.

    Args:
        root: The folder served (paths outside it are refused by the handler).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self._server = _Server(("127.0.0.1", 0), handler)
        self.port = int(self._server.server_address[1])
        self.origin = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-gym-web-server", daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        """The address of ``path`` (relative to the root) on this server."""
        return f"{self.origin}/{path.lstrip('/')}"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


_SERVERS: dict[tuple[int, Path], LoopbackServer] = {}
_LOCK = threading.Lock()


def static_server(root: str | Path) -> LoopbackServer:
    """The process's server for ``root`` (started on first use, and again in a forked child)."""
    key = (os.getpid(), Path(root).resolve())
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None:
            server = _SERVERS[key] = LoopbackServer(key[1])
        return server
