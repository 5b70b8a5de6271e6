"""The OpenAI Responses API (``POST /v1/responses``) in the gateway's terms.

Inbound, :func:`responses_request` turns a Responses body into the gateway's messages:

* ``instructions`` becomes the leading system message;
* ``input`` is a string (one user message) or a list of items: messages (``role`` +
  ``content`` as a string or ``input_text`` / ``output_text`` parts), ``function_call``,
  ``function_call_output`` and ``reasoning`` items. Consecutive assistant items - its
  ``output_text`` message, its ``reasoning`` and its ``function_call`` items, in any order -
  are regrouped into *one* assistant turn (content + calls), the shape the gateway recorded,
  so the recorded turn is found again and the session stays one segment; a reasoning item
  alone carries nothing the model did not sample and is dropped;
* ``function_call_output`` becomes a ``tool`` message (its ``output`` string or text parts);
* ``tools`` are the flat function tools of the Responses API (``{"type": "function", "name",
  "description", "parameters", "strict"}``), turned into the chat-completions schema chat
  templates render (other tool types are refused with a 400 naming them).

Outbound, :func:`response_body` builds a ``response`` object (a ``reasoning`` item when the
turn thought, a ``message`` item with ``output_text``, one ``function_call`` item per call) and
:class:`ResponsesStream` the server-sent events of a streamed one (``response.created``,
``response.output_item.added`` / ``.done``, ``response.output_text.delta``,
``response.function_call_arguments.delta`` / ``.done``, ``response.completed`` or
``response.incomplete``), piece by piece as the upstream samples.

:class:`ResponseMemory` keeps what ``previous_response_id`` refers to: the conversation a
response ended (input messages without the instructions, plus the answer as an assistant
message), so a request continuing it gets the same history as if it had re-sent it.
:class:`Responses` is the :class:`~agent_gym.gateway.dialect.Dialect` (stateful: it reads and
keeps the session's responses).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent_gym.errors import RequestError
from agent_gym.gateway.convert import ClientCall, ClientTurn, content_text
from agent_gym.gateway.dialect import Exchange, TurnRequest, sse
from agent_gym.types import FinishReason

if TYPE_CHECKING:
    from agent_gym.gateway.session import TurnResult

__all__ = [
    "ResponseMemory",
    "Responses",
    "ResponsesStream",
    "response_body",
    "responses_request",
    "responses_tools",
]

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")


def _text(content: Any, where: str) -> str:
    """Text of a Responses content field: a string or a list of text parts."""
    return content_text(content, where, part_types=_TEXT_PARTS, param="input", any_text_key=False, read_refusal=True,
                        expected="a text part (input_text/output_text)")


def responses_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses function tools as chat-completions function schemas (what chat templates render).

    Raises:
        RequestError: ``tools`` is not a list, or holds a tool that is not a function tool.
    """
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of function tools, got {type(tools).__name__}", param="tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
            raise RequestError(f"tools[{i}]: the gateway serves function tools only, got a {kind!r} tool",
                               param="tools")
        nested = tool.get("function")
        fn: Mapping[str, Any] = nested if isinstance(nested, Mapping) else tool
        if not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}]: expected {{'type': 'function', 'name', 'parameters', ...}}, "
                               f"got {str(tool)[:80]!r}", param="tools")
        schema: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            schema["description"] = fn["description"]
        schema["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": schema})
    return out


def _assistant(turn: dict[str, Any] | None, out: list[dict[str, Any]]) -> dict[str, Any]:
    """The open assistant turn (a new one when the last message is not an open assistant turn)."""
    if turn is None:
        turn = {"role": "assistant", "content": "", "calls": []}
        out.append(turn)
    return turn


def responses_request(body: Any, history: Sequence[dict[str, Any]] = ()) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``/v1/responses`` body into messages and tools.

    Args:
        body: The request body.
        history: The conversation ``previous_response_id`` names (see :class:`ResponseMemory`),
            placed after the instructions and before ``input``.

    Returns:
        ``(messages, tools, conversation)``: the messages to sample from (system from
        ``instructions`` first), the tools, and the conversation without the instructions
        (what a later ``previous_response_id`` continues).

    Raises:
        RequestError: The body is malformed.
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"expected a JSON object, got {type(body).__name__}")
    raw = body.get("input")
    if isinstance(raw, str):
        items: list[Any] = [{"type": "message", "role": "user", "content": raw}]
    elif isinstance(raw, list) and (raw or history):
        items = raw
    else:
        raise RequestError(f"input: expected a string or a non-empty list of items, got {str(raw)[:80]!r}",
                           param="input")
    conversation: list[dict[str, Any]] = [dict(m) for m in history]
    open_turn: dict[str, Any] | None = None
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise RequestError(f"{where}: expected an item object, got {str(item)[:80]!r}", param="input")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise RequestError(f"{where}: expected role system/developer/user/assistant, got {role!r}",
                                   param="input")
            text = _text(item.get("content"), f"{where}.content")
            if role == "assistant":
                reuse = open_turn is not None and not open_turn["content"]  # its calls/reasoning came first
                turn = _assistant(open_turn if reuse else None, conversation)
                turn["content"] = text
                open_turn = turn
                continue
            conversation.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise RequestError(f"{where}: expected a function_call with a name, got {str(item)[:80]!r}",
                                   param="input")
            open_turn = _assistant(open_turn, conversation)
            open_turn["calls"].append((item["name"], item.get("arguments") or "{}"))
            continue
        elif kind == "reasoning":
            open_turn = _assistant(open_turn, conversation)  # the thought is part of the recorded text
            continue
        elif kind == "function_call_output":
            conversation.append({"role": "tool", "content": _text(item.get("output"), f"{where}.output")})
        elif kind == "item_reference":
            raise RequestError(f"{where}: item_reference is not served; send the items themselves or use "
                               "previous_response_id", param="input")
        else:
            raise RequestError(f"{where}: unsupported item type {kind!r} (served: message, function_call, "
                               "function_call_output, reasoning)", param="input")
        open_turn = None
    conversation = [m for m in conversation if m["role"] != "assistant" or m["content"] or m["calls"]]
    messages = list(conversation)
    instructions = body.get("instructions")
    if instructions:
        messages.insert(0, {"role": "system", "content": _text(instructions, "instructions")})
    if not messages:
        raise RequestError("input: expected at least one message", param="input")
    return messages, responses_tools(body.get("tools")), conversation


class ResponseMemory:
    """Conversations of recent responses, for ``previous_response_id`` (bounded, per session).

    Each response keeps only what it added - the messages of its request beyond the history it
    continued, and its answer - and a link to the response it continued, so a long chain costs
    memory in proportion to its length. A finished session's responses are dropped
    (:meth:`forget`).

    Args:
        capacity: How many responses are kept in all (the least recent leave first).
    """

    def __init__(self, capacity: int = 10000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[str, str | None, list[dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, session_id: str, conversation: list[dict[str, Any]], turn: ClientTurn,
            previous: str | None = None, history_length: int = 0) -> None:
        """Keep ``conversation`` + the answer ``turn`` under ``response_id``.

        Args:
            response_id: The new response's id.
            session_id: Its session.
            conversation: The request's conversation (without the instructions).
            turn: The answer.
            previous: The ``previous_response_id`` the request continued, if any.
            history_length: How many leading messages of ``conversation`` came from ``previous``.
        """
        answer = {"role": "assistant", "content": turn.content, "calls": [(c.name, c.arguments) for c in turn.calls]}
        with self._lock:
            self._items[response_id] = (session_id, previous, [*conversation[history_length:], answer])
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, response_id: Any, session_id: str) -> list[dict[str, Any]]:
        """The conversation ``response_id`` ended.

        Raises:
            RequestError: Unknown id (or one whose chain was dropped), or one of another session (404).
        """
        parts: list[list[dict[str, Any]]] = []
        current = response_id if isinstance(response_id, str) else None
        with self._lock:
            while current is not None:
                entry = self._items.get(current)
                if entry is None or entry[0] != session_id:
                    raise RequestError(f"previous_response_id: unknown response {response_id!r} in this session",
                                       status=404, kind="NotFoundError", param="previous_response_id")
                parts.append(entry[2])
                current = entry[1]
        if not parts:
            raise RequestError(f"previous_response_id: expected a response id, got {response_id!r}", status=404,
                               kind="NotFoundError", param="previous_response_id")
        return [dict(m) for part in reversed(parts) for m in part]

    def forget(self, session_id: str) -> None:
        """Drop the responses of ``session_id``."""
        with self._lock:
            for key in [k for k, v in self._items.items() if v[0] == session_id]:
                del self._items[key]


def _status(finish: str) -> tuple[str, dict[str, str] | None]:
    if finish == FinishReason.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if done else []
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call: ClientCall, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
            "arguments": call.arguments_json if status == "completed" else "", "status": status}


def _reasoning_item(item_id: str, thought: str) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": thought}] if thought else []
    return {"type": "reasoning", "id": item_id, "summary": summary}


def _shell(body: Mapping[str, Any], response_id: str, model: str, created: int) -> dict[str, Any]:
    """The fields of a ``response`` object that echo the request."""
    return {
        "id": response_id, "object": "response", "created_at": created, "status": "in_progress", "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"), "max_output_tokens":
        body.get("max_output_tokens"), "model": model, "output": [], "parallel_tool_calls":
        body.get("parallel_tool_calls", True), "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning"), "store": body.get("store", True), "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": list(body.get("tools") or []), "top_p": body.get("top_p"), "truncation": body.get("truncation",
        "disabled"), "usage": None, "metadata": body.get("metadata") or {},
    }


def response_body(turn: ClientTurn, body: Mapping[str, Any], *, response_id: str, model: str,
                  prompt_ids: Sequence[int], token_ids: Sequence[int]) -> dict[str, Any]:
    """The ``response`` object of an unstreamed turn."""
    response = _shell(body, response_id, model, int(time.time()))
    output: list[dict[str, Any]] = []
    if turn.thought:
        output.append(_reasoning_item(f"rs_{uuid.uuid4().hex}", turn.thought))
    if turn.content or not turn.calls:
        output.append(_message_item(f"msg_{uuid.uuid4().hex}", turn.content))
    output += [_call_item(f"fc_{uuid.uuid4().hex}", c) for c in turn.calls]
    status, details = _status(turn.finish)
    response.update(status=status, incomplete_details=details, output=output,
                    usage=_usage(len(prompt_ids), len(token_ids)))
    return response


class ResponsesStream:
    """Server-sent events of a streamed ``response``, built piece by piece.

    Pieces are those of :class:`~agent_gym.gateway.stream.StreamSplitter`: reasoning text goes
    to a ``reasoning`` item's summary, content to a ``message`` item's ``output_text``, each
    call to its own ``function_call`` item (sent whole once its block closed).

    Args:
        body: The request body (echoed in the ``response`` object).
        model: The model name reported.
        response_id: The response's id (default: a new one).
        on_finish: Called with the stream once :meth:`finish` built the closing events.
    """

    def __init__(self, body: Mapping[str, Any], model: str, response_id: str | None = None,
                 on_finish: Callable[[ResponsesStream], None] | None = None) -> None:
        self.id = response_id or f"resp_{uuid.uuid4().hex}"
        self.on_finish = on_finish
        self.response = _shell(body, self.id, model, int(time.time()))
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self.open: dict[str, Any] | None = None  # the reasoning or message item receiving deltas
        self.text = ""
        self.calls: list[ClientCall] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(data, kind)

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=dict(self.response)),
                self._event("response.in_progress", response=dict(self.response))]

    def _close(self) -> list[bytes]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = len(self.output)
        out: list[bytes] = []
        if item["type"] == "reasoning":
            part: dict[str, Any] = {"type": "summary_text", "text": self.text}
            out.append(self._event("response.reasoning_summary_text.done", item_id=item["id"], output_index=index,
                                   summary_index=0, text=self.text))
            out.append(self._event("response.reasoning_summary_part.done", item_id=item["id"], output_index=index,
                                   summary_index=0, part=part))
            done = _reasoning_item(item["id"], self.text)
        else:
            part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
            out.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=self.text, logprobs=[]))
            out.append(self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                   content_index=0, part=part))
            done = _message_item(item["id"], self.text)
        out.append(self._event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        self.text = ""
        return out

    def _open(self, kind: str) -> list[bytes]:
        if self.open is not None and self.open["type"] == kind:
            return []
        out = self._close()
        index = len(self.output)
        if kind == "reasoning":
            item = _reasoning_item(f"rs_{uuid.uuid4().hex}", "")
            out.append(self._event("response.output_item.added", output_index=index, item=item))
            out.append(self._event("response.reasoning_summary_part.added", item_id=item["id"], output_index=index,
                                   summary_index=0, part={"type": "summary_text", "text": ""}))
        else:
            item = _message_item(f"msg_{uuid.uuid4().hex}", "", status="in_progress")
            out.append(self._event("response.output_item.added", output_index=index, item=item))
            out.append(self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                   content_index=0, part={"type": "output_text", "text": "", "annotations": [],
                                                          "logprobs": []}))
        self.open = item
        return out

    def pieces(self, pieces: list[tuple[Any, ...]]) -> list[bytes]:
        """Events of reasoning, content and tool-call pieces."""
        out: list[bytes] = []
        for piece in pieces:
            if piece[0] in ("reasoning", "content"):
                kind = "reasoning" if piece[0] == "reasoning" else "message"
                out += self._open(kind)
                index = len(self.output)
                self.text += piece[1]
                assert self.open is not None
                if kind == "reasoning":
                    out.append(self._event("response.reasoning_summary_text.delta", item_id=self.open["id"],
                                           output_index=index, summary_index=0, delta=piece[1]))
                else:
                    out.append(self._event("response.output_text.delta", item_id=self.open["id"],
                                           output_index=index, content_index=0, delta=piece[1], logprobs=[]))
            else:
                out += self._close()
                call = ClientCall(f"call_{uuid.uuid4().hex[:24]}", piece[1], dict(piece[2]))
                self.calls.append(call)
                index, item_id = len(self.output), f"fc_{uuid.uuid4().hex}"
                arguments = call.arguments_json
                out.append(self._event("response.output_item.added", output_index=index,
                                       item=_call_item(item_id, call, status="in_progress")))
                out.append(self._event("response.function_call_arguments.delta", item_id=item_id,
                                       output_index=index, delta=arguments))
                out.append(self._event("response.function_call_arguments.done", item_id=item_id,
                                       output_index=index, name=call.name, arguments=arguments))
                done = _call_item(item_id, call)
                out.append(self._event("response.output_item.done", output_index=index, item=done))
                self.output.append(done)
        return out

    def end(self, finish: str, prompt_tokens: int, output_tokens: int, extra: dict[str, Any]) -> list[bytes]:
        """Close the open item, then ``response.completed`` (``response.incomplete`` at the token limit).

        ``extra`` is added to the final event's data (the gateway's ``agent_gym`` record).
        """
        out = self._close()
        if not self.output:  # an empty answer is still one (empty) message
            out += self._open("message") + self._close()
        status, details = _status(finish)
        self.response.update(status=status, incomplete_details=details, output=list(self.output),
                             usage=_usage(prompt_tokens, output_tokens))
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event(kind, response=self.response, **extra))
        return out

    def error(self, message: str, code: str = "server_error") -> list[bytes]:
        """An ``error`` event (the client raises it) and ``response.failed``."""
        error = {"code": code, "message": message}
        self.response.update(status="failed", error=error, output=list(self.output))
        return [self._event("error", code=code, message=message, param=None, error=error),
                self._event("response.failed", response=self.response)]

    @property
    def turn(self) -> ClientTurn:
        """What the client received, as a turn (for ``previous_response_id``)."""
        text = "".join(i["content"][0]["text"] for i in self.output if i["type"] == "message" and i["content"])
        return ClientTurn(content=text, thought="", calls=list(self.calls))

    def refuse(self, exc: RequestError) -> list[bytes]:
        """:meth:`error` of a refused turn (``invalid_tool_call``)."""
        return self.error(str(exc), "invalid_tool_call")

    def finish(self, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """:meth:`end` of a decided turn, then ``on_finish``."""
        out = result.output
        events = self.end(out.finish_reason, len(out.prompt_token_ids or []), len(out.token_ids or []), record)
        if self.on_finish is not None:
            self.on_finish(self)
        return events


class Responses:
    """The Responses :class:`~agent_gym.gateway.dialect.Dialect`: its requests continue the responses it keeps.

    Args:
        memory: The session's responses (``previous_response_id``); a new one by default.
    """

    api = "responses"
    path = "responses"
    stateful = True

    def __init__(self, memory: ResponseMemory | None = None) -> None:
        self.memory = memory or ResponseMemory()

    def parse_request(self, body: Mapping[str, Any], session_id: str | None) -> TurnRequest:
        """:func:`responses_request` after the conversation ``previous_response_id`` names in the session.

        Raises:
            RequestError: A malformed body (400) or an unknown ``previous_response_id`` (404).
        """
        previous = body.get("previous_response_id")
        history = self.memory.get(previous, str(session_id)) if previous else []
        messages, tools, conversation = responses_request(body, history)
        return TurnRequest(messages, tools, (conversation, previous, len(history)))

    def _keep(self, response_id: str, exchange: Exchange, turn: ClientTurn) -> None:
        conversation, previous, history_length = exchange.request.state
        self.memory.put(response_id, exchange.session_id, conversation, turn, previous, history_length)

    def render_turn(self, exchange: Exchange, result: TurnResult) -> dict[str, Any]:
        """The ``response`` object (kept for a later ``previous_response_id``)."""
        response_id = f"resp_{uuid.uuid4().hex}"
        self._keep(response_id, exchange, result.turn)
        out = result.output
        return response_body(result.turn, exchange.body, response_id=response_id, model=exchange.model,
                             prompt_ids=out.prompt_token_ids or [], token_ids=out.token_ids or [])

    def replay(self, exchange: Exchange, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """The events of the decided turn, as :class:`ResponsesStream` sends them (the response kept)."""
        response_id = f"resp_{uuid.uuid4().hex}"
        self._keep(response_id, exchange, result.turn)
        out, turn = result.output, result.turn
        replay = ResponsesStream(exchange.body, exchange.model, response_id)
        pieces: list[tuple[Any, ...]] = [("reasoning", turn.thought)] if turn.thought else []
        pieces += [("content", turn.content)] if turn.content else []
        pieces += [("call", c.name, c.arguments) for c in turn.calls]
        return replay.start() + replay.pieces(pieces) + replay.end(
            out.finish_reason, len(out.prompt_token_ids or []), len(out.token_ids or []), record)

    def encoder(self, exchange: Exchange) -> ResponsesStream:
        """A :class:`ResponsesStream` whose finished response is kept."""
        return ResponsesStream(exchange.body, exchange.model,
                               on_finish=lambda stream: self._keep(stream.id, exchange, stream.turn))

    def render_error(self, exc: RequestError) -> dict[str, Any]:
        """OpenAI's error body."""
        return exc.openai_body()
