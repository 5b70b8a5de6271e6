"""Tool-call and reasoning parsers by the names vLLM gives them, and the default read from a chat template.

Tool-call parsers (``--tool-call-parser``): ``hermes`` (Qwen2.5/Qwen3, Hermes: ``<tool_call>``
JSON), ``llama3_json`` (Llama 3.1-3.3; alias ``llama4_json``), ``mistral``, ``openai``
(gpt-oss harmony), ``deepseek_v3`` (also reads the V3.1 form; alias ``deepseek_v31``),
``qwen3_coder`` and ``pythonic`` (Llama 3.2/4 Python call lists).

Reasoning parsers (``--reasoning-parser``): ``deepseek_r1`` and ``qwen3`` (``<think>``) and
``openai`` (harmony's analysis channel).

:func:`make_parser` builds the parser an env uses from the two names; :func:`detect_parsers`
reads the names from a tokenizer's chat template when exactly one format matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.parsers.base import FormatParser, ReasoningParser, ThinkReasoningParser
from agent_gym.parsers.harmony import HarmonyParser, HarmonyReasoningParser
from agent_gym.parsers.json_formats import DeepSeekV3Parser, Llama3JsonParser, MistralParser
from agent_gym.parsers.text_formats import PythonicParser, Qwen3CoderParser
from agent_gym.tools.parsing import HermesToolCallParser, ParsedResponse, ToolCallParser, format_tool_call

__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ReasoningThenHermes",
    "canonical_tool_parser",
    "detect_parsers",
    "make_parser",
    "make_reasoning_parser",
    "parser_names",
]

TOOL_PARSERS: dict[str, type[FormatParser] | None] = {
    "hermes": None,  # HermesToolCallParser
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
    "openai": HarmonyParser,
    "deepseek_v3": DeepSeekV3Parser,
    "qwen3_coder": Qwen3CoderParser,
    "pythonic": PythonicParser,
}
"""The tool-call parsers by name (``hermes`` is :class:`~agent_gym.tools.HermesToolCallParser`)."""

_ALIASES = {"llama4_json": "llama3_json", "deepseek_v31": "deepseek_v3", "harmony": "openai", "gpt_oss": "openai"}

REASONING_PARSERS: tuple[str, ...] = ("deepseek_r1", "qwen3", "openai")
"""The reasoning parser names."""


def parser_names() -> tuple[list[str], list[str]]:
    """``(tool-call parser names, reasoning parser names)``, aliases included, sorted."""
    return sorted([*TOOL_PARSERS, *_ALIASES]), sorted(REASONING_PARSERS)


def canonical_tool_parser(name: str) -> str:
    """The registered name of a tool-call parser name or alias.

    Raises:
        ConfigError: For an unknown name.
    """
    if not isinstance(name, str):
        raise ConfigError(f"tool_parser: expected a parser name (str), got {type(name).__name__}")
    key = _ALIASES.get(name, name)
    if key not in TOOL_PARSERS:
        raise ConfigError(f"tool_parser: expected one of {', '.join(parser_names()[0])}, got {name!r}")
    return key


def make_reasoning_parser(name: str | None) -> ReasoningParser | None:
    """The reasoning parser called ``name`` (None: none).

    Raises:
        ConfigError: For an unknown name.
    """
    if name is None:
        return None
    if name in ("deepseek_r1", "qwen3"):
        return ThinkReasoningParser(name)
    if name == "openai":
        return HarmonyReasoningParser()
    raise ConfigError(f"reasoning_parser: expected one of {', '.join(REASONING_PARSERS)} or None, got {name!r}")


class ReasoningThenHermes:
    """``hermes`` tool calls after a reasoning parser other than ``<think>`` (e.g. harmony's analysis channel).

    Args:
        reasoning_parser: Takes the reasoning out first.
    """

    def __init__(self, reasoning_parser: ReasoningParser) -> None:
        self.reasoning_parser = reasoning_parser
        self.hermes = HermesToolCallParser()
        self.think_tag, self.tool_call_tag, self.answer_tag = "think", "tool_call", "answer"

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message; never raises."""
        if not isinstance(text, str):
            return self.hermes.parse(text)
        try:
            reasoning, rest = self.reasoning_parser.split(text)
        except Exception as exc:  # noqa: BLE001 - parsing must never raise
            return ParsedResponse(text=text, content=text, errors=[f"could not parse the message: {exc!r}"])
        parsed = self.hermes.parse(rest)
        parsed.text = text
        parsed.thought = "\n\n".join(t for t in (reasoning, parsed.thought) if t)
        return parsed

    def format_calls(self, calls: Any) -> str:
        """Hermes ``<tool_call>`` blocks, one per line."""
        return "\n".join(format_tool_call(name, args) for name, args in calls)


def make_parser(tool_parser: str | None = "hermes", reasoning_parser: str | None = None) -> ToolCallParser:
    """The parser of a tool-call format and a reasoning format, by vLLM's names.

    Args:
        tool_parser: A name of :data:`TOOL_PARSERS` or an alias (None: ``hermes``).
        reasoning_parser: ``deepseek_r1``, ``qwen3``, ``openai`` or None. ``hermes`` reads
            ``<think>`` itself; ``openai`` always reads the analysis channel.

    Raises:
        ConfigError: For an unknown name.

    Example:
        >>> parsed = make_parser("llama3_json").parse('{"name": "add", "parameters": {"a": 1}}')
        >>> parsed.tool_calls[0].name, parsed.tool_calls[0].arguments
        ('add', {'a': 1})
    """
    name = canonical_tool_parser(tool_parser or "hermes")
    reasoning = make_reasoning_parser(reasoning_parser)
    cls = TOOL_PARSERS[name]
    if cls is None:
        if reasoning is None or isinstance(reasoning, ThinkReasoningParser):
            return HermesToolCallParser()
        return ReasoningThenHermes(reasoning)
    if cls is HarmonyParser:
        return HarmonyParser(reasoning or HarmonyReasoningParser())
    return cls(reasoning)


# Markers of each tool-call format in a chat template's source (checked in this order, all of them).
_TEMPLATE_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("openai", ("<|channel|>", "<|message|>")),
    ("deepseek_v3", ("tool▁calls▁begin",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("llama3_json", ("ipython", '"parameters"')),
    ("pythonic", ("func_name1(",)),
    ("hermes", ("<tool_call>",)),
)


def _template_source(tokenizer_or_template: Any) -> str:
    if isinstance(tokenizer_or_template, str):
        return tokenizer_or_template
    template = getattr(tokenizer_or_template, "chat_template", None)
    if isinstance(template, Mapping):
        return "\n".join(str(t) for t in template.values())
    return template if isinstance(template, str) else ""


def detect_parsers(tokenizer_or_template: Any) -> tuple[str | None, str | None]:
    """The tool-call and reasoning parser names a chat template implies, where that is unambiguous.

    A template is matched against the markers of each format (harmony's ``<|channel|>``,
    DeepSeek's ``<｜tool▁calls▁begin｜>``, Mistral's ``[TOOL_CALLS]``, Qwen3-Coder's
    ``<function=``, Llama's ``ipython`` with ``"parameters"``, the pythonic example, hermes'
    ``<tool_call>``); Qwen3-Coder's templates also hold ``<tool_call>``, so that pair counts as one.

    Args:
        tokenizer_or_template: A tokenizer (its ``chat_template``) or a template's source.

    Returns:
        ``(tool parser, reasoning parser)``; the tool parser is None when no format or more than one
        matches, the reasoning parser None unless the template shows ``<think>`` (``qwen3``, or
        ``deepseek_r1`` for DeepSeek templates) or harmony's channels (``openai``).
    """
    source = _template_source(tokenizer_or_template)
    matches = [name for name, markers in _TEMPLATE_MARKERS if all(m in source for m in markers)]
    if "qwen3_coder" in matches and "hermes" in matches:
        matches.remove("hermes")
    tool = matches[0] if len(matches) == 1 else None
    if tool == "openai":
        return tool, "openai"
    reasoning = None
    if "<think>" in source or "</think>" in source:
        reasoning = "deepseek_r1" if tool == "deepseek_v3" or "｜Assistant｜" in source else "qwen3"
    return tool, reasoning
