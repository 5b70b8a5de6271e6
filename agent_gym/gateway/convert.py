"""Translate OpenAI and Anthropic requests into agent_gym messages, and sampled turns back.

Inbound, a client's conversation becomes the plain ``{"role", "content"}`` messages an
agent_gym env would produce: ``system`` / ``user`` / ``assistant`` / ``tool`` with string
content. An assistant message the gateway itself produced is replaced by the exact text the
model sampled (its tool calls included), looked up by its *signature* (visible text and
tool calls); one the gateway does not know (the client wrote or edited it) is rendered in the
session's format and flagged, so the prompt builder starts a new segment instead of silently
re-tokenizing.

Outbound, the sampled text is parsed (``<think>``, ``<tool_call>``) into OpenAI
``message`` / ``tool_calls`` or Anthropic ``content`` blocks (``text``, ``tool_use``), and
into the server-sent events of both streaming dialects.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import RequestError
from agent_gym.parsers import ToolCallParser, family_of
from agent_gym.types import FinishReason

__all__ = [
    "CHAT_TEXT_PARTS",
    "ClientCall",
    "ClientTurn",
    "RequestError",
    "anthropic_events",
    "anthropic_message",
    "anthropic_request",
    "anthropic_tools",
    "content_text",
    "openai_chunks",
    "openai_completion",
    "openai_request",
    "render_assistant",
    "signature",
    "sse",
]


@dataclass
class ClientCall:
    """A tool call as a client sees it."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as a JSON string (OpenAI's ``function.arguments``)."""
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class ClientTurn:
    """What a client sees of one sampled turn."""

    content: str
    thought: str
    calls: list[ClientCall] = field(default_factory=list)
    finish: str = FinishReason.STOP


def _canonical_args(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value.strip()
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def signature(content: str, calls: Sequence[tuple[str, Any]]) -> str:
    """Key identifying an assistant message by its visible text and tool calls (ids ignored)."""
    return json.dumps([content.strip(), [[str(n), _canonical_args(a)] for n, a in calls]], ensure_ascii=False)


def render_assistant(content: str, calls: Sequence[tuple[str, Any]], parser: ToolCallParser | None = None) -> str:
    """Text of an assistant message the gateway did not produce, in the session's model format.

    Args:
        content: The message's visible text.
        calls: Its tool calls as ``(name, arguments)``.
        parser: The session's tool-call parser: its family writes the message
            (:meth:`~agent_gym.parsers.ChatFamily.unsampled_text`; None: hermes).
    """
    decoded = []
    for name, arguments in calls:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        decoded.append((name, arguments))
    return family_of(parser).unsampled_text(content, decoded)


CHAT_TEXT_PARTS = ("text", "input_text", "output_text")
"""Content part types read as text in chat-completions and Anthropic messages."""


def content_text(content: Any, where: str, *, part_types: Sequence[str] = CHAT_TEXT_PARTS, param: str | None = None,
                 any_text_key: bool = True, read_refusal: bool = False, expected: str = "a text part") -> str:
    """Text of a content field: a string, or a list of text parts/blocks joined by newlines.

    Args:
        content: The field (None reads as "").
        where: The field's path, named in errors.
        part_types: Part ``type`` values read as text.
        param: The error's ``param`` (default ``where``).
        any_text_key: Also read a part of another type that has a ``text`` key.
        read_refusal: A part without text gives its ``refusal`` text (Responses parts).
        expected: How errors name a valid part.

    Raises:
        RequestError: Content of another shape.
    """
    param = where if param is None else param
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in part_types:
                texts.append(str(part.get("text") or (part.get("refusal") if read_refusal else None) or ""))
            elif any_text_key and isinstance(part, Mapping) and "text" in part:
                texts.append(str(part["text"]))
            else:
                raise RequestError(f"{where}[{i}]: expected {expected}, got {str(part)[:80]!r}", param=param)
        return "\n".join(texts)
    raise RequestError(f"{where}: expected a string or a list of text parts, got {type(content).__name__}",
                       param=param)


def _expect_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise RequestError(f"{where}: expected a non-empty list, got {str(value)[:80]!r}", param=where)
    return value


# --------------------------------------------------------------------------- OpenAI in
def _openai_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of function tools, got {type(tools).__name__}", param="tools")
    out = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}]: expected {{'type': 'function', 'function': {{'name', ...}}}}, "
                               f"got {str(tool)[:80]!r}", param="tools")
        out.append({"type": "function", "function": dict(fn)})
    return out


def openai_request(body: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``/v1/chat/completions`` body into messages and tools.

    Returns:
        ``(messages, tools)``: messages keep ``role``, text ``content`` and, for assistant
        messages, ``calls`` as ``[(name, arguments), ...]`` (resolved later by the session).

    Raises:
        RequestError: The body is malformed.
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"expected a JSON object, got {type(body).__name__}")
    messages = []
    for i, msg in enumerate(_expect_list(body.get("messages"), "messages")):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise RequestError(f"messages[{i}]: expected an object with role system/user/assistant/tool, "
                               f"got {str(msg)[:80]!r}", param="messages")
        role = "system" if msg["role"] == "developer" else msg["role"]
        item: dict[str, Any] = {"role": role, "content": content_text(msg.get("content"), f"messages[{i}].content")}
        if role == "assistant":
            calls = []
            for j, call in enumerate(msg.get("tool_calls") or []):
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                    raise RequestError(f"messages[{i}].tool_calls[{j}]: expected a function call, "
                                       f"got {str(call)[:80]!r}", param="messages")
                calls.append((fn["name"], fn.get("arguments") or "{}"))
            item["calls"] = calls
        messages.append(item)
    return messages, _openai_tools(body.get("tools"))


# --------------------------------------------------------------------------- Anthropic in
def anthropic_tools(tools: Any) -> list[dict[str, Any]]:
    """Anthropic tool definitions as OpenAI function schemas (what chat templates render)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of tools, got {type(tools).__name__}", param="tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}]: expected {{'name', 'input_schema', ...}}, got {str(tool)[:80]!r}",
                               param="tools")
        fn: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            fn["description"] = tool["description"]
        fn["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": fn})
    return out


def anthropic_request(body: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``/v1/messages`` body into messages and tools (see :func:`openai_request`)."""
    if not isinstance(body, Mapping):
        raise RequestError(f"expected a JSON object, got {type(body).__name__}")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": content_text(system, "system")})
    for i, msg in enumerate(_expect_list(body.get("messages"), "messages")):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant"):
            raise RequestError(f"messages[{i}]: expected an object with role user/assistant, got {str(msg)[:80]!r}",
                               param="messages")
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise RequestError(f"messages[{i}].content: expected a string or a list of blocks", param="messages")
        texts: list[str] = []
        calls: list[tuple[str, Any]] = []
        for j, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, Mapping) else None
            where = f"messages[{i}].content[{j}]"
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "tool_result" and msg["role"] == "user":
                messages.append({"role": "tool", "content": content_text(block.get("content"), where)})
            elif kind == "tool_use" and msg["role"] == "assistant":
                calls.append((str(block.get("name")), block.get("input") or {}))
            elif kind in ("thinking", "redacted_thinking") and msg["role"] == "assistant":
                continue
            else:
                raise RequestError(f"{where}: unsupported block {str(block)[:80]!r}", param="messages")
        if msg["role"] == "assistant":
            messages.append({"role": "assistant", "content": "\n".join(texts), "calls": calls})
        elif texts:
            messages.append({"role": "user", "content": "\n".join(texts)})
    return messages, anthropic_tools(body.get("tools"))


# --------------------------------------------------------------------------- out
def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _openai_finish(turn: ClientTurn) -> str:
    if turn.finish == FinishReason.LENGTH:
        return "length"
    return "tool_calls" if turn.calls else "stop"


def openai_completion(
    turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int], with_ids: bool
) -> dict[str, Any]:
    """A ``chat.completion`` body (vLLM's ``prompt_token_ids`` / ``token_ids`` when ``with_ids``)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content if turn.content or not turn.calls else None}
    if turn.thought:
        message["reasoning_content"] = turn.thought
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in turn.calls
        ]
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": _openai_finish(turn), "logprobs": None}
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(len(prompt_ids), len(token_ids)),
    }
    if with_ids:
        body["prompt_token_ids"] = list(prompt_ids)
        choice["token_ids"] = list(token_ids)
    return body


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``data: [DONE]`` for the string ``"[DONE]"``)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _pieces(text: str, size: int = 24) -> Iterator[str]:
    """``text`` cut at whitespace into pieces of about ``size`` characters."""
    pattern = r".{1,SIZE}(?:\s+|$)|\S+".replace("SIZE", str(size))
    for match in re.finditer(pattern, text, re.DOTALL):
        if match.group(0):
            yield match.group(0)


def openai_chunks(
    turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int], include_usage: bool
) -> Iterator[bytes]:
    """The ``chat.completion.chunk`` events of a turn, ending with ``[DONE]``."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.thought):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(turn.content):
        yield chunk({"content": piece})
    for i, call in enumerate(turn.calls):
        yield chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": call.arguments_json}}]})
    yield chunk({}, _openai_finish(turn))
    if include_usage:
        yield sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": _usage(len(prompt_ids), len(token_ids))})
    yield sse("[DONE]")


def _anthropic_stop(turn: ClientTurn) -> str:
    if turn.finish == FinishReason.LENGTH:
        return "max_tokens"
    return "tool_use" if turn.calls else "end_turn"


def _anthropic_blocks(turn: ClientTurn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.content or not turn.calls:
        blocks.append({"type": "text", "text": turn.content})
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in turn.calls]
    return blocks


def anthropic_message(turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int]) -> dict[str, Any]:
    """A ``message`` body of the Messages API."""
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(turn),
        "stop_reason": _anthropic_stop(turn),
        "stop_sequence": None,
        "usage": {"input_tokens": len(prompt_ids), "output_tokens": len(token_ids)},
    }


def anthropic_events(turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int]) -> Iterator[bytes]:
    """The server-sent events of a streamed Messages API answer."""
    start = anthropic_message(turn, model=model, prompt_ids=prompt_ids, token_ids=token_ids)
    start.update(content=[], stop_reason=None)
    start["usage"] = {"input_tokens": len(prompt_ids), "output_tokens": 0}
    yield sse({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(_anthropic_blocks(turn)):
        first: dict[str, Any]
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}]
        yield sse({"type": "content_block_start", "index": index, "content_block": first}, "content_block_start")
        for delta in deltas:
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield sse({"type": "message_delta", "delta": {"stop_reason": _anthropic_stop(turn), "stop_sequence": None},
               "usage": {"output_tokens": len(token_ids)}}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
