"""``MemorySummary``: a memory that summarizes old messages when the prompt outgrows its budget.

Semantics (the reference memory API):

* Effective messages: the head ``messages[:before_raw_message]``, the body from
  ``max(before_raw_message, last summary)`` (that summary included) and the tail
  ``messages[len + end_raw_message:]``; the tail wins where windows overlap and
  whatever lies between the head and the last summary is dropped.
* When ``use_summary`` is set and the effective messages count more than
  ``max_prompt_length`` tokens, one summary is written per turn: the range starts
  after the last summary (and after a leading system message and the head), ends
  before the tail, and takes messages greedily while the summary prompt, its 4
  tokens of overhead and the messages fit the budget. A single message too long
  for that is cut into chunks summarized one after the other, each with the
  summary so far as context. The new ``{"role": "summary"}`` message goes right
  after the summarized messages. The previous summary, if any, is given to the
  summarizer as context too, so nothing it held is lost. The request is shaped so
  that the summarizer's chat template accepts it (``summary_request``, see
  :mod:`agent_gym.memory.requests`): a range that strict templates refuse goes
  as one transcript in a ``user`` message.
* The view: an empty system message is prepended if the first message is not a
  system one; each summary is appended to the system content under
  ``[Historical Information Summary]``; then the thinking filter, role/content
  keys only, and a ``PROMPT_TRUNCATION`` warning if still over budget. With
  ``before_raw_message=0`` a leading system message is outside the head, so a
  summary drops it from the view (a warning says so once): use
  ``before_raw_message >= 1`` to keep task instructions and tool descriptions.

The summarizer is an OpenAI-compatible chat endpoint (``openai`` client, or a
``host:port`` / URL string) or any callable following ``Summarizer``. A failing,
empty or hung call is retried with exponential backoff, each attempt bounded by
a timeout; then a warning is logged, ``failed_summaries`` counts it and the
episode goes on unsummarized.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from agent_gym.checks import check_choice, check_float, check_int, check_timeout
from agent_gym.errors import ConfigError, SummaryTimeoutError
from agent_gym.memory.config import MemoryConfig
from agent_gym.memory.requests import CONTEXT_PREFIX, SUMMARY_REQUEST_MODES, build_request, fallback_request
from agent_gym.memory.simple import MemorySimple
from agent_gym.memory.text import ViewMessage, clean_summary, format_summary_block

__all__ = ["ChatClientSummarizer", "MemorySummary", "SummaryTimeoutError", "Summarizer", "make_summarizer"]

logger = logging.getLogger("agent_gym.memory")

_CONTEXT_PREFIX = CONTEXT_PREFIX
_CONTEXT_RESERVE = 16  # tokens kept for the context message's prefix and overhead


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


def _call_with_timeout(fn: Summarizer, messages: list[dict[str, str]], max_tokens: int, timeout: float | None) -> Any:
    """Call ``fn`` in a daemon thread and wait at most ``timeout`` seconds for it.

    A call that hangs is abandoned (its thread cannot be killed, but being a
    daemon it never keeps the interpreter alive).
    """
    if timeout is None:
        return fn(messages, max_tokens=max_tokens)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(messages, max_tokens=max_tokens)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="agent-gym-summary", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise SummaryTimeoutError(f"summary call did not return within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class MemorySummary(MemorySimple):
    """A memory that keeps the prompt within ``max_prompt_length`` by summarizing.

    Args:
        config: A ``MemoryConfig`` (copied), a dict of its fields, or None.
        chat_client: Who writes summaries: an OpenAI-compatible client, a server
            address (``"host:port"`` or base URL), or a callable ``Summarizer``.
            Defaults to ``config.oai_client``. Clients and addresses are sent
            ``config.oai_model_name``.
        tokenizer: Tokenizer used to count tokens (see ``MemorySimple``).
        summary_timeout: Seconds one summary attempt may take (None: unbounded).
        max_retries: Attempts after the first failed one (failure: an error,
            a timeout, or an empty summary).
        retry_backoff: Seconds before the first retry; doubled for each next one.
        summary_request: How the range goes to the summarizer: ``"messages"`` (as they
            are), ``"transcript"`` (one ``user`` message: what strict templates accept) or
            ``"auto"`` (the default: the messages when they alternate user/assistant or the
            tokenizer's chat template accepts them, else the transcript; without a template
            to ask, the retries of a failed request use the transcript). See
            :mod:`agent_gym.memory.requests`.

    Raises:
        ConfigError: If ``use_summary`` is set and there is no summarizer, or a
            retry setting is negative.
        TypeError: If ``chat_client`` has an unusable type.
    """

    def __init__(
        self,
        config: MemoryConfig | Mapping[str, Any] | None = None,
        *,
        chat_client: Any = None,
        tokenizer: Any = None,
        summary_timeout: float | None = 60.0,
        max_retries: int = 2,
        retry_backoff: float = 1.0,
        summary_request: str = "auto",
    ) -> None:
        summary_timeout = check_timeout("summary_timeout", summary_timeout)
        check_int("max_retries", max_retries, low=0)
        check_float("retry_backoff", retry_backoff, low=0.0)
        check_choice("summary_request", summary_request, SUMMARY_REQUEST_MODES)
        self.summary_request = summary_request
        self.chat_client = chat_client
        self.summary_timeout = summary_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._explicit = None if chat_client is None else make_summarizer(chat_client, "", timeout=summary_timeout)
        self._from_config: tuple[Any, str, Summarizer] | None = None
        self.summaries: list[str] = []
        self.failed_summaries = 0
        self._last_view_summarized = False
        self._warned_system = False
        super().__init__(config, tokenizer=tokenizer)
        self._check_config(self._config)

    # ------------------------------------------------------------- summarizer

    @property
    def last_view_summarized(self) -> bool:
        """Whether a new summary was written while building the latest view."""
        return self._last_view_summarized

    def _summarizer(self, config: MemoryConfig) -> Summarizer | None:
        """The summarizer to use with ``config``: ``chat_client``, else ``config.oai_client``."""
        if self._explicit is not None:
            if isinstance(self._explicit, ChatClientSummarizer):
                self._explicit.model = config.oai_model_name
            return self._explicit
        client = config.oai_client
        if client is None:
            return None
        cached = self._from_config
        if cached is None or cached[0] is not client or cached[1] != config.oai_model_name:
            summarizer = ChatClientSummarizer(client, config.oai_model_name, timeout=self.summary_timeout)
            self._from_config = (client, config.oai_model_name, summarizer)
            return summarizer
        return cached[2]

    def _check_config(self, config: MemoryConfig) -> None:
        """Reject ``use_summary`` without anything to write summaries."""
        if config.use_summary and self._explicit is None and config.oai_client is None:
            raise ConfigError(
                "oai_client: use_summary is True but no summarizer is set; "
                "pass chat_client= to MemorySummary or set MemoryConfig.oai_client"
            )

    def _config_changed(self) -> None:
        self._check_config(self._config)
        super()._config_changed()

    # -------------------------------------------------------- effective view

    def _bounds(self, n: int) -> tuple[int, int]:
        b = self._config.before_raw_message
        s = self._last_summary
        if s < 0 or s >= n:
            return 0, 0
        body_start = max(b, s)
        tail_start = max(0, n + self._config.end_raw_message)
        if tail_start < body_start:  # the tail reaches back over the body: it wins
            head_end, body_start = min(b, tail_start), tail_start
        else:
            head_end = b
        if head_end >= body_start:
            return 0, 0
        return head_end, body_start

    def _format(self, effective: list[dict[str, Any]]) -> list[ViewMessage]:
        if effective and effective[0]["role"] == "system":
            system, rest = effective[0]["content"], effective[1:]
        else:
            system, rest = "", effective
        blocks = [format_summary_block(m["content"]) for m in rest if m["role"] == "summary"]
        out = [ViewMessage("system", system + "".join(blocks))]
        out.extend(ViewMessage(m["role"], m["content"]) for m in rest if m["role"] != "summary")
        return out

    def _can_extend(self, new: list[ViewMessage]) -> bool:
        return self._view_n > 0 and all(m["role"] != "summary" for m in new)

    # ------------------------------------------------------------ summarizing

    def _before_view(self) -> None:
        self._last_view_summarized = False
        cfg = self._config
        if not cfg.use_summary:
            return
        n = len(self._messages)
        head_end, body_start = self._bounds(n)
        if (head_end, body_start) == (0, 0):
            total = self._cum[n]
        else:
            total = self._cum[head_end] + self._range_tokens(body_start, n)
        if total <= cfg.max_prompt_length:
            return
        logger.info(
            "Prompt length (%d) exceeds max_prompt_length (%d), triggering summarization.", total, cfg.max_prompt_length
        )
        self._summarize_once()

    def _summarize_once(self) -> None:
        """Write at most one summary (one range, or one over-long message in chunks)."""
        cfg = self._config
        msgs = self._messages
        n = len(msgs)
        start = max(self._last_summary + 1, 1 if msgs and msgs[0]["role"] == "system" else 0, cfg.before_raw_message)
        boundary = n + cfg.end_raw_message
        if start >= boundary:
            logger.info("Nothing to summarize between the raw windows (range %d..%d).", start, boundary)
            return
        summarizer = self._summarizer(cfg)
        if summarizer is None:  # pragma: no cover - prevented by _check_config
            return
        prompt = cfg.formatted_summary_prompt()
        previous = msgs[self._last_summary]["content"] if self._last_summary >= 0 else ""
        base = self._counter.count_text(prompt) + 4
        if previous:
            base += self._counter.count(_CONTEXT_PREFIX + previous)
        budget = cfg.max_prompt_length
        total, end = base, start
        while end < boundary:
            t = self._counter.count(msgs[end]["content"])
            if total + t > budget:
                break
            total += t
            end += 1
        if end > start:
            summary = self._request_summary(summarizer, prompt, previous, msgs[start:end])
        else:
            summary = self._summarize_chunks(summarizer, prompt, previous, msgs[start])
            end = start + 1
        if summary is None:
            return
        self.summaries.append(summary)
        self._insert_message(end, {"role": "summary", "content": summary})
        self._last_view_summarized = True
        if msgs[0]["role"] == "system" and cfg.before_raw_message == 0 and not self._warned_system:
            self._warned_system = True
            logger.warning(
                "The system message is not in the raw head (before_raw_message=0), so the summary view no longer "
                "contains it; set before_raw_message >= 1 to keep it."
            )

    def _summarize_chunks(
        self, summarizer: Summarizer, prompt: str, previous: str, message: dict[str, Any]
    ) -> str | None:
        """Summarize one message too long for the budget, chunk by chunk."""
        cfg = self._config
        overhead = self._counter.count_text(prompt) + 4 + 4
        chunk_tokens = cfg.max_prompt_length - overhead - cfg.max_summary_length - _CONTEXT_RESERVE
        if chunk_tokens < 1:
            logger.warning(
                "Cannot summarize: the summary prompt (%d tokens) and max_summary_length (%d) leave no room "
                "for content within max_prompt_length (%d); the conversation is kept unsummarized.",
                overhead,
                cfg.max_summary_length,
                cfg.max_prompt_length,
            )
            self.failed_summaries += 1
            return None
        running = previous
        for piece in self._counter.split(message["content"], chunk_tokens):
            result = self._request_summary(summarizer, prompt, running, [{"role": message["role"], "content": piece}])
            if result is None:
                return None
            running = result
        return running or None

    def _request_summary(
        self, summarizer: Summarizer, prompt: str, previous: str, messages: list[dict[str, Any]]
    ) -> str | None:
        """Summarize ``messages`` in a request the template accepts (see :mod:`agent_gym.memory.requests`)."""
        mode = self.summary_request
        tokenizer = self._counter.tokenizer if mode == "auto" else None
        request = build_request(mode, prompt, previous, messages, tokenizer)
        return self._attempt(summarizer, request, fallback_request(mode, request, prompt, previous, messages))

    def _attempt(
        self, summarizer: Summarizer, request: list[dict[str, str]], fallback: list[dict[str, str]] | None = None
    ) -> str | None:
        """Call the summarizer with retries and backoff; None after the last failure (logged and counted).

        Args:
            summarizer: Writes the summary.
            request: The request of the first attempt.
            fallback: The request of the retries after a failed first attempt (None: ``request``).
        """
        cfg = self._config
        error = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff * 2 ** (attempt - 1))
                if fallback is not None:
                    request = fallback
            try:
                raw = _call_with_timeout(summarizer, request, cfg.max_summary_length, self.summary_timeout)
            except Exception as exc:  # noqa: BLE001 - any summarizer failure is retried, then logged
                error = f"{type(exc).__name__}: {exc}"
                continue
            if raw is not None and not isinstance(raw, str):
                error = f"summarizer returned {type(raw).__name__}, not str"
                continue
            text = clean_summary(raw)
            if text:
                return self._counter.truncate(text, cfg.max_summary_length)
            error = "the summary was empty"
        self.failed_summaries += 1
        logger.warning(
            "Summary call failed after %d attempt(s) (%s); the conversation is kept unsummarized this turn.",
            self.max_retries + 1,
            error,
        )
        return None
