r"""Tool-call formats whose calls are JSON: Llama 3.x (``llama3_json``), Mistral, DeepSeek-V3.

* ``llama3_json`` (Llama 3.1/3.2/3.3 JSON tool calling): the message is one or more
  ``{"name": ..., "parameters": {...}}`` objects (``arguments`` accepted too), separated by
  ``;`` or whitespace, optionally after ``<|python_tag|>``. Objects that do not start the
  message are calls too when they begin with ``{"name"``.
* ``mistral``: content, then ``[TOOL_CALLS]`` and either a JSON list of
  ``{"name", "arguments", "id"?}`` (the v3 tokenizer's form) or ``NAME[ARGS]{...}`` /
  ``NAME{...}`` (the v11+ form, one per ``[TOOL_CALLS]``). Ids are 9 alphanumeric characters.
* ``deepseek_v3``: ``<｜tool▁calls▁begin｜>``, then per call
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
  (V3) or ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` (V3.1), then
  ``<｜tool▁calls▁end｜>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.parsers.base import FormatParser, decode_call, error_snippet
from agent_gym.parsers.protocol import ToolCall

__all__ = ["DeepSeekV3Parser", "Llama3JsonParser", "MistralParser"]

_DECODER = json.JSONDecoder()
_NAME_OBJECT = re.compile(r'\{\s*"name"\s*:')
_PYTHON_TAG = "<|python_tag|>"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``pos`` and its end, or None."""
    try:
        return _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None


class Llama3JsonParser(FormatParser):
    """vLLM's ``llama3_json``: JSON objects ``{"name", "parameters"}`` (see the module docstring)."""

    name: ClassVar[str] = "llama3_json"
    call_example: ClassVar[str] = '{"name": ..., "parameters": {...}}'
    call_format: ClassVar[str] = f"a JSON object per call, {call_example}"

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        kept: list[str] = []
        pos = 0
        tag = text.find(_PYTHON_TAG)
        if tag != -1:
            kept.append(text[:tag])
            pos = tag + len(_PYTHON_TAG)
        lead = len(text) - len(text[pos:].lstrip(" \t\r\n;"))
        first = lead if lead < len(text) and text[lead] == "{" else -1
        index = 0
        while pos < len(text):
            if first != -1:
                start, first = first, -1
            else:
                match = _NAME_OBJECT.search(text, pos)
                if match is None:
                    break
                start = match.start()
            between = text[pos:start]
            kept.append(between if between.strip(" \t\r\n;") or pos == 0 else "")
            decoded = _decode_at(text, start)
            if decoded is None:
                index += 1
                following = _NAME_OBJECT.search(text, start + 1)
                end = len(text) if following is None else following.start()
                errors.append(f"tool call {index}: invalid JSON in {error_snippet(text[start:end])}")
                pos = end
                continue
            obj, end = decoded
            raw = text[start:end]
            pos = end
            if not (isinstance(obj, dict) and "name" in obj):
                kept.append(raw)
                continue
            index += 1
            call, error = decode_call(obj, raw, index)
            if call is not None:
                calls.append(call)
            else:
                errors.append(error or f"tool call {index}: malformed")
        tail = text[pos:]
        kept.append(tail if tail.strip(" \t\r\n;") else "")
        return calls, errors, "".join(kept)

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """``{"name": ..., "parameters": ...}`` objects joined by ``"; "``."""
        return "; ".join(_dumps({"name": name, "parameters": dict(args)}) for name, args in calls)


class MistralParser(FormatParser):
    """vLLM's ``mistral``: ``[TOOL_CALLS]`` then a JSON list or ``NAME[ARGS]{...}`` (see the module docstring)."""

    name: ClassVar[str] = "mistral"
    call_example: ClassVar[str] = '[TOOL_CALLS][{"name": ..., "arguments": {...}}]'
    call_format: ClassVar[str] = f"[TOOL_CALLS] and a JSON list of the calls, {call_example}"
    id_style: ClassVar[str] = "mistral"
    _ID = re.compile(r"^[A-Za-z0-9]{9}$")

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        marker = "[TOOL_CALLS]"
        if marker not in text:
            return [], [], text
        head, *parts = text.split(marker)
        calls: list[ToolCall] = []
        errors: list[str] = []
        tail: list[str] = []
        for part in parts:
            body = part.strip()
            if body.startswith("["):
                decoded = _decode_at(body, 0)
                if decoded is None or not isinstance(decoded[0], list):
                    errors.append(f"tool call {len(calls) + len(errors) + 1}: invalid JSON list after {marker} "
                                  f"in {error_snippet(body)}")
                    continue
                items, end = decoded
                tail.append(body[end:])
                for item in items:
                    self._add(item, _dumps(item), calls, errors)
                continue
            name_end = min((i for i in (body.find("[ARGS]"), body.find("{")) if i != -1), default=-1)
            if name_end <= 0:
                errors.append(f"tool call {len(calls) + len(errors) + 1}: expected NAME[ARGS]{{...}} or a JSON list "
                              f"after {marker}, got {error_snippet(body)}")
                continue
            name = body[:name_end].strip()
            rest = body[name_end:]
            if rest.startswith("[ARGS]"):
                rest = rest[len("[ARGS]") :]
            decoded = _decode_at(rest.lstrip(), 0)
            if decoded is None:
                errors.append(f"tool call {len(calls) + len(errors) + 1} ({name}): invalid JSON arguments in "
                              f"{error_snippet(rest)}")
                continue
            args, end = decoded
            tail.append(rest.lstrip()[end:])
            self._add({"name": name, "arguments": args}, body[: len(body) - len(rest.lstrip()) + end], calls, errors)
        return calls, errors, head + "".join(tail)

    def _add(self, item: Any, raw: str, calls: list[ToolCall], errors: list[str]) -> None:
        index = len(calls) + len(errors) + 1
        call, error = decode_call(item, raw, index)
        if call is None:
            errors.append(error or f"tool call {index}: malformed")
            return
        given = item.get("id") if isinstance(item, dict) else None
        if isinstance(given, str) and self._ID.match(given):
            call.id = given
        calls.append(call)

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """``[TOOL_CALLS]`` and a JSON list of ``{"name", "arguments"}``."""
        return "[TOOL_CALLS]" + _dumps([{"name": name, "arguments": dict(args)} for name, args in calls])


class DeepSeekV3Parser(FormatParser):
    """vLLM's ``deepseek_v3`` (and the V3.1 call form): see the module docstring."""

    name: ClassVar[str] = "deepseek_v3"
    call_example: ClassVar[str] = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n"
        "```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    )
    call_format: ClassVar[str] = f"the tool-call markers (one <｜tool▁call▁begin｜> per call), {call_example}"
    BEGIN: ClassVar[str] = "<｜tool▁calls▁begin｜>"
    END: ClassVar[str] = "<｜tool▁calls▁end｜>"
    CALL_BEGIN: ClassVar[str] = "<｜tool▁call▁begin｜>"
    CALL_END: ClassVar[str] = "<｜tool▁call▁end｜>"
    SEP: ClassVar[str] = "<｜tool▁sep｜>"
    _FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        start = text.find(self.BEGIN)
        first_call = text.find(self.CALL_BEGIN)
        if start == -1 and first_call == -1:
            return [], [], text
        start = first_call if start == -1 else min(start, first_call) if first_call != -1 else start
        end = text.find(self.END, start)
        block_end = len(text) if end == -1 else end + len(self.END)
        block = text[start:block_end]
        calls: list[ToolCall] = []
        errors: list[str] = []
        for piece in block.split(self.CALL_BEGIN)[1:]:
            index = len(calls) + len(errors) + 1
            body = piece.split(self.CALL_END, 1)[0]
            if self.SEP not in body:
                errors.append(f"tool call {index}: expected NAME{self.SEP}ARGUMENTS, got {error_snippet(body)}")
                continue
            left, args_text = body.split(self.SEP, 1)
            if left.strip() == "function" and "\n" in args_text:  # V3: function<sep>NAME\n```json ...```
                name, args_text = args_text.split("\n", 1)
            else:
                name = left
            fence = self._FENCE.match(args_text)
            if fence:
                args_text = fence.group(1)
            try:
                args = json.loads(args_text) if args_text.strip() else {}
            except (ValueError, RecursionError) as exc:
                errors.append(f"tool call {index} ({name.strip()}): invalid JSON arguments ({exc}) in "
                              f"{error_snippet(args_text)}")
                continue
            call, error = decode_call({"name": name, "arguments": args}, self.CALL_BEGIN + body + self.CALL_END,
                                      index)
            if call is None:
                errors.append(error or f"tool call {index}: malformed")
            else:
                calls.append(call)
        if not calls and not errors:
            errors.append(f"tool call 1: {self.BEGIN} without a call")
        return calls, errors, text[:start] + text[block_end:]

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """The V3 form: one fenced JSON block per call between the begin and end markers."""
        body = "".join(
            f"{self.CALL_BEGIN}function{self.SEP}{name}\n```json\n{_dumps(dict(args))}\n```{self.CALL_END}"
            for name, args in calls
        )
        return self.BEGIN + body + self.END
