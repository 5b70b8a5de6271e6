"""What the env tells the model about its tool-call format: system prompt text, tool descriptions, the nudge.

The envs' prompts say how to call a tool in hermes' words ("Call tools with <tool_call>
blocks"); an env built with another format (``tool_parser="mistral"``, ...) must say that
format's words instead, or the model is told one format and parsed in another.
Every parser carries ``call_format`` (how a call is written, with an example) and
``call_example`` (see :class:`~agent_gym.parsers.ToolCallParser`): :func:`adapt_prompt`
rewrites an env prompt's hermes sentence with them, :func:`describe_tools_for` describes the
tools with the format's example, :func:`nudge_text` and :func:`no_action_error` are the
no-action message and error.

For hermes the texts are the ones the envs always had, word for word.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_gym.parsers.hermes import HermesToolCallParser
from agent_gym.parsers.protocol import ToolCallParser
from agent_gym.tools.describe import describe_tools

__all__ = [
    "HERMES_PROMPT_PHRASE",
    "adapt_prompt",
    "call_example",
    "call_format",
    "describe_tools_for",
    "no_action_error",
    "nudge_text",
]

HERMES_PROMPT_PHRASE = "with <tool_call> blocks"
"""The words of the envs' prompts that name hermes' format (rewritten for other formats)."""

_THINK_PHRASE = "inside <think>...</think>"


def _call_tag(parser: ToolCallParser) -> str | None:
    """The call tag of a hermes-format parser (its own tag, or ``tool_call``), or None for another format."""
    if isinstance(parser, HermesToolCallParser):
        return parser.tool_call_tag
    return "tool_call" if parser.name == "hermes" else None


def call_example(parser: ToolCallParser) -> str:
    """One call written in the parser's format, with placeholders (the nudge's example).

    Args:
        parser: A tool-call parser.
    """
    return parser.call_example


def call_format(parser: ToolCallParser) -> str:
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
    return parser.call_format


def describe_tools_for(schemas: Iterable[Any], parser: ToolCallParser | None) -> str:
    """:func:`~agent_gym.tools.describe_tools` in the parser's format (hermes' own text for hermes' tag or None).

    Args:
        schemas: The tools' schemas (or Tool objects).
        parser: The tool-call parser whose example call the description shows.
    """
    example = None if parser is None or _call_tag(parser) == "tool_call" else parser.call_example
    return describe_tools(schemas, call_format=example)


def adapt_prompt(prompt: str, parser: ToolCallParser) -> str:
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
    if HERMES_PROMPT_PHRASE in prompt:
        prompt = prompt.replace(HERMES_PROMPT_PHRASE, f"with {parser.call_format}")
    reasoning = parser.reasoning_parser
    if _THINK_PHRASE in prompt and reasoning is not None and reasoning.name == "openai":
        prompt = prompt.replace(_THINK_PHRASE, "in the analysis channel")
    return prompt


def nudge_text(parser: ToolCallParser) -> str:
    """The ``user`` message answering an assistant message with no tool call and no answer.

    For hermes, :data:`agent_gym.env.tools.NUDGE` word for word; otherwise the same sentence
    with the parser's own example call.
    """
    return ("Your message contained neither a tool call nor a final answer. Call a tool with "
            f"{parser.call_example}, or give the final answer as <answer>...</answer>.")


def no_action_error(parser: ToolCallParser) -> str:
    """``info["error"]`` of a message with no tool call and no answer (hermes: the envs' own text)."""
    tag = _call_tag(parser)
    if tag is not None:
        return f"the message has no <{tag}> and no <answer>"
    return f"the message has no tool call (in the {parser.name or 'model'} format) and no <answer>"
