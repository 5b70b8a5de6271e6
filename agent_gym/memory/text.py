"""Text helpers of the memories: thinking elision, summary clean-up, read-only view messages.

``elide_thinking`` implements the thinking filter (closed ``<think>`` blocks
become ``<think>Thinking process omitted.</think>``; an unclosed ``<think>`` is
left alone). ``clean_summary`` post-processes a summarizer's reply (drops its
reasoning, keeps the ``<answer>`` part if there is one). ``ViewMessage`` is the
read-only dict the prompt views are made of, so they can be shared between calls
without copying.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

__all__ = ["THINKING_OMITTED", "ViewMessage", "clean_summary", "elide_thinking", "format_summary_block"]

#: What a closed thinking block becomes under ``simplify_thinking``.
THINKING_OMITTED: str = "<think>Thinking process omitted.</think>"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def elide_thinking(content: str) -> str:
    """Replace every closed ``<think>...</think>`` block of ``content`` with ``THINKING_OMITTED``.

    Content without a closed block (including an unclosed ``<think>``) is
    returned unchanged; already elided blocks stay as they are.
    """
    if "<think>" not in content or "</think>" not in content:
        return content
    return _THINK_BLOCK.sub(THINKING_OMITTED, content)


def clean_summary(text: str | None) -> str:
    """Post-process a summarizer's reply.

    Closed ``<think>...</think>`` blocks are removed; a stray ``</think>`` drops
    everything before it (a reply whose opening tag was in the prompt); an
    unclosed ``<think>`` drops everything after it (reasoning cut by the token
    limit). If an ``<answer>...</answer>`` block remains, only its inside is
    kept. Surrounding whitespace is stripped.

    Args:
        text: The reply text (None counts as empty).

    Returns:
        The summary text, possibly empty.
    """
    if not text:
        return ""
    out = _THINK_BLOCK.sub("", text)
    if "</think>" in out:
        out = out.rsplit("</think>", 1)[1]
    if "<think>" in out:
        out = out.split("<think>", 1)[0]
    match = _ANSWER_BLOCK.search(out)
    if match is not None:
        out = match.group(1)
    return out.strip()


def format_summary_block(summary: str) -> str:
    """Return the text appended to the system message for one summary."""
    return "\n\n[Historical Information Summary]:\n\n" + summary + "\n\n"


class ViewMessage(dict):
    """A read-only ``{"role", "content"}`` dict, shared between successive prompt views.

    It is a real ``dict`` (JSON, equality, ``**`` unpacking and ``dict(m)`` work),
    but mutating it raises ``TypeError``: copy it (``dict(m)``) to modify. Copies,
    pickles and deep copies are plain mutable dicts.
    """

    __slots__ = ()

    def __init__(self, role: str, content: str) -> None:
        dict.__init__(self, role=role, content=content)

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("prompt-view messages are shared and read-only; copy one with dict(message) to modify it")

    __setitem__ = _readonly
    __delitem__ = _readonly
    __ior__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly

    def copy(self) -> dict[str, Any]:
        """Return a mutable plain-dict copy."""
        return dict(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))
