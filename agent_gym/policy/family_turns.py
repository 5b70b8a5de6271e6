"""The ids that follow a sampled assistant turn, for model families whose templates read structured messages.

:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder` never re-renders earlier turns: the
next prompt is the previous prompt, the ids the model sampled, and the ids of the new messages
(tool results, a user message) with the generation prompt. For a pass-through family the new
messages render after a fixed base conversation. A structured family's template reads the
previous assistant message to render what follows it (harmony names a tool result's author
from the previous call, Mistral checks call ids, Llama shows results as ``ipython``), so
:class:`FamilySuffix` renders::

    base user message, the previous assistant message in the family's shape (its calls with
    their real names and ids, a marker in place of its content and arguments), the new messages

and cuts after the first of the family's turn-ending tokens that follows the last marker. The
ids after the cut are the suffix; the token at the cut is what the template writes at the
end of the previous turn (appended when sampling stopped without one of the family's stop
tokens). A sampled turn that ended with a stop token the template writes differently (harmony's
``<|return|>`` shown as ``<|end|>``, Llama's ``<|eom_id|>``) keeps its sampled id: the stitch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_gym.parsers import ChatFamily, ToolCallParser

__all__ = ["MARKER", "FamilySuffix"]

MARKER = "Hello there, friend. 7f3a9c"
"""Stands for the previous assistant message's text in the rendered base conversation."""

_BASE_USER = {"role": "user", "content": "Say hello."}


class FamilySuffix:
    """Suffix ids of a structured family (see the module docstring).

    Args:
        tokenizer: The tokenizer with the family's chat template.
        family: The model family.
        parser: The parser of the family's assistant messages.
        render: Renders template messages with tools to text (``ChatTokenBuilder``'s template call).
        encode: Tokenizes text (the builder's piece encoder).
    """

    def __init__(
        self,
        tokenizer: Any,
        family: ChatFamily,
        parser: ToolCallParser,
        render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str],
        encode: Callable[[str], list[int]],
    ) -> None:
        self.family = family
        self.parser = parser
        self._render = render
        self._encode = encode
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        self.terminator_ids: dict[str, int] = {t: int(vocab[t]) for t in family.terminators if t in vocab}
        self.stop_ids: frozenset[int] = frozenset(int(vocab[t]) for t in family.stop_tokens if t in vocab)
        # (tools key, roles of the new messages) -> whether the text after the cut changes with the tools
        self._needs_tools: dict[tuple[str | None, tuple[str, ...]], bool] = {}

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation in the family's shape."""
        return self.family.template_messages(messages, self.parser)

    def _base(self, previous_text: str, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
        converted = self.template_messages([{"role": "assistant", "content": previous_text}, *new])
        first = dict(converted[0])
        for field in self.family.reasoning_fields:
            first.pop(field, None)
        first["content"] = MARKER
        if first.get("tool_calls"):
            stand_in = {"text": MARKER}
            first["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": json.dumps(stand_in)
                                      if isinstance(call["function"]["arguments"], str) else stand_in}}
                for call in first["tool_calls"]
            ]
            if self.family.reasoning_or_content_with_calls:
                first["content"] = ""
        return [dict(_BASE_USER), first, *converted[1:]]

    def _cut(self, text: str) -> tuple[int, int] | None:
        """(index after the turn end, its id) of the first terminator after the last marker."""
        mark = text.rfind(MARKER)
        if mark < 0:
            return None
        after = mark + len(MARKER)
        best: tuple[int, str] | None = None
        for token in self.terminator_ids:
            pos = text.find(token, after)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, token)
        if best is None:
            return None
        return best[0] + len(best[1]), self.terminator_ids[best[1]]

    def suffix(
        self,
        previous_text: str,
        new: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tools_key: str | None,
    ) -> tuple[list[int], int] | None:
        """The ids after the previous assistant turn and the id the template ends that turn with.

        Args:
            previous_text: The previous assistant message as sampled.
            new: The messages after it (env shape).
            tools: The tools the template renders (None: none).
            tools_key: ``tools`` as canonical JSON.

        Returns:
            ``(ids, turn end id)``, or None when the render cannot be cut (the caller renders the
            whole conversation afresh).
        """
        base = self._base(previous_text, new)
        if tools:
            signature = (tools_key, tuple(str(m.get("role")) for m in base))
            needs = self._needs_tools.get(signature)
            if needs is None:
                with_tools = self._tail(self._render(base, tools))
                without = self._tail(self._render(base, None))
                needs = with_tools is None or without is None or with_tools[0] != without[0]
                if len(self._needs_tools) >= 4096:
                    self._needs_tools.clear()
                self._needs_tools[signature] = needs
                result = with_tools if needs else without
            else:
                result = self._tail(self._render(base, tools if needs else None))
        else:
            result = self._tail(self._render(base, None))
        if result is None:
            return None
        return self._encode(result[0]), result[1]

    def _tail(self, text: str) -> tuple[str, int] | None:
        cut = self._cut(text)
        if cut is None:
            return None
        return text[cut[0] :], cut[1]
