"""Tool-call and reasoning parsers by the names vLLM gives them, and the default read from a chat template.

Tool-call parsers (``--tool-call-parser``): ``hermes`` (Qwen2.5/Qwen3, Hermes: ``<tool_call>``
JSON), ``llama3_json`` (Llama 3.1-3.3; alias ``llama4_json``), ``mistral``, ``openai``
(gpt-oss harmony), ``deepseek_v3`` (also reads the V3.1 form; alias ``deepseek_v31``),
``qwen3_coder`` and ``pythonic`` (Llama 3.2/4 Python call lists).

Reasoning parsers (``--reasoning-parser``): ``deepseek_r1`` and ``qwen3`` (``<think>``) and
``openai`` (harmony's analysis channel).

:func:`make_parser` builds the parser an env uses from the two names (every tool-call parser,
hermes included, is a :class:`~agent_gym.parsers.ToolCallParser`); :func:`as_parser` takes what
a user hands an env (a parser, a parse-only object, a name or None) to a parser;
:func:`detect_parsers` reads the names from a tokenizer's chat template when exactly one format
matches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.parsers.base import ThinkReasoningParser
from agent_gym.parsers.harmony import HarmonyParser, HarmonyReasoningParser
from agent_gym.parsers.hermes import HermesToolCallParser
from agent_gym.parsers.json_formats import DeepSeekV3Parser, Llama3JsonParser, MistralParser
from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ResponseParser, ToolCallParser
from agent_gym.parsers.text_formats import PythonicParser, Qwen3CoderParser

__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ParseOnlyParser",
    "as_parser",
    "canonical_tool_parser",
    "detect_parsers",
    "make_parser",
    "make_reasoning_parser",
    "parser_names",
]

TOOL_PARSERS: dict[str, Callable[..., ToolCallParser]] = {
    "hermes": HermesToolCallParser,
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
    "openai": HarmonyParser,
    "deepseek_v3": DeepSeekV3Parser,
    "qwen3_coder": Qwen3CoderParser,
    "pythonic": PythonicParser,
}
"""The tool-call parser classes by name; each takes ``reasoning_parser=`` and makes a :class:`ToolCallParser`."""

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
    return TOOL_PARSERS[canonical_tool_parser(tool_parser or "hermes")](
        reasoning_parser=make_reasoning_parser(reasoning_parser))


class ParseOnlyParser:
    """A parse-only object completed into a :class:`ToolCallParser`: it parses, hermes' side writes.

    How calls are written, described and nudged (``format_calls``, ``call_format``,
    ``call_example``) is hermes' ``<tool_call>`` format, the package's default; ``parse`` is the
    object's own. :func:`as_parser` makes one.

    Args:
        parser: Anything with ``parse(text) -> ParsedResponse``.
    """

    name = "hermes"
    reasoning_parser: ReasoningParser | None = None

    def __init__(self, parser: ResponseParser) -> None:
        self.parser = parser
        self._writer = HermesToolCallParser()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.parser!r})"

    @property
    def call_format(self) -> str:
        """Hermes' ``"<tool_call> blocks"``."""
        return self._writer.call_format

    @property
    def call_example(self) -> str:
        """Hermes' example block."""
        return self._writer.call_example

    def parse(self, text: str) -> ParsedResponse:
        """The wrapped object's parse of ``text``."""
        return self.parser.parse(text)

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """Hermes ``<tool_call>`` blocks, one per line."""
        return self._writer.format_calls(calls)


def as_parser(parser: ResponseParser | str | None = None) -> ToolCallParser:
    """The :class:`ToolCallParser` of what a user hands an env, a subagent or the gateway.

    Args:
        parser: A :class:`ToolCallParser` (returned as is), an object with only ``parse``
            (completed by :class:`ParseOnlyParser`), a tool-call parser name (:func:`make_parser`)
            or None (hermes).

    Raises:
        TypeError: ``parser`` has no ``parse`` method.
        ConfigError: An unknown name.
    """
    if parser is None or isinstance(parser, str):
        return make_parser(parser)
    if isinstance(parser, ToolCallParser):
        return parser
    if isinstance(parser, ResponseParser):
        return ParseOnlyParser(parser)
    raise TypeError(f"parser: expected a ToolCallParser (with .parse(text)), got {type(parser).__name__}")


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
