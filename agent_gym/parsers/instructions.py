"""What the env tells the model about its tool-call format: system prompt text and the no-action nudge.

The envs' prompts say how to call a tool in hermes' words ("Call tools with <tool_call>
blocks"); an env built with another format (``tool_parser="mistral"``, ...) must say that
format's words instead, or the model is told one format and parsed in another.
Every named parser carries ``call_format`` (how a call is written, with an example);
:func:`call_format` reads it (hermes' ``<tool_call>`` text for the hermes parser and for
parsers without one), :func:`adapt_prompt` rewrites an env prompt's hermes sentence,
:func:`nudge_text` and :func:`no_action_error` are the no-action message and error.

For hermes the texts are the ones the envs always had, word for word.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "HERMES_PROMPT_PHRASE",
    "adapt_prompt",
    "call_example",
    "call_format",
    "no_action_error",
    "nudge_text",
    "uses_hermes_format",
]

HERMES_PROMPT_PHRASE = "with <tool_call> blocks"
"""The words of the envs' prompts that name hermes' format (rewritten for other formats)."""

_THINK_PHRASE = "inside <think>...</think>"


def _hermes_tag(parser: Any) -> str | None:
    """The call tag of a hermes-style parser (``tool_call_tag``), or None for another format."""
    if getattr(parser, "call_format", ""):
        return None
    tag = getattr(parser, "tool_call_tag", None)
    return tag if isinstance(tag, str) and tag else "tool_call"


def uses_hermes_format(parser: Any) -> bool:
    """Whether ``parser`` reads hermes' ``<tool_call>`` JSON blocks (its texts stay the envs' own)."""
    return _hermes_tag(parser) == "tool_call"


def call_example(parser: Any) -> str:
    """One call written in the parser's format, with placeholders (the nudge's example).

    Args:
        parser: A tool-call parser (a named parser, hermes' or any object with ``parse``).
    """
    tag = _hermes_tag(parser)
    if tag is not None:
        return f'<{tag}>{{"name": ..., "arguments": {{...}}}}</{tag}>'
    return str(getattr(parser, "call_example", "") or parser.call_format)


def call_format(parser: Any) -> str:
    """How a model of the parser's format writes a call (completes "Call tools with ...").

    Args:
        parser: A tool-call parser.

    Returns:
        ``"<tool_call> blocks"`` for hermes (its own tag for a hermes parser with another
        tag), else the parser's ``call_format``.

    Example:
        >>> from agent_gym.parsers import make_parser
        >>> call_format(make_parser("pythonic"))
        'a Python list of calls with keyword arguments, [NAME(key=value, ...), ...]'
    """
    tag = _hermes_tag(parser)
    return f"<{tag}> blocks" if tag is not None else str(parser.call_format)


def _harmony_reasoning(parser: Any) -> bool:
    return getattr(getattr(parser, "reasoning_parser", None), "name", None) == "openai"


def adapt_prompt(prompt: str, parser: Any) -> str:
    """An env prompt in the parser's words: hermes' call phrase (and ``<think>``) replaced.

    ``"with <tool_call> blocks"`` becomes ``"with "`` + :func:`call_format`; with harmony's
    reasoning (``openai``), ``"inside <think>...</think>"`` becomes ``"in the analysis
    channel"``. A prompt without those words (or a hermes parser) is returned unchanged.

    Args:
        prompt: The system prompt.
        parser: The env's tool-call parser.
    """
    if not isinstance(prompt, str):
        return prompt
    if HERMES_PROMPT_PHRASE in prompt and not uses_hermes_format(parser):
        prompt = prompt.replace(HERMES_PROMPT_PHRASE, f"with {call_format(parser)}")
    if _THINK_PHRASE in prompt and _harmony_reasoning(parser):
        prompt = prompt.replace(_THINK_PHRASE, "in the analysis channel")
    return prompt


def nudge_text(parser: Any) -> str:
    """The ``user`` message answering an assistant message with no tool call and no answer.

    For hermes, :data:`agent_gym.tool_calls.NUDGE` word for word; otherwise the same sentence
    with the parser's own example call.
    """
    return ("Your message contained neither a tool call nor a final answer. Call a tool with "
            f"{call_example(parser)}, or give the final answer as <answer>...</answer>.")


def no_action_error(parser: Any) -> str:
    """``info["error"]`` of a message with no tool call and no answer (hermes: the envs' own text)."""
    tag = _hermes_tag(parser)
    if tag is not None:
        return f"the message has no <{tag}> and no <answer>"
    return f"the message has no tool call (in the {getattr(parser, 'name', '') or 'model'} format) and no <answer>"
