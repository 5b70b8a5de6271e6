"""Conversation memories: what of a long episode the policy is shown each turn.

* ``MemoryConfig``: validated settings (thinking elision, summaries, token budget, raw windows).
* ``MemorySimple``: every message, optional thinking elision, role/content keys only.
* ``MemorySummary``: additionally summarizes old messages through an OpenAI-compatible
  chat endpoint (or any ``Summarizer`` callable) when the prompt exceeds the budget.

Per episode, a wrapper creates one memory (``memory_from_config``), ``add``s the
messages the env produced each turn and calls ``get_prompt_messages()`` once per
turn. A view that rewrote earlier messages (``last_view_rewritten``) makes the next
prompt ids stop extending the previous ones; the wrapper's token assembly sees that
in the ids and starts a new trajectory segment.

The parts (token counting in :mod:`~agent_gym.memory.tokens`, text rewriting in
:mod:`~agent_gym.memory.text`, the chat-client summarizer in
:mod:`~agent_gym.memory.summary`) are imported from their modules.
"""

from __future__ import annotations

from typing import Any

from agent_gym.memory.config import DEFAULT_SUMMARY_SYSTEM_PROMPT, MemoryConfig
from agent_gym.memory.simple import MemorySimple
from agent_gym.memory.summarizers import Summarizer
from agent_gym.memory.summary import MemorySummary

__all__ = [
    "DEFAULT_SUMMARY_SYSTEM_PROMPT",
    "MemoryConfig",
    "MemorySimple",
    "MemorySummary",
    "Summarizer",
    "memory_from_config",
]


def memory_from_config(
    config: MemoryConfig, *, chat_client: Any = None, tokenizer: Any = None, **summary_options: Any
) -> MemorySimple:
    """Create a fresh memory for one episode.

    Args:
        config: The settings; each memory gets its own copy.
        chat_client: Summarizer for ``MemorySummary`` (default ``config.oai_client``).
        tokenizer: Tokenizer used to count tokens (default: ``train_model_tokenizer_path`` or chars / 4).
        **summary_options: ``summary_timeout``, ``max_retries``, ``retry_backoff``,
            ``summary_request`` and ``summary_cut`` of ``MemorySummary``.

    Returns:
        A ``MemorySummary`` when ``config.use_summary`` is set, else a
        ``MemorySimple`` (``chat_client`` and ``summary_options`` are then unused).

    Raises:
        TypeError: If ``config`` is not a ``MemoryConfig``.
        agent_gym.errors.ConfigError: If ``use_summary`` is set without a summarizer.
    """
    if not isinstance(config, MemoryConfig):
        raise TypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
    if config.use_summary:
        return MemorySummary(config, chat_client=chat_client, tokenizer=tokenizer, **summary_options)
    return MemorySimple(config, tokenizer=tokenizer)
