"""Summary requests that every chat template accepts.

A summary request is the summary prompt (a ``system`` message), optionally the previous
summary as context, and the range of messages to summarize. Strict templates (Gemma 3,
Mistral: "Conversation roles must alternate user/assistant/...") and templates that pair tool
results with calls (gpt-oss) refuse a raw range: it may start with an assistant message, hold
two user messages in a row, or hold tool results without their calls. The *transcript* form
puts the whole range into one ``user`` message, each message under its role::

    [system] summary prompt
    [user]   [Summary of the earlier conversation]: ... (if any)

             Conversation to summarize:

             [user]
             ...

             [assistant]
             ...

:func:`build_request` chooses the form: ``"messages"`` and ``"transcript"`` force one;
``"auto"`` keeps the messages when they strictly alternate user/assistant from a user
message, and otherwise uses the transcript when the memory's tokenizer has a chat template
that refuses the messages form; without a template to ask, the messages form is sent first
and :func:`fallback_request` gives the transcript for the retries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SUMMARY_REQUEST_MODES",
    "alternates",
    "build_request",
    "fallback_request",
    "template_accepts",
    "template_error",
    "transcript_request",
]

SUMMARY_REQUEST_MODES = ("auto", "messages", "transcript")
"""The values of ``MemorySummary(summary_request=...)``."""

CONTEXT_PREFIX = "[Summary of the earlier conversation]:\n\n"
_TRANSCRIPT_HEAD = "Conversation to summarize:\n\n"


def alternates(request: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the messages after a leading ``system`` one alternate user/assistant, starting with user."""
    body = request[1:] if request and request[0].get("role") == "system" else request
    return bool(body) and all(m.get("role") == ("user" if i % 2 == 0 else "assistant") for i, m in enumerate(body))


def transcript_request(prompt: str, previous: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The summary prompt and one ``user`` message holding the context and the range as a transcript."""
    parts = [CONTEXT_PREFIX + previous + "\n\n"] if previous else []
    parts.append(_TRANSCRIPT_HEAD)
    parts.append("\n\n".join(f"[{m.get('role')}]\n{m.get('content') or ''}" for m in messages))
    return [{"role": "system", "content": prompt}, {"role": "user", "content": "".join(parts)}]


def _messages_request(prompt: str, previous: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    request = [{"role": "system", "content": prompt}]
    if previous:
        request.append({"role": "user", "content": CONTEXT_PREFIX + previous})
    request.extend({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
    return request


def template_error(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the tokenizer's chat template refuses ``messages`` ("" if it renders them; None: no template to ask).

    The messages are rendered as a prompt (with the generation prompt), as a server or a policy would.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    try:
        tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - any template error means the server would refuse it too
        return f"{type(exc).__name__}: {exc}" or type(exc).__name__
    return ""


def template_accepts(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether the tokenizer's chat template renders ``messages`` (None: no template to ask)."""
    error = template_error(tokenizer, messages)
    return None if error is None else not error


def build_request(
    mode: str, prompt: str, previous: str, messages: Sequence[Mapping[str, Any]], tokenizer: Any = None
) -> list[dict[str, str]]:
    """The summary request for ``messages`` in the given mode (see the module docstring).

    Args:
        mode: ``"auto"``, ``"messages"`` or ``"transcript"``.
        prompt: The summary system prompt.
        previous: The previous summary ("" if none).
        messages: The range to summarize.
        tokenizer: The memory's tokenizer, whose chat template ``"auto"`` asks.
    """
    if mode == "transcript":
        return transcript_request(prompt, previous, messages)
    request = _messages_request(prompt, previous, messages)
    if mode == "messages" or alternates(request):
        return request
    if template_accepts(tokenizer, request) is False:
        return transcript_request(prompt, previous, messages)
    return request


def fallback_request(
    mode: str, request: list[dict[str, str]], prompt: str, previous: str, messages: Sequence[Mapping[str, Any]]
) -> list[dict[str, str]] | None:
    """The transcript form to retry with after ``request`` failed (``"auto"`` only; None: keep ``request``)."""
    if mode != "auto" or len(request) == 2 or alternates(request):
        return None
    return transcript_request(prompt, previous, messages)
