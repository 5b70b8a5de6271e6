"""vLLM's wire format as :class:`~agent_gym.policy.VLLMPolicy` reads it.

Reading completion choices (sampled ids, ``"token_id:N"`` strings, logprobs,
finish reasons) and vLLM's error bodies.
"""

from __future__ import annotations

from typing import Any

from agent_gym.policy.http_transport import HttpReply
from agent_gym.types import FinishReason

__all__ = [
    "CONTEXT_ERROR",
    "CONTEXT_ERROR_PHRASES",
    "error_text",
    "is_context_error",
    "map_finish_reason",
    "parse_completion_choice",
    "token_id_from_string",
]

CONTEXT_ERROR = "maximum context length"

# How vLLM and SGLang word a request that does not fit the context (lower case): vLLM's
# "This model's maximum context length is N tokens..." and "The decoder prompt (length N) is longer
# than the maximum model length of M"; SGLang's "The input (N tokens) is longer than the model's
# context length (M tokens)", "Requested token count exceeds the model's maximum context length
# of M tokens" and, as an aborted request, "Input length (N tokens) exceeds the maximum allowed
# length (M tokens)".
CONTEXT_ERROR_PHRASES = (
    CONTEXT_ERROR,
    "is longer than the model's context length",
    "is longer than the maximum model length",
    "exceeds the maximum allowed length",
)


def is_context_error(message: str) -> bool:
    """Whether a server's error message says the prompt (plus the sampling budget) is too long."""
    lowered = message.lower()
    return any(phrase in lowered for phrase in CONTEXT_ERROR_PHRASES)


def error_text(response: HttpReply) -> str:
    """Return the message of a vLLM/OpenAI error body, or the start of the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(body)[:500]


def map_finish_reason(value: Any, *, chat: bool = False) -> tuple[str, str | None]:
    """Map a server's ``finish_reason`` to ``(FinishReason, error message or None)``.

    ``"stop"`` (or none given) and ``"length"`` keep their meaning, as does ``"tool_calls"`` in
    chat mode; vLLM's ``"abort"`` and any unknown value become ``FinishReason.ERROR``.
    """
    if value is None or value == "stop" or (chat and value == "tool_calls"):
        return FinishReason.STOP, None
    if value == "length":
        return FinishReason.LENGTH, None
    if value == "abort":
        return FinishReason.ERROR, "the server aborted the request (finish_reason='abort')"
    return FinishReason.ERROR, f"the server returned an unknown finish_reason {value!r}"


def token_id_from_string(token: Any) -> int | None:
    """Return N for a ``"token_id:N"`` logprob token string, else None."""
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[len("token_id:") :])
        except ValueError:
            return None
    return None


def parse_completion_choice(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    """Return ``(sampled ids, sampled logprobs)`` of a ``/v1/completions`` choice.

    Ids come from ``token_ids`` (``return_token_ids``) or, failing that, from
    ``logprobs.tokens`` strings of the form ``"token_id:N"`` (``return_tokens_as_token_ids``).
    Either element is None when the response does not carry it.
    """
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None and isinstance(lp, dict) and lp.get("tokens") is not None:
        parsed = [token_id_from_string(t) for t in lp["tokens"]]
        ids = None if any(p is None for p in parsed) else parsed
    token_ids = [int(t) for t in ids] if ids is not None else None
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    logprobs = None
    if values is not None:
        logprobs = [float(v) if v is not None else 0.0 for v in values]
        if token_ids is not None and len(logprobs) != len(token_ids):
            logprobs = None
    return token_ids, logprobs
