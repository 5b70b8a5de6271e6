"""``MemorySimple``: an episode's messages and the prompt view the policy is given.

The memory holds every message of the episode (``add``) and builds a prompt view
(``get_prompt_messages``): only ``role``/``content`` keys, thinking elided when
``simplify_thinking`` is set, and a ``PROMPT_TRUNCATION`` warning when the view
is over ``max_prompt_length`` tokens. ``MemorySummary`` (summary.py) builds on it.

The view is maintained incrementally: when messages are only appended, a call
costs time proportional to the new messages (token counts are cached per
content, token totals kept as prefix sums), and the returned list shares its
read-only message dicts (``ViewMessage``) with the previous views. After a
structural change (a summary, a config update) the view is rebuilt once.

A wrapper uses it once per turn::

    memory.add(new_env_messages)
    prompt = memory.get_prompt_messages()

``last_view_rewritten`` tells whether that view rewrote earlier messages (for
logging and tests); the trajectory's segment boundaries are decided from the
token ids by the wrapper's token assembly, not from this flag.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from agent_gym.memory.config import MemoryConfig
from agent_gym.memory.text import ViewMessage, elide_thinking
from agent_gym.memory.tokens import TokenCounter

__all__ = ["ALLOWED_ROLES", "MemorySimple"]

logger = logging.getLogger("agent_gym.memory")

#: Roles accepted by ``add``; ``summary`` marks a summary message (see ``MemorySummary``).
ALLOWED_ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool", "summary"})


def _coerce_config(config: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """Return a private copy of ``config`` (a ``MemoryConfig``, a dict of its fields, or None)."""
    if config is None:
        return MemoryConfig()
    if isinstance(config, MemoryConfig):
        return config.model_copy()
    if isinstance(config, Mapping):
        return MemoryConfig(**dict(config))
    raise TypeError(f"config must be a MemoryConfig, a dictionary or None, got {type(config).__name__}")


def _validated(message: Any, position: int) -> dict[str, Any]:
    """Return a shallow copy of ``message`` after checking its role and content."""
    if not isinstance(message, Mapping):
        raise TypeError(
            f"message {position}: expected a mapping with 'role' and 'content', got {type(message).__name__}"
        )
    role = message.get("role")
    content = message.get("content")
    if not isinstance(role, str) or role not in ALLOWED_ROLES:
        raise ValueError(f"message {position}: role must be one of {sorted(ALLOWED_ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise TypeError(f"message {position}: content must be a str, got {type(content).__name__}")
    return dict(message)


class MemorySimple:
    """All messages of one episode, shown to the policy with optional thinking elision.

    Args:
        config: A ``MemoryConfig`` (copied), a dict of its fields, or None for the defaults.
        tokenizer: Tokenizer used to count tokens (an object with ``encode``);
            when None, ``config.train_model_tokenizer_path`` is loaded lazily if
            set, else a message counts ``ceil(chars / 4)`` tokens.

    Raises:
        TypeError: If ``config`` or ``tokenizer`` has the wrong type.
        pydantic.ValidationError: If a config dict is invalid.
    """

    def __init__(self, config: MemoryConfig | Mapping[str, Any] | None = None, *, tokenizer: Any = None) -> None:
        self._config = _coerce_config(config)
        self._config_snapshot = dict(self._config.__dict__)
        self._tokenizer_arg = tokenizer
        self._counter = TokenCounter(tokenizer, self._config.train_model_tokenizer_path)
        self._messages: list[dict[str, Any]] = []
        self._cum: list[int] = [0]
        self._last_summary = -1
        self._version = 0
        self._pending: list[ViewMessage] = []
        self._view: list[ViewMessage] = []
        self._view_tokens = 0
        self._view_version = -1
        self._view_valid = False
        self._view_bounds: tuple[int, int] = (0, 0)
        self._view_n = 0
        self._filter_end = 0
        self._last_rewritten = False

    # ------------------------------------------------------------------ state

    @property
    def config(self) -> MemoryConfig:
        """This memory's own config (a copy of the one given); see ``update_config``."""
        return self._config

    @property
    def tokenizer(self) -> Any:
        """The tokenizer used to count tokens, or None."""
        return self._counter.tokenizer

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Copies of the stored messages, summaries (role ``summary``) included."""
        return [dict(m) for m in self._messages]

    @property
    def last_view_rewritten(self) -> bool:
        """Whether the latest view is not the previous view plus the messages added since.

        False for the first non-empty view of an episode and when only new
        messages were appended unchanged. True after a summary, an elided thought, or a config
        change that altered earlier messages. Informational: the prompt ids built from
        such a view no longer extend the previous turn's, and the ``TrajectoryWrapper``'s
        token assembly (which checks the ids themselves) starts a new segment there.
        """
        return self._last_rewritten

    @property
    def last_view_tokens(self) -> int:
        """Token count of the latest view (counted per message like the budget)."""
        return self._view_tokens

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, messages: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
        """Append messages to the episode.

        Args:
            messages: One message dict or an iterable of them; each needs a
                ``role`` in ``ALLOWED_ROLES`` and a ``str`` content. Other keys
                are stored but never shown in the prompt view.

        Raises:
            TypeError: If a message is not a mapping or its content is not a str.
            ValueError: If a role is not allowed. Nothing is added on error.
        """
        if isinstance(messages, Mapping):
            batch = [messages]
        elif isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
            raise TypeError(f"messages must be a message dict or an iterable of them, got {type(messages).__name__}")
        else:
            batch = list(messages)
        checked = [_validated(m, len(self._messages) + i) for i, m in enumerate(batch)]
        if not checked:
            return
        for message in checked:
            if message["role"] == "summary":
                self._last_summary = len(self._messages)
            self._messages.append(message)
            self._pending.append(ViewMessage(message["role"], message["content"]))
        self._version += 1

    def clear(self) -> None:
        """Forget every message (the config and tokenizer are kept)."""
        self._messages.clear()
        self._cum = [0]
        self._last_summary = -1
        self._pending = []
        self._view = []
        self._view_tokens = 0
        self._view_valid = False
        self._view_version = -1
        self._last_rewritten = False
        self._version += 1

    def update_config(self, config: MemoryConfig | dict[str, Any]) -> None:
        """Apply new settings (validated together; on error nothing changes).

        Args:
            config: A dict of ``MemoryConfig`` fields to change, or a whole ``MemoryConfig``.

        Raises:
            TypeError: If ``config`` is neither.
            pydantic.ValidationError: If a field is unknown or a value invalid.
        """
        if isinstance(config, MemoryConfig):
            new = config.model_copy()
        elif isinstance(config, dict):
            new = self._config.updated(config)
        else:
            raise TypeError(f"config must be a dictionary or None, got {type(config).__name__}")
        self._check_config(new)
        self._config = new
        self._config_changed()

    def _check_config(self, config: MemoryConfig) -> None:
        """Hook: reject a config this memory cannot work with (raise ``ConfigError``)."""

    def _config_changed(self) -> None:
        """Invalidate what depends on the config after it changed."""
        self._config_snapshot = dict(self._config.__dict__)
        path = self._config.train_model_tokenizer_path
        if self._tokenizer_arg is None and path != getattr(self._counter, "_path", ""):
            self._counter = TokenCounter(None, path)
            self._cum = [0]
        self._view_valid = False
        self._version += 1

    # ----------------------------------------------------------- token counts

    def count_tokens(self, messages: Iterable[Mapping[str, Any]] | None = None) -> int:
        """Return the token count of ``messages`` (default: every stored message).

        Each message counts ``len(tokenizer.encode(content)) + 4``, or
        ``ceil(len(content) / 4)`` without a tokenizer; counts are cached.
        """
        if messages is None:
            self._sync_counts()
            return self._cum[-1]
        return sum(self._counter.count(m["content"]) for m in messages)

    def _sync_counts(self) -> None:
        """Extend the prefix sums of token counts to every stored message."""
        cum = self._cum
        count = self._counter.count
        msgs = self._messages
        for i in range(len(cum) - 1, len(msgs)):
            cum.append(cum[-1] + count(msgs[i]["content"]))

    def _insert_message(self, index: int, message: dict[str, Any]) -> None:
        """Insert a message (e.g. a summary) and fix the prefix sums from there."""
        self._messages.insert(index, message)
        del self._cum[index + 1 :]
        self._sync_counts()
        if message["role"] == "summary" and index >= self._last_summary:
            self._last_summary = index
        elif index <= self._last_summary:
            self._last_summary += 1
        self._view_valid = False
        self._version += 1

    def _range_tokens(self, start: int, end: int) -> int:
        """Token count of ``messages[start:end]`` (prefix sums must be synced)."""
        return self._cum[end] - self._cum[start]

    # ------------------------------------------------------------ prompt view

    def get_prompt_messages(self, config: dict[str, Any] | None = None) -> list[dict[str, str]]:
        """Return the messages to give the policy this turn.

        Calling it again without new messages or config changes returns the same
        view and does no work (no second summary in a turn).

        Args:
            config: Optional dict of ``MemoryConfig`` fields to update first.

        Returns:
            A new list of read-only ``{"role", "content"}`` dicts (copy one with
            ``dict(m)`` to modify it).

        Raises:
            TypeError: If ``config`` is not a dict or None.
            pydantic.ValidationError: If the config update is invalid.
        """
        if config is not None:
            if not isinstance(config, dict):
                raise TypeError(f"config must be a dictionary or None, got {type(config).__name__}")
            self.update_config(config)
        if self._config.__dict__ != self._config_snapshot:  # the config object was assigned to directly
            self._config_changed()
        if self._view_valid and self._view_version == self._version:
            self._last_rewritten = False
            return list(self._view)
        self._sync_counts()
        self._before_view()
        self._refresh_view()
        limit = self._config.max_prompt_length
        if self._view_tokens > limit:
            logger.warning(
                "PROMPT_TRUNCATION: Prompt length (%d) exceeds max_prompt_length (%d)", self._view_tokens, limit
            )
        return list(self._view)

    async def aget_prompt_messages(self, config: dict[str, Any] | None = None) -> list[dict[str, str]]:
        """Async ``get_prompt_messages``: runs in a worker thread (a summary call may block).

        Do not call it concurrently on the same memory.
        """
        return await asyncio.to_thread(self.get_prompt_messages, config)

    def _before_view(self) -> None:
        """Hook run once per new state before the view is refreshed (summarizing goes here)."""

    def _bounds(self, n: int) -> tuple[int, int]:
        """Effective messages for ``n`` stored ones: ``messages[:head_end] + messages[body_start:]``.

        ``(0, 0)`` means every message; the pair only changes when the view's
        structure does, so an unchanged pair lets the view be extended in place.
        """
        return 0, 0

    def _format(self, effective: list[dict[str, Any]]) -> list[ViewMessage]:
        """Turn the effective messages into view messages (role/content only)."""
        return [ViewMessage(m["role"], m["content"]) for m in effective]

    def _can_extend(self, new: list[ViewMessage]) -> bool:
        """Whether appending ``new`` to the current view gives the same view as a rebuild."""
        return True

    def _refresh_view(self) -> None:
        """Bring the view up to date, incrementally when possible, and set ``last_view_rewritten``."""
        pending, self._pending = self._pending, []
        n = len(self._messages)
        had_view = self._view_version >= 0 and bool(self._view)  # an empty view is no previous prompt
        bounds = self._bounds(n)
        extend = (
            self._view_valid
            and n == self._view_n + len(pending)
            and bounds == self._view_bounds
            and self._can_extend(pending)
        )
        if extend:
            count = self._counter.count
            self._view.extend(pending)
            self._view_tokens += sum(count(m["content"]) for m in pending)
            rewritten = self._apply_filter() and had_view
        else:
            old = self._view
            view = self._format(self._effective_messages())
            self._view = view
            self._filter_end = 0
            self._view_tokens = sum(self._counter.count(m["content"]) for m in view)
            self._apply_filter()
            k = len(old)
            rewritten = had_view and not (view[:k] == old and view[k:] == pending)
        self._view_bounds = bounds
        self._view_n = n
        self._view_valid = True
        self._view_version = self._version
        self._last_rewritten = rewritten

    def _apply_filter(self) -> bool:
        """Apply the thinking filter to the part of its window not done yet.

        The window is view indices ``[before_raw_message, max(0, len + end_raw_message))``;
        it only grows while messages are appended, so each message is looked at once.

        Returns:
            Whether a message was changed (an elided thought).
        """
        cfg = self._config
        view = self._view
        end = max(0, len(view) + cfg.end_raw_message)
        if not cfg.simplify_thinking:
            self._filter_end = end
            return False
        changed = False
        count = self._counter.count
        for i in range(max(cfg.before_raw_message, self._filter_end), end):
            m = view[i]
            if m["role"] != "assistant":
                continue
            content = m["content"]
            elided = elide_thinking(content)
            if elided != content:
                view[i] = ViewMessage("assistant", elided)
                self._view_tokens += count(elided) - count(content)
                changed = True
        self._filter_end = max(self._filter_end, end)
        return changed

    @staticmethod
    def _remove_message_other_key(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
        """Return copies of ``messages`` with only their ``role`` and ``content`` keys."""
        return [{"role": m["role"], "content": m["content"]} for m in messages]

    def _effective_messages(self) -> list[dict[str, Any]]:
        """The stored messages the view is built from (see ``_bounds``)."""
        head_end, body_start = self._bounds(len(self._messages))
        return self._messages[:head_end] + self._messages[body_start:]
