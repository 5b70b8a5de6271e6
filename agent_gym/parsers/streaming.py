"""Where a format's reasoning and tool calls begin and end in streamed text (for the gateway's splitter).

A streaming client must never see part of a tool call as content: the splitter holds text
back from the moment a call may begin. :func:`stream_format` says, for a parser, which
markers open and close reasoning and call regions:

* ``hermes``: ``<think>``...``</think>``, ``<tool_call>``...``</tool_call>`` (the parser's tags).
* ``qwen3_coder``: ``<tool_call>``...``</tool_call>`` and bare ``<function=``...``</function>``.
* ``deepseek_v3``: ``<｜tool▁calls▁begin｜>``...``<｜tool▁calls▁end｜>`` (a bare
  ``<｜tool▁call▁begin｜>`` runs to the end of the turn).
* ``mistral`` (``[TOOL_CALLS]``), ``llama3_json`` (``<|python_tag|>``, ``{"name"``, or a ``{``
  that starts the message) and
  ``pythonic`` (``<|python_start|>`` or any ``[``): the calls run to the end of the turn, so
  everything from the marker on is held and parsed once the turn ended (text that is no call
  is then sent as content).
* ``openai`` (harmony): messages, not regions; the splitter reads harmony's headers itself
  (``harmony=True``; ``harmony_calls`` when the calls are harmony messages too, not hermes blocks
  after harmony's reasoning).

Reasoning regions come from the reasoning parser (``<think>`` for ``deepseek_r1``/``qwen3``).
A format this module does not know is treated as hermes (a :class:`~agent_gym.parsers.HermesToolCallParser`
with its own tags). :func:`client_content` is the content a client sees of a parsed message.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_gym.parsers.hermes import HermesToolCallParser
from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ToolCallParser

__all__ = ["StreamFormat", "client_content", "stream_format"]


@dataclass(frozen=True)
class StreamFormat:
    """The markers of one format's regions in streamed text.

    Attributes:
        reasoning: ``(open, close)`` of each reasoning region.
        calls: ``(open, close)`` of each call region; ``close`` None: the region runs to the end
            of the turn.
        leading_calls: Call regions that open only at the start of the message (before any
            content), e.g. Llama's bare JSON object.
        harmony: The text is harmony messages (read by headers, not regions).
        harmony_calls: The calls are harmony messages too (the ``openai`` tool-call format).
    """

    reasoning: tuple[tuple[str, str], ...] = ()
    calls: tuple[tuple[str, str | None], ...] = ()
    leading_calls: tuple[tuple[str, str | None], ...] = ()
    harmony: bool = False
    harmony_calls: bool = False


_THINK = (("<think>", "</think>"),)

_CALL_REGIONS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "llama3_json": (("<|python_tag|>", None), ('{"name"', None), ('{ "name"', None)),
    "mistral": (("[TOOL_CALLS]", None),),
    "pythonic": (("<|python_start|>", None), ("[", None)),
    "deepseek_v3": (("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), ("<｜tool▁call▁begin｜>", None)),
    "qwen3_coder": (("<tool_call>", "</tool_call>"), ("<function=", "</function>")),
}


def _reasoning_regions(reasoning_parser: ReasoningParser | None) -> tuple[tuple[str, str], ...] | None:
    """The reasoning parser's regions; None for harmony's analysis channel."""
    if reasoning_parser is None:
        return ()
    if reasoning_parser.name == "openai":
        return None
    return _THINK


def stream_format(parser: ToolCallParser) -> StreamFormat:
    """The stream markers of ``parser``'s format (see the module docstring).

    Args:
        parser: A tool-call parser.
    """
    name, reasoning_parser = parser.name, parser.reasoning_parser
    reasoning = _reasoning_regions(reasoning_parser)
    if name == "openai" or reasoning is None:
        return StreamFormat(harmony=True, harmony_calls=name == "openai")
    if name in _CALL_REGIONS:
        leading: tuple[tuple[str, str | None], ...] = (("{", None),) if name == "llama3_json" else ()
        return StreamFormat(reasoning=reasoning, calls=_CALL_REGIONS[name], leading_calls=leading)
    think, call = ((parser.think_tag, parser.tool_call_tag) if isinstance(parser, HermesToolCallParser)
                   else ("think", "tool_call"))
    return StreamFormat(reasoning=((f"<{think}>", f"</{think}>"),), calls=((f"<{call}>", f"</{call}>"),))


def client_content(parser: ToolCallParser, parsed: ParsedResponse) -> str:
    """The content a client sees of a message ``parser`` parsed: hermes' call blocks taken out when it called."""
    if parsed.tool_calls and isinstance(parser, HermesToolCallParser):
        return parser.strip_calls(parsed.content).strip()
    return parsed.content
