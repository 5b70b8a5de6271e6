"""Chat messages and tool sets as the prompt builders take them: copies, keys and token-id results."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from agent_gym.messages import IMAGES_KEY

__all__ = ["as_id_list", "normalize_messages", "template_supports_tools", "tool_set_key"]


def as_id_list(result: Any) -> list[int]:
    """Return the token ids of an ``apply_chat_template(tokenize=True)`` or tokenizer call.

    Handles a plain list, a ``BatchEncoding``/dict with ``input_ids`` (transformers 5.x)
    and tensors, batched or not (the first row is taken).

    Raises:
        TypeError: If no ids can be found in ``result``.
    """
    if isinstance(result, Mapping) or hasattr(result, "input_ids"):
        result = result["input_ids"] if isinstance(result, Mapping) else result.input_ids
    if hasattr(result, "tolist"):
        result = result.tolist()
    if isinstance(result, (list, tuple)):
        if result and isinstance(result[0], (list, tuple)):
            result = result[0]
        return [int(t) for t in result]
    raise TypeError(f"expected token ids (list or BatchEncoding), got {type(result).__name__}")


def template_supports_tools(tokenizer: Any) -> bool:
    """Return whether the tokenizer's chat template renders a ``tools`` argument.

    Detection is by source: a template that never mentions ``tools`` ignores it.
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        return "tool_use" in template or any("tools" in str(t) for t in template.values())
    return isinstance(template, str) and "tools" in template


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return shallow copies of ``messages`` as text (None content becomes ""; ``images`` is dropped).

    The images an env attached to a message (:mod:`agent_gym.messages`) are not text: a chat
    template renders the content alone, and a conversation whose older images were dropped
    still extends the previous turn's.

    Raises:
        TypeError: ``messages`` is not a sequence of dicts with a ``role``.
        ValueError: ``messages`` is empty.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple, Sequence)):
        raise TypeError(f"messages: expected a sequence of message dicts, got {type(messages).__name__}")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if type(message) is dict and "role" in message:
            item = message.copy()
        elif isinstance(message, Mapping) and "role" in message:
            item = dict(message)
        else:
            raise TypeError(f"messages[{i}]: expected a dict with 'role' and 'content', got {message!r:.80}")
        if item.get("content") is None:
            item["content"] = ""
        item.pop(IMAGES_KEY, None)
        out.append(item)
    if not out:
        raise ValueError("messages: expected at least one message, got an empty sequence")
    return out


def tool_set_key(tools: list[dict[str, Any]] | None) -> str | None:
    """A key equal for equal tool sets (keys sorted); None for no tools."""
    if not tools:
        return None
    try:
        return orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # what orjson does not write (non-str keys, big ints): the standard encoder's text
        return json.dumps(tools, sort_keys=True, ensure_ascii=False)
