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
* Role order (``summary_cut``): strict chat templates (Gemma 3, Mistral: "Conversation roles
  must alternate user/assistant/...") refuse a view whose head is followed by a message of the
  wrong role, e.g. the task (user) then a kept user message. With ``summary_cut="aligned"``
  the cut keeps the conversation's own role order: the *anchor* is the first message after the
  head (after a leading system message when the head is empty), and the range ends before a
  message with the anchor's role (the last such end within the budget; else the nearest one
  before the tail, summarized in several requests, each with the summary so far as context).
  When no such message exists (a tool-use episode has one user message), the view shows the
  anchor again between the head and the kept messages (e.g. ``before_raw_message=1``: system
  with the summary, the task, then the kept turns); the range then preferably ends before a
  message with the role that followed the anchor. So a template that renders the whole
  conversation renders the view too. ``"greedy"`` is the reference semantics above (the range
  ends where the budget does). ``"auto"`` (the default) is ``"greedy"`` unless the memory's
  tokenizer has a chat template that refuses the greedy view (then ``"aligned"``); give the
  memory the policy's tokenizer (or ``train_model_tokenizer_path``) for that check, or force
  ``"aligned"``. A view that the template still refuses (its conversation has turns the
  template cannot render at all, e.g. ``tool`` turns for Gemma 3) is logged once as a warning;
  the policy's render then fails, and the rollout ends that episode with ``POLICY_ERROR``
  naming the template error.

The summarizer is an OpenAI-compatible chat endpoint (``openai`` client, or a
``host:port`` / URL string) or any callable following ``Summarizer``. A failing,
empty or hung call is retried with exponential backoff, each attempt bounded by
a timeout; then a warning is logged, ``failed_summaries`` counts it and the
episode goes on unsummarized.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from agent_gym.checks import check_choice, check_float, check_int, check_timeout
from agent_gym.errors import ConfigError
from agent_gym.memory.config import MemoryConfig
from agent_gym.memory.requests import (
    CONTEXT_PREFIX,
    SUMMARY_REQUEST_MODES,
    build_request,
    fallback_request,
    template_error,
)
from agent_gym.memory.simple import MemorySimple
from agent_gym.memory.summarizers import ChatClientSummarizer, Summarizer, make_summarizer, summarize_within
from agent_gym.memory.text import ViewMessage, clean_summary, format_summary_block

__all__ = ["SUMMARY_CUTS", "MemorySummary"]

#: The values of ``MemorySummary(summary_cut=...)`` (see the module docstring).
SUMMARY_CUTS: tuple[str, ...] = ("auto", "greedy", "aligned")

logger = logging.getLogger("agent_gym.memory")

_CONTEXT_PREFIX = CONTEXT_PREFIX
_CONTEXT_RESERVE = 16  # tokens kept for the context message's prefix and overhead


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
        summary_cut: Where a summary ends and how the view joins the head to the messages
            kept after it: ``"greedy"`` (the reference semantics: where the budget ends, the
            view as it falls), ``"aligned"`` (the role order of the conversation is kept, for
            strict templates) or ``"auto"`` (the default: ``"aligned"`` where the memory's
            tokenizer's chat template refuses the greedy view, else ``"greedy"``). See the
            module docstring.

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
        summary_cut: str = "auto",
    ) -> None:
        summary_timeout = check_timeout("summary_timeout", summary_timeout)
        check_int("max_retries", max_retries, low=0)
        check_float("retry_backoff", retry_backoff, low=0.0)
        check_choice("summary_request", summary_request, SUMMARY_REQUEST_MODES)
        check_choice("summary_cut", summary_cut, SUMMARY_CUTS)
        self.summary_request = summary_request
        self.summary_cut = summary_cut
        self._bridge_cache: tuple[tuple[Any, ...], int | None] | None = None
        self._warned_template = False
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
        return self._bounds_with(n, self._last_summary)

    def _bounds_with(self, n: int, s: int) -> tuple[int, int]:
        """``_bounds`` for ``n`` stored messages whose last summary is at index ``s`` (-1: none)."""
        b = self._config.before_raw_message
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
        if not (self._view_n > 0 and all(m["role"] != "summary" for m in new)):
            return False
        head_end, body_start = self._view_bounds
        if self.summary_cut == "greedy" or (head_end, body_start) == (0, 0):
            return True
        # The join is decided from the first message kept after the summary: a view that
        # kept none decides it again with the new messages.
        return any(m["role"] != "summary" for m in self._messages[body_start : self._view_n])

    def _effective_messages(self) -> list[dict[str, Any]]:
        n = len(self._messages)
        head_end, body_start = self._bounds(n)
        bridge = self._bridge(n)
        msgs = self._messages
        middle = [msgs[bridge]] if bridge is not None else []
        return msgs[:head_end] + middle + msgs[body_start:]

    # ------------------------------------------------------------ role order

    def _anchor(self, head_end: int, stop: int) -> int | None:
        """The first conversation message from ``head_end`` on (not a summary, nor a leading system message)."""
        msgs = self._messages
        i = head_end
        if i == 0 and msgs and msgs[0]["role"] == "system":
            i = 1
        while i < stop and msgs[i]["role"] == "summary":
            i += 1
        return i if i < stop else None

    def _join(self, cut: int, anchor: int | None) -> int:
        """How well a cut before ``messages[cut]`` keeps the role order after the head.

        Returns:
            2 when ``messages[cut]`` has the anchor's role (the join is one the conversation
            already has) or nothing is kept after the cut; 1 when it has the role of the
            message after the anchor (the join is that one once the view repeats the anchor);
            0 otherwise.
        """
        msgs = self._messages
        if anchor is None or cut >= len(msgs):
            return 2
        role = msgs[cut]["role"]
        if role == msgs[anchor]["role"]:
            return 2
        after = self._anchor(anchor + 1, len(msgs))
        return 1 if after is not None and role == msgs[after]["role"] else 0

    def _template_refuses(self, messages: list[dict[str, Any]]) -> str | None:
        """The template error of the view of ``messages`` (None: it renders, or no template to ask)."""
        error = template_error(self._counter.tokenizer, self._format(messages))
        return error or None

    def _bridge(self, n: int) -> int | None:
        """The index of the message the view repeats after the head to keep the role order, or None.

        When the first message kept after the last summary does not have the role of the
        first message the summary replaced (the anchor), the view shows the anchor again
        between the head and the kept messages, so that the join is the conversation's own.
        """
        if self.summary_cut == "greedy":
            return None
        head_end, body_start = self._bounds(n)
        if (head_end, body_start) == (0, 0):
            return None
        msgs = self._messages
        first = next((i for i in range(body_start, n) if msgs[i]["role"] != "summary"), None)
        key = (head_end, body_start, first, self.summary_cut, id(self._counter.tokenizer))
        if self._bridge_cache is not None and self._bridge_cache[0] == key:
            return self._bridge_cache[1]
        bridge = self._anchor(head_end, body_start)
        if bridge is not None:
            if first is None:  # nothing kept: the head must hold a conversation message itself
                if any(m["role"] not in ("system", "summary") for m in msgs[:head_end]):
                    bridge = None
            elif msgs[first]["role"] == msgs[bridge]["role"]:
                bridge = None
        if bridge is not None and self.summary_cut == "auto":
            if self._template_refuses(msgs[:head_end] + msgs[body_start:n]) is None:
                bridge = None
            else:
                error = self._template_refuses(msgs[:head_end] + [msgs[bridge]] + msgs[body_start:n])
                if error is not None and not self._warned_template:
                    self._warned_template = True
                    logger.warning(
                        "The prompt view does not render with the tokenizer's chat template even with the role "
                        "order kept (%s); the conversation itself has messages the template refuses.",
                        error,
                    )
        self._bridge_cache = (key, bridge)
        return bridge

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
            bridge = self._bridge(n)
            if bridge is not None:
                total += self._range_tokens(bridge, bridge + 1)
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
        end = self._choose_cut(start, max(end, start + 1), boundary)
        summary = self._summarize_span(summarizer, prompt, previous, start, end)
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

    def _choose_cut(self, start: int, greedy: int, boundary: int) -> int:
        """The end of the range to summarize: ``greedy`` (the budget's) or, to keep the role order, another.

        With ``summary_cut="aligned"`` (or ``"auto"`` when the template refuses the greedy
        view), the range ends before a message with the anchor's role: the last such end within
        the budget's range, else the nearest one before the tail (summarized in several
        requests), else the last end within the range where the view can repeat the anchor.
        """
        mode = self.summary_cut
        if mode == "greedy":
            return greedy
        msgs = self._messages
        n = len(msgs)
        anchor = self._anchor(min(self._config.before_raw_message, n), n)
        if self._join(greedy, anchor) == 2:
            return greedy
        if mode == "auto":
            head_end, body_start = self._bounds_with(n + 1, greedy)
            marked = [*msgs[:greedy], {"role": "summary", "content": ""}, *msgs[greedy:]]
            if self._template_refuses(marked[:head_end] + marked[body_start:]) is None:
                return greedy
        within = range(greedy, start, -1)
        for cut in within:
            if self._join(cut, anchor) == 2:
                return cut
        for cut in range(greedy + 1, boundary + 1):
            if self._join(cut, anchor) == 2:
                return cut
        for cut in within:
            if self._join(cut, anchor) == 1:
                return cut
        return greedy

    def _summarize_span(self, summarizer: Summarizer, prompt: str, previous: str, start: int, end: int) -> str | None:
        """Summarize ``messages[start:end]``: one request when it fits the budget, else several.

        Each further request carries the summary so far as context; a message too long for
        one request is summarized in chunks.
        """
        msgs = self._messages
        budget = self._config.max_prompt_length
        running, pos = previous, start
        while pos < end:
            total = self._counter.count_text(prompt) + 4
            if running:
                total += self._counter.count(_CONTEXT_PREFIX + running)
            stop = pos
            while stop < end:
                t = self._counter.count(msgs[stop]["content"])
                if total + t > budget:
                    break
                total += t
                stop += 1
            if stop > pos:
                result = self._request_summary(summarizer, prompt, running, msgs[pos:stop])
            else:
                result = self._summarize_chunks(summarizer, prompt, running, msgs[pos])
                stop = pos + 1
            if result is None:
                return None
            running, pos = result, stop
        return running or None

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
                raw = summarize_within(summarizer, request, cfg.max_summary_length, self.summary_timeout)
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
