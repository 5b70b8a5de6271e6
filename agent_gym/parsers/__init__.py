"""Tool-call and reasoning parsers named as vLLM names them, and the message shapes of each model family.

* :func:`make_parser` (``tool_parser``, ``reasoning_parser``): ``hermes``, ``llama3_json``,
  ``mistral``, ``openai`` (harmony), ``deepseek_v3``, ``qwen3_coder``, ``pythonic``; reasoning
  ``deepseek_r1``, ``qwen3``, ``openai``. Every parser returns a
  :class:`~agent_gym.tools.ParsedResponse` for any text (malformed calls are ``errors``).
* :func:`detect_parsers`: the names a tokenizer's chat template implies, where unambiguous.
* :class:`ChatFamily` / :func:`get_family`: the messages each family's template reads
  (reasoning field, structured ``tool_calls``, tool results' role and ids) and how its turns end.

See ``docs/model_families.md``.
"""

from agent_gym.parsers.base import FormatParser, ReasoningParser, ThinkReasoningParser, call_id, find_answer
from agent_gym.parsers.families import FAMILIES, ChatFamily, get_family
from agent_gym.parsers.harmony import HarmonyMessage, HarmonyParser, HarmonyReasoningParser, split_harmony
from agent_gym.parsers.json_formats import DeepSeekV3Parser, Llama3JsonParser, MistralParser
from agent_gym.parsers.registry import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    ReasoningThenHermes,
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
    "Llama3JsonParser",
    "MistralParser",
    "PythonicParser",
    "Qwen3CoderParser",
    "ReasoningParser",
    "ReasoningThenHermes",
    "ThinkReasoningParser",
    "call_id",
    "canonical_tool_parser",
    "detect_parsers",
    "env_parser_for",
    "find_answer",
    "get_family",
    "make_parser",
    "make_reasoning_parser",
    "parser_line",
    "parser_names",
    "policy_parser_names",
    "split_harmony",
]
