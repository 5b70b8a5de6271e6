"""Tool-call formats: the parser contract, hermes and the other named parsers, and each model family's messages.

* :class:`ToolCallParser` (the contract: ``name``, ``reasoning_parser``, ``parse``,
  ``format_calls``, ``call_format``, ``call_example``), :class:`ResponseParser` (``parse``
  only), :class:`ToolCall` and :class:`ParsedResponse` (what ``parse`` returns): see
  :mod:`agent_gym.parsers.protocol`.
* :func:`make_parser` (``tool_parser``, ``reasoning_parser``): ``hermes``
  (:class:`HermesToolCallParser`), ``llama3_json``, ``mistral``, ``openai`` (harmony),
  ``deepseek_v3``, ``qwen3_coder``, ``pythonic``; reasoning ``deepseek_r1``, ``qwen3``,
  ``openai``. Every parser returns a :class:`ParsedResponse` for any text (malformed calls are
  ``errors``). :func:`as_parser` turns what a user hands an env (a parser, a parse-only object,
  a name, None) into a :class:`ToolCallParser`.
* :func:`parse_response` / :func:`format_tool_call`: hermes' default parse and one hermes block.
* :func:`detect_parsers`: the names a tokenizer's chat template implies, where unambiguous.
* :class:`ChatFamily` / :func:`get_family`: the messages each family's template reads
  (reasoning field, structured ``tool_calls``, tool results' role and ids) and how its turns end.

See ``docs/model_families.md``.
"""

from agent_gym.parsers.base import FormatParser, ThinkReasoningParser, call_id, find_answer
from agent_gym.parsers.families import FAMILIES, ChatFamily, family_of, get_family
from agent_gym.parsers.harmony import HarmonyMessage, HarmonyParser, HarmonyReasoningParser, split_harmony
from agent_gym.parsers.hermes import HermesToolCallParser, format_tool_call, parse_response
from agent_gym.parsers.json_formats import DeepSeekV3Parser, Llama3JsonParser, MistralParser
from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ResponseParser, ToolCall, ToolCallParser
from agent_gym.parsers.registry import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    ParseOnlyParser,
    as_parser,
    canonical_tool_parser,
    detect_parsers,
    make_parser,
    make_reasoning_parser,
    parser_names,
)
from agent_gym.parsers.selection import env_parser_for, parser_line, policy_parser_names
from agent_gym.parsers.text_formats import PythonicParser, Qwen3CoderParser

__all__ = [
    "FAMILIES",
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ChatFamily",
    "DeepSeekV3Parser",
    "FormatParser",
    "HarmonyMessage",
    "HarmonyParser",
    "HarmonyReasoningParser",
    "HermesToolCallParser",
    "Llama3JsonParser",
    "MistralParser",
    "ParseOnlyParser",
    "ParsedResponse",
    "PythonicParser",
    "Qwen3CoderParser",
    "ReasoningParser",
    "ResponseParser",
    "ThinkReasoningParser",
    "ToolCall",
    "ToolCallParser",
    "as_parser",
    "call_id",
    "canonical_tool_parser",
    "detect_parsers",
    "env_parser_for",
    "family_of",
    "find_answer",
    "format_tool_call",
    "get_family",
    "make_parser",
    "make_reasoning_parser",
    "parse_response",
    "parser_line",
    "parser_names",
    "policy_parser_names",
    "split_harmony",
]
