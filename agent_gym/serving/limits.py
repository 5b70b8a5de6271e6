"""Request limits of the package's HTTP servers and the ASGI middleware that caps body sizes.

:class:`RequestLimits` holds the caps a server applies to one request (body size, messages,
tools, ``n``, prompts, ``max_tokens``); :func:`add_limit_arguments` puts them on a command line.
:class:`BodyLimit` answers 413 in the server's own error shape as soon as a request's body is known
to be too large: at once when its ``Content-Length`` says so, else (a chunked body) when the bytes
received pass the cap (the rest is not read). A body within a ``Content-Length`` under the cap goes
to the application untouched (HTTP framing bounds it).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from agent_gym.serving.auth import ErrorBody, plain_error, send_answer

__all__ = ["MIB", "BodyLimit", "RequestLimits", "add_limit_arguments", "limits_from_args"]

MIB = 2**20


@dataclass(frozen=True)
class RequestLimits:
    """Caps on one request (each enforced with a 413 or 400 naming it).

    Attributes:
        max_body_bytes: Largest request body (413 beyond it).
        max_messages: Most messages (chat, Messages API, Responses input items after
            ``previous_response_id``'s conversation is added).
        max_tools: Most tool definitions.
        max_n: Largest ``n`` (samples per prompt).
        max_prompts: Most prompts in one ``/v1/completions`` request (a list of prompts).
        max_tokens: Largest ``max_tokens`` (the context length bounds it too).
        offload_bytes: Bodies larger than this are parsed, rendered and tokenized on a worker
            thread, so the event loop (``/health`` included) never waits for them.
    """

    max_body_bytes: int = 8 * MIB
    max_messages: int = 2048
    max_tools: int = 256
    max_n: int = 16
    max_prompts: int = 64
    max_tokens: int = 32768
    offload_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{item.name}: expected an int >= 1, got {value!r}")


def add_limit_arguments(parser: argparse.ArgumentParser, *, sampling: bool = True) -> argparse.ArgumentParser:
    """Add the request limits of :class:`RequestLimits` to ``parser`` (``sampling``: also n, prompts, max_tokens)."""
    default = RequestLimits()
    group = parser.add_argument_group("request limits (a request beyond one is refused: 413 or 400)")
    group.add_argument("--max-body-mb", type=float, default=default.max_body_bytes / MIB, metavar="MB",
                       help=f"largest request body in MiB (default {default.max_body_bytes // MIB})")
    group.add_argument("--max-messages", type=int, default=default.max_messages,
                       help=f"most messages in one request (default {default.max_messages})")
    group.add_argument("--max-tools", type=int, default=default.max_tools,
                       help=f"most tool definitions in one request (default {default.max_tools})")
    if sampling:
        group.add_argument("--max-n", type=int, default=default.max_n,
                           help=f"largest n, samples per prompt (default {default.max_n})")
        group.add_argument("--max-prompts", type=int, default=default.max_prompts,
                           help=f"most prompts in one /v1/completions request (default {default.max_prompts})")
        group.add_argument("--max-tokens-limit", type=int, default=default.max_tokens,
                           help=f"largest max_tokens of a request (default {default.max_tokens}; the context "
                                "length bounds it too)")
    return parser


def limits_from_args(args: argparse.Namespace) -> RequestLimits:
    """The :class:`RequestLimits` given by :func:`add_limit_arguments`' options (defaults where absent)."""
    limits = RequestLimits()
    values: dict[str, Any] = {}
    if getattr(args, "max_body_mb", None) is not None:
        values["max_body_bytes"] = int(args.max_body_mb * MIB)
    for name, attr in (("max_messages", "max_messages"), ("max_tools", "max_tools"), ("max_n", "max_n"),
                       ("max_prompts", "max_prompts"), ("max_tokens_limit", "max_tokens")):
        if getattr(args, name, None) is not None:
            values[attr] = getattr(args, name)
    return replace(limits, **values)


class BodyLimit:
    """ASGI middleware: HTTP request bodies of at most ``max_bytes``.

    A body over the cap is answered 413 (``Connection: close``, the rest unread) in the shape
    ``error`` builds. A body without a ``Content-Length`` is read first (up to the cap): the app
    gets it as one message, then the connection's later messages (a client that goes away is
    still seen as ``http.disconnect``).

    Args:
        app: The ASGI application.
        max_bytes: The cap.
        error: Builds the 413 body (default FastAPI's ``{"detail": ...}``).
    """

    def __init__(self, app: Any, max_bytes: int, *, error: ErrorBody | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.error = error or plain_error

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Serve one connection scope, its HTTP body read (and capped) first."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(scope, send, declared)
            else:
                await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body was complete
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, send, None)
                return
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: dict[str, Any], send: Callable[[dict[str, Any]], Awaitable[None]],
                      declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more bytes"
        message = (f"request body too large: {size}, the server takes at most {self.max_bytes} bytes "
                   f"({self.max_bytes / MIB:g} MiB)")
        body, content_type = self.error(scope, 413, message)
        await send_answer(send, 413, body, content_type, extra=[(b"connection", b"close")])


def _content_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
