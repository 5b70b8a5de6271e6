"""The loopback server of Web-v0's synthetic sites: one seeded site instance per episode, state kept server-side.

Each episode registers a fresh instance under a random token and reaches it at
``http://127.0.0.1:<port>/s/<token>/``; the page filter of the episode lets through that prefix only.
The instance's state (what was submitted, bought, saved) lives here, in Python, where the agent
cannot reach it: the site's checker grades it when the episode ends.
"""

from __future__ import annotations

import html
import http.server
import os
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

__all__ = ["Response", "SiteApp", "SiteServer", "page_html", "site_server"]

_MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Response:
    """A site's answer: an HTML body (status 200 unless said), or a redirect to ``location`` (303)."""

    body: str = ""
    location: str | None = None
    status: int = 200


class SiteApp(Protocol):
    """One site instance: answers requests below its prefix and grades its own state."""

    def handle(self, method: str, path: str, params: dict[str, str]) -> Response:
        """Answer ``method`` on ``path`` (below the prefix, no leading slash) with the query or form ``params``."""
        ...


def page_html(title: str, body: str, nav: tuple[tuple[str, str], ...] = ()) -> str:
    """A small HTML page: ``title``, links of ``nav`` (``(href, text)``), then ``body`` (already escaped)."""
    links = " | ".join(f'<a href="{html.escape(href)}">{html.escape(text)}</a>' for href, text in nav)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            f"{f'<nav>{links}</nav>' if links else ''}<main><h1>{html.escape(title)}</h1>{body}</main></body></html>")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer("GET", {})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self.send_error(413)
            return
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"), keep_blank_values=True)
        self._answer("POST", {k: v[-1] for k, v in form.items()})

    def _answer(self, method: str, form: dict[str, str]) -> None:
        parts = urlsplit(self.path)
        pieces = parts.path.split("/", 3)  # "", "s", token, rest
        if len(pieces) < 3 or pieces[1] != "s":
            self.send_error(404)
            return
        app = self.server.apps.get(pieces[2])
        if app is None:
            self.send_error(404)
            return
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        params.update(form)
        try:
            response = app.handle(method, pieces[3] if len(pieces) > 3 else "", params)
        except Exception:  # noqa: BLE001 - a site's bug is a 500 page, never a dead server
            self.send_error(500)
            return
        if response.location is not None:
            self.send_response(303)
            self.send_header("Location", f"/s/{pieces[2]}/{response.location}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = response.body.encode()
        self.send_response(response.status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    apps: dict[str, SiteApp]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that went away mid-transfer is not an error worth a traceback."""
        return


class SiteServer:
    """Serves registered site instances on ``http://127.0.0.1:<port>/s/<token>/`` from a daemon thread."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.apps = {}
        self.port = int(self._server.server_address[1])
        self.origin = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self.pid = os.getpid()
        threading.Thread(target=self._server.serve_forever, name="agent-gym-web-sites", daemon=True).start()

    def register(self, app: SiteApp) -> str:
        """Serve ``app``; returns its path prefix ``/s/<token>/``."""
        token = secrets.token_hex(8)
        with self._lock:
            self._server.apps[token] = app
        return f"/s/{token}/"

    def unregister(self, prefix: str) -> None:
        """Stop serving the instance at ``prefix``."""
        with self._lock:
            self._server.apps.pop(prefix.strip("/").split("/")[-1], None)

    @property
    def instances(self) -> int:
        """Instances served now."""
        return len(self._server.apps)


_SERVER: SiteServer | None = None
_LOCK = threading.Lock()


def site_server() -> SiteServer:
    """The process's site server (started on first use, and again in a forked child: its instances live here)."""
    global _SERVER
    with _LOCK:
        if _SERVER is None or _SERVER.pid != os.getpid():
            _SERVER = SiteServer()
        return _SERVER
