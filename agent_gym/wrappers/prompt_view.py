"""What the policy sees of the conversation: all of it, or a memory's prompt view.

``TrajectoryWrapper`` keeps the env's whole conversation and asks a
``PromptView`` once per turn for the messages to hand to the policy. Without
memory the view is the conversation itself; with memory it is the memory's
``get_prompt_messages()`` (summaries, elided thinking). :func:`memory_info` reads a
memory's summary counters for the step info (``info["memory"]``), so a summary call that
failed is seen by whoever reads the trajectory, not only in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["FullConversation", "MemoryView", "PromptView", "make_prompt_view", "memory_info"]


@runtime_checkable
class PromptView(Protocol):
    """Turns the growing conversation into the messages the policy is given."""

    def add(self, messages: Sequence[dict[str, str]]) -> None:
        """Append messages the env produced (including the assistant's)."""

    def messages(self) -> list[dict[str, str]]:
        """Return the prompt messages for the next turn (called once per turn)."""


def memory_info(view: Any) -> dict[str, Any] | None:
    """The summary counters of a view's memory, or None when it has none.

    Args:
        view: A prompt view (a :class:`MemoryView` reports its memory's counters; others None).

    Returns:
        ``{"summaries": written so far, "failed_summaries": summary calls that failed so far
        (after their retries), "summarized": whether the latest view wrote a summary}``, each
        key only when the memory has the counter (``MemorySummary`` has all three); None for a
        view without memory or a memory without any of them.
    """
    memory = getattr(view, "memory", None) if isinstance(view, MemoryView) else None
    if memory is None:
        return None
    out: dict[str, Any] = {}
    summaries = getattr(memory, "summaries", None)
    if isinstance(summaries, list):
        out["summaries"] = len(summaries)
    failed = getattr(memory, "failed_summaries", None)
    if isinstance(failed, int) and not isinstance(failed, bool):
        out["failed_summaries"] = failed
    summarized = getattr(memory, "last_view_summarized", None)
    if isinstance(summarized, bool):
        out["summarized"] = summarized
    return out or None


class FullConversation:
    """The policy sees the whole conversation, unchanged."""

    def __init__(self) -> None:
        self._messages: list[dict[str, str]] = []

    def add(self, messages: Sequence[dict[str, str]]) -> None:
        """Append messages."""
        self._messages.extend(messages)

    def messages(self) -> list[dict[str, str]]:
        """Return a copy of the conversation (each message copied)."""
        return [m.copy() for m in self._messages]


class MemoryView:
    """Adapts a memory object (``add`` + ``get_prompt_messages``) to ``PromptView``.

    Args:
        memory: An object with ``add(messages)`` and ``get_prompt_messages()``,
            e.g. ``agent_gym.MemorySummary``.
    """

    def __init__(self, memory: Any) -> None:
        self.memory = memory

    def add(self, messages: Sequence[dict[str, str]]) -> None:
        """Hand new messages to the memory."""
        if messages:
            self.memory.add(list(messages))

    def messages(self) -> list[dict[str, str]]:
        """Return the memory's prompt view (it may summarize here, once per turn)."""
        return list(self.memory.get_prompt_messages())


class _CountingTokenizer:
    """The tokenizer a ``MemoryConfig``'s memories count with, loaded once and reused.

    A memory given no tokenizer loads ``train_model_tokenizer_path`` itself; doing
    that for every episode would reload the tokenizer each time, so the factory
    loads it on first use and hands the same one to every episode's memory (the
    episodes of one wrapper never run at the same time).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._given = tokenizer
        self._path = ""
        self._loaded: Any = None

    def get(self, config: Any) -> Any:
        """Return the tokenizer for ``config`` (None: count characters / 4)."""
        if self._given is not None:
            return self._given
        path = config.train_model_tokenizer_path
        if not path:
            return None
        if self._loaded is None or path != self._path:
            from agent_gym.memory.tokens import TokenCounter

            self._loaded = TokenCounter(None, path).tokenizer
            self._path = path
        return self._loaded


def make_prompt_view(memory: Any, *, tokenizer: Any = None) -> Callable[[], PromptView]:
    """Return a factory of per-episode prompt views for the ``memory`` argument.

    Args:
        memory: None, a ``MemoryConfig``, or a zero-argument callable returning
            a memory object (``add`` + ``get_prompt_messages``).
        tokenizer: Counts a ``MemoryConfig`` memory's tokens (default: the
            config's ``train_model_tokenizer_path``, loaded once for all the
            factory's memories, else characters / 4).

    Raises:
        TypeError: If ``memory`` is none of these.
    """
    if memory is None:
        return FullConversation
    if callable(memory) and not hasattr(memory, "get_prompt_messages"):
        return lambda: MemoryView(memory())
    from agent_gym.memory import MemoryConfig, memory_from_config

    if isinstance(memory, MemoryConfig):
        counting = _CountingTokenizer(tokenizer)
        return lambda: MemoryView(memory_from_config(memory, tokenizer=counting.get(memory)))
    raise TypeError(
        f"memory: expected None, a MemoryConfig or a callable returning a memory object, got {type(memory).__name__}"
    )
