"""Model families: how each chat template wants the conversation, and how its turns end.

An env's conversation holds each assistant message as the text the model sampled and each
tool result as a plain ``tool`` message. Templates of most families cannot render that as
is: gpt-oss's refuses channel tags in ``content`` and names a tool result's author from the
previous assistant's structured call; Mistral's pairs each result with a 9-character call
id; Llama 3.1's shows results as ``ipython`` turns. :meth:`ChatFamily.template_messages`
turns the conversation into the messages the family's template reads:

* an assistant message becomes ``content`` (without reasoning and calls), the reasoning in
  the family's field(s) (``reasoning_content``; harmony's ``thinking``) and structured
  ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments": dict}}``);
* each tool result that answers a call gets the family's role (``tool``, Llama's
  ``ipython``) with ``tool_call_id`` and ``name``; results of malformed calls (nothing to pair
  with) follow the paired ones, as ``user`` messages in families whose templates pair every
  tool result with a call (Mistral, harmony, DeepSeek);
* harmony and Llama 3.1 carry one call per assistant message: a message with several calls
  becomes one assistant message per call, each before its result.

``hermes`` is a pass-through: Qwen-style templates render the sampled text (with its
``<tool_call>`` blocks and ``<think>``) as it is. :meth:`ChatFamily.unsampled_text` writes a
message the model did not sample (a client wrote it) as the family's template shows it, and
:func:`family_of` finds a parser's family.

Turn ends: ``terminators`` are the special tokens that end an assistant turn in the rendered
template (where the incremental prompt cuts); ``stop_tokens`` are those that end sampling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.parsers.protocol import ToolCall, ToolCallParser
from agent_gym.parsers.registry import canonical_tool_parser, make_parser

__all__ = ["FAMILIES", "ChatFamily", "family_of", "get_family"]


@dataclass(frozen=True)
class ChatFamily:
    """The message shapes and turn ends of one tool-call format's model family.

    Attributes:
        name: The tool-call parser name (vLLM's).
        structured: False for a pass-through family (messages rendered as sampled).
        tool_role: The role of tool results (``tool`` or Llama's ``ipython``).
        reasoning_fields: The assistant fields the template reads the reasoning from.
        terminators: Special tokens that end an assistant turn in the rendered template.
        stop_tokens: Special tokens that end sampling.
        pair_tool_results: Whether the template pairs every tool result with a call (results
            of malformed calls then become ``user`` messages).
        one_call_per_message: Harmony: one call per assistant message.
        reasoning_or_content_with_calls: Harmony: a message with calls carries the reasoning
            or the content, not both (the reasoning wins).
        arguments_as_json: The template concatenates a call's ``arguments`` as a JSON string
            (DeepSeek-V3) instead of reading a dict.
        stitch: How earlier turns stay as sampled (documentation, shown in docs/model_families.md).
    """

    name: str
    structured: bool = True
    tool_role: str = "tool"
    reasoning_fields: tuple[str, ...] = ("reasoning_content",)
    terminators: tuple[str, ...] = ()
    stop_tokens: tuple[str, ...] = ()
    pair_tool_results: bool = False
    one_call_per_message: bool = False
    reasoning_or_content_with_calls: bool = False
    arguments_as_json: bool = False
    stitch: str = ""

    def template_messages(
        self, messages: Sequence[Mapping[str, Any]], parser: ToolCallParser | None = None
    ) -> list[dict[str, Any]]:
        """The conversation as the family's template reads it (see the module docstring).

        Messages already structured (an assistant with ``tool_calls``, a tool result with a
        ``tool_call_id``) are kept. Never raises on model text.

        Args:
            messages: The conversation (role/content dicts).
            parser: The parser of assistant messages (default: the family's, no reasoning
                parser unless the family reads one).
        """
        if not self.structured:
            return [dict(m) for m in messages]
        parser = parser or make_parser(self.name, "openai" if self.name == "openai" else None)
        out: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        errors = 0
        orphans: list[str] = []
        split_first = True
        for message in messages:
            role = message.get("role")
            if role == "tool" and "tool_call_id" not in message:
                content = str(message.get("content") or "")
                if errors > 0:  # env order: results of malformed calls come first
                    errors -= 1
                    orphans.append(content)
                    continue
                if calls:
                    call = calls.pop(0)
                    if self.one_call_per_message and not split_first:
                        out.append({"role": "assistant", "content": "",
                                    "tool_calls": [_structured(call, self.arguments_as_json)]})
                    split_first = False
                    out.append({"role": self.tool_role, "content": content, "tool_call_id": call.id,
                                "name": call.name})
                    if not calls:
                        self._flush(out, orphans)
                    continue
                orphans.append(content)
                continue
            self._flush(out, orphans)
            calls, errors, split_first = [], 0, True
            if role == "assistant" and "tool_calls" not in message:
                item, calls, errors = self._assistant(message, parser)
                out.append(item)
            else:
                out.append(dict(message))
        self._flush(out, orphans)
        return out

    def assistant_text(self, reasoning: str, content: str, calls: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> str:
        """An assistant message as this family's model writes it, from its parts.

        What a chat endpoint that parsed the model's output (vLLM with ``--reasoning-parser`` and
        ``--tool-call-parser``) returns as ``reasoning_content``, ``content`` and ``tool_calls`` is
        written back as text that the family's parser reads as the same parts: the reasoning in
        ``<think>`` before the content (harmony: the analysis channel), the calls after it in the
        family's format (``<tool_call>`` blocks for ``hermes``).
        """
        parser = make_parser(self.name, "openai" if self.name == "openai" else None)
        if self.name == "openai":
            parts = [f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"] if reasoning else []
            if content or not calls:
                parts.append(f"<|channel|>final<|message|>{content}")
                if calls:
                    parts.append("<|end|><|start|>assistant")
            if calls:
                parts.append(parser.format_calls(calls))
            return "".join(parts)
        text = f"<think>\n{reasoning}\n</think>\n\n{content}" if reasoning else content
        if calls:
            text += ("\n" if text else "") + parser.format_calls(calls)
        return text

    def unsampled_text(self, content: str, calls: Sequence[tuple[str, Any]] = ()) -> str:
        """An assistant message the model did not sample (a client wrote it), as the family's template shows it.

        A structured family writes it as :meth:`assistant_text` does (no reasoning). A
        pass-through family's template (hermes: Qwen-style) renders structured calls itself:
        each call becomes ``<tool_call>``, its JSON on a line of its own, ``</tool_call>``, one
        line after the content.

        Args:
            content: The message's visible text.
            calls: Its calls as ``(name, arguments)``.
        """
        if self.structured:
            return self.assistant_text("", content.strip(), calls)
        parts = [content.strip()] if content.strip() else []
        for name, arguments in calls:
            body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            parts.append(f"<tool_call>\n{body}\n</tool_call>")
        return "\n".join(parts)

    def _flush(self, out: list[dict[str, Any]], orphans: list[str]) -> None:
        if not orphans:
            return
        if self.pair_tool_results and out and out[-1].get("role") == self.tool_role and "tool_call_id" in out[-1]:
            last = out[-1]  # a user message here would break the template's role order: join the last result
            last["content"] = "\n\n".join([str(last.get("content") or ""), *orphans])
        elif self.pair_tool_results:
            out.append({"role": "user", "content": "\n\n".join(orphans)})
        else:
            out.extend({"role": self.tool_role, "content": text} for text in orphans)
        orphans.clear()

    def _assistant(
        self, message: Mapping[str, Any], parser: ToolCallParser
    ) -> tuple[dict[str, Any], list[ToolCall], int]:
        parsed = parser.parse(str(message.get("content") or ""))
        item: dict[str, Any] = {k: v for k, v in message.items() if k != "content"}
        item["content"] = parsed.content
        calls = list(parsed.tool_calls)
        thought = parsed.thought
        if calls and self.reasoning_or_content_with_calls and thought:
            item["content"] = ""
        if thought:
            for name in self.reasoning_fields:
                item[name] = thought
        if calls:
            shown = calls[:1] if self.one_call_per_message else calls
            item["tool_calls"] = [_structured(c, self.arguments_as_json) for c in shown]
        return item, calls, len(parsed.errors)


def _structured(call: ToolCall, as_json: bool = False) -> dict[str, Any]:
    arguments: Any = json.dumps(call.arguments, ensure_ascii=False) if as_json else dict(call.arguments)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


_LLAMA_STITCH = ("earlier turns keep their sampled ids; a turn sampled to <|eom_id|> stays so where the "
                 "template writes <|eot_id|>")

FAMILIES: dict[str, ChatFamily] = {
    "hermes": ChatFamily(
        "hermes", structured=False,
        stitch="messages render as sampled; earlier <think> blocks that Qwen3's template drops stay as sampled",
    ),
    "llama3_json": ChatFamily(
        "llama3_json", tool_role="ipython", reasoning_fields=(), terminators=("<|eot_id|>", "<|eom_id|>"),
        stop_tokens=("<|eot_id|>", "<|eom_id|>"), one_call_per_message=True, stitch=_LLAMA_STITCH,
    ),
    "pythonic": ChatFamily(
        "pythonic", tool_role="ipython", reasoning_fields=(), terminators=("<|eot_id|>", "<|eom_id|>", "<|eot|>"),
        stop_tokens=("<|eot_id|>", "<|eom_id|>", "<|eot|>"), stitch=_LLAMA_STITCH,
    ),
    "mistral": ChatFamily(
        "mistral", reasoning_fields=(), terminators=("</s>",), stop_tokens=("</s>",), pair_tool_results=True,
        stitch="earlier turns keep their sampled ids (the call ids the parser derived are what later "
               "[TOOL_RESULTS] name)",
    ),
    "openai": ChatFamily(
        "openai", reasoning_fields=("thinking",), terminators=("<|end|>", "<|call|>", "<|return|>"),
        stop_tokens=("<|return|>", "<|call|>"), pair_tool_results=True, one_call_per_message=True,
        reasoning_or_content_with_calls=True,
        stitch="earlier turns keep their sampled ids: the analysis channel the template drops and the "
               "<|return|> it writes as <|end|> stay as sampled",
    ),
    "deepseek_v3": ChatFamily(
        "deepseek_v3", terminators=("<｜end▁of▁sentence｜>",), stop_tokens=("<｜end▁of▁sentence｜>",),
        pair_tool_results=True, arguments_as_json=True,
        stitch="earlier turns keep their sampled ids (the template drops earlier <think>)",
    ),
    "qwen3_coder": ChatFamily(
        "qwen3_coder", terminators=("<|im_end|>",), stop_tokens=("<|im_end|>",),
        stitch="earlier turns keep their sampled ids (the template drops earlier <think>)",
    ),
}
"""The family of each tool-call parser name."""


def get_family(tool_parser: str | ChatFamily | None) -> ChatFamily:
    """The :class:`ChatFamily` of a tool-call parser name (None: ``hermes``).

    Raises:
        ConfigError: For an unknown name.
    """
    if isinstance(tool_parser, ChatFamily):
        return tool_parser
    return FAMILIES[canonical_tool_parser(tool_parser or "hermes")]


def family_of(parser: ToolCallParser | None) -> ChatFamily:
    """The family that renders a parser's messages: its name's (hermes for None or a name without a family)."""
    return FAMILIES.get(parser.name, FAMILIES["hermes"]) if parser is not None else FAMILIES["hermes"]
