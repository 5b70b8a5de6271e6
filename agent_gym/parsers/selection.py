"""Which parser an env gets in a collection: the names given, else the policy's model family.

A collection samples with one policy, whose chat template says how the model writes tool
calls (:class:`~agent_gym.policy.ChatTokenBuilder` reads the names from it where that is
unambiguous). :func:`env_parser_for` hands the env the same parser, so ``collect`` and
``agent-gym rollout`` need no parser option for a model whose template is clear;
:func:`parser_line` is the line the rollout summary shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.parsers.protocol import ToolCallParser
from agent_gym.parsers.registry import canonical_tool_parser, make_parser, make_reasoning_parser

__all__ = ["env_parser_for", "parser_line", "policy_parser_names"]

_ENV_PARSER_KEYS = ("parser", "tool_parser", "reasoning_parser")


def policy_parser_names(policy: Any) -> tuple[str | None, str | None, bool]:
    """``(tool parser, reasoning parser, read from the template)`` of a token policy (Nones otherwise)."""
    builder = getattr(policy, "builder", None)
    tool = getattr(builder, "tool_parser", None)
    if not isinstance(tool, str):
        return None, None, False
    return tool, getattr(builder, "reasoning_parser", None), bool(getattr(builder, "parsers_detected", False))


def env_parser_for(
    policy: Any,
    env_kwargs: Mapping[str, Any] | None,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> ToolCallParser | None:
    """The parser to give the envs of a collection, or None to leave them as configured.

    The names given win; else the policy's family (given to it or read from its chat
    template). Nothing is chosen when ``env_kwargs`` already names a parser or when the
    choice is the envs' own default (``hermes`` without another reasoning parser).

    Raises:
        ConfigError: For an unknown name.
    """
    if env_kwargs and any(key in env_kwargs for key in _ENV_PARSER_KEYS):
        return None
    if tool_parser is None and reasoning_parser is None:
        tool_parser, reasoning_parser, _ = policy_parser_names(policy)
    else:
        canonical_tool_parser(tool_parser or "hermes")
        make_reasoning_parser(reasoning_parser)
    if (tool_parser or "hermes") == "hermes" and reasoning_parser in (None, "qwen3", "deepseek_r1"):
        return None
    return make_parser(tool_parser, reasoning_parser)


def parser_line(policy: Any, tool_parser: str | None = None, reasoning_parser: str | None = None) -> str:
    """E.g. ``"openai + reasoning openai (from the chat template)"`` for a rollout summary."""
    if tool_parser is not None or reasoning_parser is not None:
        source = "given"
    else:
        tool_parser, reasoning_parser, detected = policy_parser_names(policy)
        source = "from the chat template" if detected else "default" if tool_parser in (None, "hermes") else "given"
    text = tool_parser or "hermes"
    if reasoning_parser:
        text += f" + reasoning {reasoning_parser}"
    return f"{text} ({source})"
