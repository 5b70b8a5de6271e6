"""The reference server's protections: request limits, its API key, and generation that stops with its client.

* :class:`Guards` checks a request against :class:`~agent_gym.serving.limits.RequestLimits`
  (``n``, prompts, ``max_tokens``, messages, tools: 400 in vLLM's error body) and runs the
  heavy preparation of a large request (tokenization, template rendering, id checks) on a
  worker thread, so ``/health`` keeps answering.
* :func:`until_done_or_gone` awaits a generation and cancels it when the client disconnects
  (the backend then drops the request's rows at their next id).
* :func:`protect` wraps the app with the body-size cap (413) and, with an API key (vLLM's
  ``--api-key``), the key check on every route but ``/health`` (401 ``{"error": "Unauthorized"}``,
  vLLM's answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from starlette.requests import Request

from agent_gym.errors import RequestError
from agent_gym.serving.auth import TokenGuard
from agent_gym.serving.limits import BodyLimit, RequestLimits
from agent_gym.utils.runtime import run_blocking

__all__ = ["ClientGone", "Guards", "protect", "until_done_or_gone", "vllm_error"]

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready (the generation was cancelled)."""


def vllm_error(scope: Mapping[str, Any], status: int, message: str) -> tuple[bytes, str]:
    """An error answered before the app runs, in vLLM's shape (401 as vLLM words it)."""
    if status == 401:
        return orjson.dumps({"error": "Unauthorized"}), "application/json"
    kind = "RequestTooLargeError" if status == 413 else "BadRequestError"
    return orjson.dumps(RequestError(message, status=status, kind=kind).openai_body()), "application/json"


def protect(app: Any, limits: RequestLimits, api_key: str | None) -> Any:
    """``app`` behind the body-size cap and, given an ``api_key``, the key check (``/health`` stays open)."""
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, error=vllm_error)
    if api_key is not None:
        app.add_middleware(TokenGuard, token=api_key, open_paths=("/health",), error=vllm_error)
    return app


async def until_done_or_gone(request: Request, work: Awaitable[T], *, after_s: float = 0.05) -> T:
    """Await ``work``; cancel it and raise :class:`ClientGone` if the client disconnects first.

    The connection is watched from ``after_s`` seconds on (a quick answer costs no watcher); a
    disconnect cancels the request's own task while it awaits ``work``, which cancels ``work``.
    """
    here = asyncio.current_task()
    assert here is not None
    left: list[bool] = []
    watchers: list[asyncio.Future[Any]] = []

    def gone(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is None and done.result().get("type") == "http.disconnect":
            left.append(True)
            here.cancel()

    def watch() -> None:
        watcher = asyncio.ensure_future(request.receive())
        watcher.add_done_callback(gone)
        watchers.append(watcher)

    timer = asyncio.get_running_loop().call_later(after_s, watch)
    try:
        return await work
    except asyncio.CancelledError:
        if left:
            uncancel = getattr(here, "uncancel", None)  # Python 3.11+: the task is not being cancelled any more
            if uncancel is not None:
                uncancel()
            raise ClientGone() from None
        raise
    finally:
        timer.cancel()
        for watcher in watchers:
            if not watcher.done():
                watcher.remove_done_callback(gone)
                watcher.cancel()


class Guards:
    """The request limits of one app.

    Args:
        limits: The limits.
    """

    def __init__(self, limits: RequestLimits | None = None) -> None:
        self.limits = limits or RequestLimits()

    def sampling(self, n: Any, max_tokens: Any, param: str = "max_tokens") -> None:
        """Refuse ``n`` or ``max_tokens`` beyond the limits (400)."""
        limits = self.limits
        if isinstance(n, int) and not isinstance(n, bool) and n > limits.max_n:
            raise RequestError(f"n must be at most {limits.max_n} (the server's --max-n), got {n}.", param="n")
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > limits.max_tokens:
            raise RequestError(f"{param} must be at most {limits.max_tokens} (the server's --max-tokens-limit), got "
                               f"{max_tokens}.", param=param)

    def prompts(self, count: int, n: int) -> None:
        """Refuse more prompts, or prompts x ``n`` sequences, than the limits allow (400)."""
        limits = self.limits
        if count > limits.max_prompts:
            raise RequestError(f"prompt: at most {limits.max_prompts} prompts per request (the server's "
                               f"--max-prompts), got {count}.", param="prompt")
        if count * max(n, 1) > limits.max_prompts * limits.max_n // 4:
            raise RequestError(f"prompt: {count} prompts x n={n} are more sequences than one request may ask for "
                               f"({limits.max_prompts * limits.max_n // 4}).", param="n")

    def conversation(self, messages: Any, tools: Any) -> None:
        """Refuse more messages or tools than the limits allow (400)."""
        limits = self.limits
        if isinstance(messages, list) and len(messages) > limits.max_messages:
            raise RequestError(f"messages: at most {limits.max_messages} messages per request (the server's "
                               f"--max-messages), got {len(messages)}.", param="messages")
        if isinstance(tools, list) and len(tools) > limits.max_tools:
            raise RequestError(f"tools: at most {limits.max_tools} tools per request (the server's --max-tools), "
                               f"got {len(tools)}.", param="tools")

    async def prepare(self, request: Request, fn: Callable[[], T], *, heavy: bool = False) -> T:
        """``fn()``, on a worker thread when the request's body is large (or ``heavy``: a client template)."""
        body = await request.body()
        if heavy or len(body) > self.limits.offload_bytes:
            return await run_blocking(fn)
        return fn()

    async def answer(self, size: int, fn: Callable[[], T]) -> T:
        """Build an answer with ``fn()``, on a worker thread when it holds more than a few thousand ids."""
        if size > 4096:
            return await run_blocking(fn)
        return fn()
