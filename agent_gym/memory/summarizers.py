"""The callers that write :class:`~agent_gym.memory.MemorySummary`'s summaries.

A summarizer is any callable ``(messages, *, max_tokens) -> str`` (the :class:`Summarizer`
protocol): :func:`make_summarizer` turns an OpenAI-compatible client or a server address into
one (:class:`ChatClientSummarizer`), and :func:`summarize_within` calls one with a time limit
(:func:`~agent_gym.utils.runtime.call_with_timeout`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agent_gym.errors import CallTimeoutError, SummaryTimeoutError
from agent_gym.utils.runtime import call_with_timeout

__all__ = ["ChatClientSummarizer", "Summarizer", "make_summarizer", "summarize_within"]


@runtime_checkable
class Summarizer(Protocol):
    """Anything that writes a summary: ``summarizer(messages, max_tokens=...) -> str``.

    ``messages`` is a chat request (a system prompt, then the messages to
    summarize) of ``{"role", "content"}`` dicts; the return value is the raw
    reply text (reasoning and ``<answer>`` tags are handled by the memory).
    """

    def __call__(self, messages: list[dict[str, str]], *, max_tokens: int) -> str:
        """Return the summary text for ``messages``, at most ``max_tokens`` tokens."""
        ...


class ChatClientSummarizer:
    """A ``Summarizer`` over an OpenAI-compatible chat completions endpoint.

    Args:
        client: An ``openai.OpenAI`` client or any object with ``chat.completions.create``.
            An ``openai`` client is used with its own retries off (the memory retries).
        model: Model name sent with each request.
        timeout: Per-request timeout in seconds passed to the client, or None.
        extra: Extra keyword arguments for ``create`` (e.g. ``temperature=0``,
            ``extra_body={"chat_template_kwargs": {"enable_thinking": False}}``).
    """

    def __init__(self, client: Any, model: str, *, timeout: float | None = None, **extra: Any) -> None:
        if not callable(getattr(getattr(getattr(client, "chat", None), "completions", None), "create", None)):
            raise TypeError(f"client must have chat.completions.create, got {type(client).__name__}")
        with_options = getattr(client, "with_options", None)
        if callable(with_options):
            try:
                client = with_options(max_retries=0)
            except TypeError:
                pass
        self.client = client
        self.model = model
        self.timeout = timeout
        self.extra = extra

    def __call__(self, messages: list[dict[str, str]], *, max_tokens: int) -> str:
        """Send one chat request and return the first choice's content ("" if none)."""
        kwargs: dict[str, Any] = dict(self.extra)
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        response = self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=max_tokens, **kwargs
        )
        choices = getattr(response, "choices", None) or []
        if not choices:
            return ""
        return getattr(choices[0].message, "content", None) or ""


def make_summarizer(chat_client: Any, model: str, *, timeout: float | None = None) -> Summarizer:
    """Return a ``Summarizer`` for ``chat_client``.

    Args:
        chat_client: An OpenAI-compatible client, a server address (``"host:port"``
            or an ``http(s)://`` base URL; ``/v1`` is added when missing), or a
            callable ``Summarizer``.
        model: Model name used with a client or an address.
        timeout: Per-request timeout for a client or an address.

    Raises:
        TypeError: If ``chat_client`` is none of these.
    """
    create = getattr(getattr(getattr(chat_client, "chat", None), "completions", None), "create", None)
    if callable(create):
        return ChatClientSummarizer(chat_client, model, timeout=timeout)
    if isinstance(chat_client, str):
        import openai

        url = chat_client if "://" in chat_client else f"http://{chat_client}"
        url = url.rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        return ChatClientSummarizer(openai.OpenAI(base_url=url, api_key="EMPTY"), model, timeout=timeout)
    if callable(chat_client):
        return chat_client
    raise TypeError(
        "chat_client must be an OpenAI-compatible client, a server address or a callable summarizer, "
        f"got {type(chat_client).__name__}"
    )


def summarize_within(fn: Summarizer, messages: list[dict[str, str]], max_tokens: int, timeout: float | None) -> Any:
    """Call ``fn``, waiting at most ``timeout`` seconds for it (None: no limit).

    A call that hangs is abandoned on its daemon worker thread
    (:func:`~agent_gym.utils.runtime.call_with_timeout`).

    Raises:
        SummaryTimeoutError: ``fn`` did not return within ``timeout``.
    """
    try:
        return call_with_timeout(fn, timeout, messages, max_tokens=max_tokens)
    except SummaryTimeoutError:
        raise
    except CallTimeoutError:
        raise SummaryTimeoutError(f"summary call did not return within {timeout:g} s") from None
