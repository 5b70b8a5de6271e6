"""Bearer tokens of the package's HTTP servers: where they come from, how they are compared and enforced.

A token reaches a server as ``Authorization: Bearer TOKEN`` or ``x-api-key: TOKEN`` (what the
``openai`` and ``anthropic`` clients send) and is compared in constant time
(:func:`hmac.compare_digest`). :func:`resolve_token` reads a token from its command-line flag,
then its environment variable, and can generate one; :class:`TokenGuard` is an ASGI middleware
that refuses every request without the token except on open paths (``/health``), with 401 in
the server's own error body, and closes an unauthenticated WebSocket before accepting it
(the client sees HTTP 403).
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ErrorBody",
    "ResolvedToken",
    "TokenGuard",
    "auth_headers",
    "new_token",
    "plain_error",
    "request_token",
    "resolve_token",
    "scope_token",
    "send_answer",
    "tokens_equal",
]

ErrorBody = Callable[[Mapping[str, Any], int, str], tuple[bytes, str]]
"""``(scope, status, message) -> (body, content type)``: a server's error answer in its own shape."""


def new_token(prefix: str = "ag") -> str:
    """A fresh random token (192 bits), ``PREFIX-...``."""
    return f"{prefix}-{secrets.token_urlsafe(24)}"


def tokens_equal(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (None never matches)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def auth_headers(token: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer TOKEN"}``, or ``{}`` without a token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def request_token(authorization: str | None, api_key: str | None) -> str | None:
    """The token of a request from its ``Authorization`` (``Bearer ...``) or ``x-api-key`` header."""
    if authorization and authorization[:7].lower() == "bearer ":
        token = authorization[7:].strip()
        if token:
            return token
    return api_key or None


def scope_token(scope: Mapping[str, Any]) -> str | None:
    """The token an ASGI request scope carries (see :func:`request_token`)."""
    authorization = api_key = None
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"x-api-key":
            api_key = value.decode("latin-1")
    return request_token(authorization, api_key)


@dataclass(frozen=True)
class ResolvedToken:
    """A server's token and where it came from.

    Attributes:
        token: The token, or None (no authentication).
        source: ``"flag"``, ``"env"`` (the environment variable), ``"generated"`` or ``"none"``.
        env_var: The environment variable read.
    """

    token: str | None
    source: str
    env_var: str = ""

    def describe(self, what: str = "token") -> str:
        """One line for the start banner: where the token comes from (a generated one is printed)."""
        if self.token is None:
            return f"no {what}: every client that reaches the port is served"
        if self.source == "generated":
            return f"{what} (generated; set {self.env_var} or the flag to choose one): {self.token}"
        origin = "from $" + self.env_var if self.source == "env" else "from the command line"
        return f"{what} {origin} required"


def resolve_token(flag: str | None, env_var: str, *, generate: bool = False, prefix: str = "ag",
                  environ: Mapping[str, str] | None = None) -> ResolvedToken:
    """The token a server runs with: its flag, else its environment variable, else generated or none.

    Args:
        flag: The command-line value (None when not given).
        env_var: The environment variable read when the flag is absent.
        generate: Generate a token when neither gives one (else run without).
        prefix: Prefix of a generated token.
        environ: The environment (default ``os.environ``).

    Raises:
        ValueError: An empty or blank token (a typo would otherwise open the server).
    """
    env = os.environ if environ is None else environ
    for value, source in ((flag, "flag"), (env.get(env_var), "env")):
        if value is None:
            continue
        if not value.strip() or value != value.strip():
            raise ValueError(f"{'the token flag' if source == 'flag' else '$' + env_var}: expected a non-blank "
                             f"token without surrounding spaces, got {value!r}")
        return ResolvedToken(value, source, env_var)
    if generate:
        return ResolvedToken(new_token(prefix), "generated", env_var)
    return ResolvedToken(None, "none", env_var)


def plain_error(scope: Mapping[str, Any], status: int, message: str) -> tuple[bytes, str]:
    """FastAPI's error shape, ``{"detail": message}``."""
    import json

    return json.dumps({"detail": message}).encode(), "application/json"


class TokenGuard:
    """ASGI middleware: every request but those to ``open_paths`` must carry ``token``.

    Args:
        app: The ASGI application guarded.
        token: The token (None lets everything through).
        open_paths: Paths served without the token (exact matches).
        error: Builds the 401 body (default FastAPI's ``{"detail": ...}``).
    """

    def __init__(self, app: Any, token: str | None, *, open_paths: Iterable[str] = ("/health",),
                 error: ErrorBody | None = None) -> None:
        self.app = app
        self.token = token
        self.open_paths = frozenset(open_paths)
        self.error = error or plain_error

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Serve one connection scope: through when authorized (or open), else 401 / a closed WebSocket."""
        kind = scope["type"]
        if self.token is None or kind not in ("http", "websocket") or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        if tokens_equal(scope_token(scope), self.token):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":  # closing before accepting answers the handshake with 403
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong token"})
            return
        body, content_type = self.error(scope, 401, "missing or wrong token: send 'Authorization: Bearer TOKEN' "
                                                    "with the server's token")
        await send_answer(send, 401, body, content_type, extra=[(b"www-authenticate", b"Bearer")])


async def send_answer(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: bytes,
                      content_type: str, *, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Send a whole HTTP answer through an ASGI ``send``."""
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
