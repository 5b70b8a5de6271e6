"""The OpenAI Chat Completions wire format, for hosted OpenAI-compatible APIs.

:class:`~agent_gym.policy.VLLMChatPolicy` with ``api="openai"`` speaks only what the OpenAI
Chat Completions API defines, so that hosted endpoints (which reject unknown fields and
malformed tool turns with HTTP 400) accept every request:

* :func:`openai_request` builds a body of :data:`OPENAI_CHAT_FIELDS` only: ``model``,
  ``messages``, the token limit (``max_completion_tokens``, or ``max_tokens`` for endpoints that
  know only that one), ``temperature``, ``top_p``, the two penalties, ``seed``, ``stop``,
  ``tools`` and ``tool_choice``. vLLM's extras (``top_k``, ``min_p``, ``repetition_penalty``,
  ``min_tokens``, ``stop_token_ids``, ``return_token_ids``, ``skip_special_tokens``,
  ``chat_template_kwargs`` ...) are never sent: :func:`check_openai_sampling` refuses sampling
  settings that only they could express, rather than dropping them silently.
* :func:`openai_messages` turns an env's conversation (assistant turns as the text the model
  wrote, tool results as plain ``tool`` messages) into the API's shape: each assistant turn with
  its calls as structured ``tool_calls`` (``{"id", "type": "function", "function": {"name",
  "arguments": JSON text}}``) and each tool result as ``{"role": "tool", "tool_call_id",
  "content"}`` right after the turn that made the call. Results with no call to answer (the
  env's replies to malformed calls) follow as one ``user`` message; a call left without a result
  is taken out of its turn (the API refuses a call without an answer). Reasoning is not sent
  back (the API has no field for it). The calls the API returned with an answer are recorded
  (:class:`AnswerRecord`), so a later request replays the turn with the API's own call ids and
  argument text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.parsers.protocol import ToolCallParser
from agent_gym.policy.sampling import SamplingParams

__all__ = [
    "OPENAI_CHAT_FIELDS",
    "TOKEN_LIMIT_FIELDS",
    "AnswerRecord",
    "check_openai_sampling",
    "openai_chat_path",
    "openai_messages",
    "openai_request",
]

#: The request fields of the OpenAI Chat Completions API (``POST /chat/completions``); the policy
#: sends a subset of them and nothing else.
OPENAI_CHAT_FIELDS = frozenset({
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
    "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
    "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
})

#: The two names of the token limit: the current one and the older one some endpoints still require.
TOKEN_LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")

_HERMES_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


def check_openai_sampling(sampling: SamplingParams) -> None:
    """Refuse sampling settings the OpenAI API cannot express (they would be dropped silently).

    Raises:
        ConfigError: ``top_k`` > 0, ``min_p`` > 0, ``repetition_penalty`` != 1, ``min_tokens`` > 0
            or ``stop_token_ids`` set.
    """
    unsupported = [
        f"{name}={value!r}" for name, value, off in (
            ("top_k", sampling.top_k, sampling.top_k <= 0),
            ("min_p", sampling.min_p, sampling.min_p == 0.0),
            ("repetition_penalty", sampling.repetition_penalty, sampling.repetition_penalty == 1.0),
            ("min_tokens", sampling.min_tokens, sampling.min_tokens == 0),
            ("stop_token_ids", sampling.stop_token_ids, not sampling.stop_token_ids),
        ) if not off
    ]
    if unsupported:
        raise ConfigError(f"api='openai': the OpenAI Chat Completions API has no {', '.join(unsupported)} "
                          "(top_k=-1, min_p=0, repetition_penalty=1, min_tokens=0 and no stop_token_ids send "
                          "nothing; use api='vllm' for a vLLM server)")


def openai_chat_path(address: str) -> str:
    """The chat path under an address as the OpenAI SDK reads a base URL.

    A base URL ending in ``/v1`` (or a bare ``host:port``) is served at ``/v1/chat/completions``
    (the client strips ``/v1`` from its base); any other path prefix (``.../v1beta/openai``) at
    ``/chat/completions`` under it.
    """
    path = address.split("://", 1)[-1].partition("/")[2].rstrip("/")
    return "/v1/chat/completions" if not path or path == "v1" or path.endswith("/v1") else "/chat/completions"


def openai_request(
    sampling: SamplingParams,
    *,
    model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    seed: int | None,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str,
    token_limit_field: str = "max_completion_tokens",
) -> dict[str, Any]:
    """A Chat Completions request body of :data:`OPENAI_CHAT_FIELDS` only.

    Args:
        sampling: The policy's sampling (checked by :func:`check_openai_sampling`).
        model: The model name.
        messages: The conversation in the API's shape (:func:`openai_messages`).
        max_tokens: Tokens this turn may sample.
        seed: The turn's seed (None: unseeded).
        tools: OpenAI function schemas, or None.
        tool_choice: ``"auto"`` or ``"none"``.
        token_limit_field: One of :data:`TOKEN_LIMIT_FIELDS`.
    """
    body: dict[str, Any] = {"model": model, "messages": messages, token_limit_field: max_tokens,
                            "temperature": sampling.temperature}
    if sampling.top_p < 1.0:
        body["top_p"] = sampling.top_p
    if sampling.frequency_penalty:
        body["frequency_penalty"] = sampling.frequency_penalty
    if sampling.presence_penalty:
        body["presence_penalty"] = sampling.presence_penalty
    if seed is not None:
        body["seed"] = seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if tools:
        body["tools"] = [_function_tool(tool) for tool in tools]
        body["tool_choice"] = tool_choice
    return body


def _function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool schema as ``{"type": "function", "function": {name, description, parameters, strict}}``."""
    inner = tool.get("function")
    function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
    out = {key: function[key] for key in ("name", "description", "parameters", "strict") if key in function}
    return {"type": "function", "function": out}


@dataclass
class AnswerRecord:
    """The structured calls of the answers a session received, by the text the policy made of them."""

    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def remember(self, text: str, tool_calls: Any) -> None:
        """Keep an answer's ``tool_calls`` (as the API returned them) under the turn's ``text``."""
        wired = [_wire_call(call) for call in tool_calls if isinstance(call, Mapping)] if isinstance(
            tool_calls, list) else []
        calls = [call for call in wired if call is not None]
        if calls:
            self.calls[text] = calls


def _wire_call(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """An answer's call as a request carries it (arguments as JSON text), or None when it has no name."""
    function = call.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return None
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    out: dict[str, Any] = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str) and call["id"]:
        out["id"] = call["id"]
    return out


def openai_messages(
    messages: Sequence[Mapping[str, Any]], parser: ToolCallParser, record: AnswerRecord | None = None
) -> list[dict[str, Any]]:
    """The conversation as the OpenAI Chat Completions API takes it (see the module docstring).

    Args:
        messages: The env's conversation (role/content dicts; messages already structured, an
            assistant with ``tool_calls`` or a tool result with ``tool_call_id``, are kept so).
        parser: Reads the calls out of an assistant turn's text (the env's format).
        record: The calls the API returned with this session's answers (their ids are reused).

    Never raises on model text.
    """
    builder = _WireConversation(parser, record or AnswerRecord())
    for message in messages:
        builder.add(message)
    builder.close_turn()
    return builder.out


class _WireConversation:
    """Builds the API's messages one env message at a time (the pairing state of the last assistant turn)."""

    def __init__(self, parser: ToolCallParser, record: AnswerRecord) -> None:
        self.parser, self.record = parser, record
        self.out: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None  # the last assistant message with calls
        self.pending: list[str] = []  # its call ids still without a result, in order
        self.answered: set[str] = set()
        self.malformed = 0  # results of its malformed calls still expected (the env sends them first)
        self.orphans: list[str] = []
        self.calls_made = 0

    def add(self, message: Mapping[str, Any]) -> None:
        role = message.get("role")
        if role == "tool":
            self._tool_result(message)
            return
        self.close_turn()
        if role == "assistant":
            self._assistant(message)
        elif role in ("system", "developer", "user"):
            item: dict[str, Any] = {"role": role, "content": _content(message.get("content"))}
            if isinstance(message.get("name"), str) and message["name"]:
                item["name"] = message["name"]
            self.out.append(item)
        else:  # a role the API does not know (e.g. Llama's ipython): shown as the user's
            self.out.append({"role": "user", "content": _text(message.get("content"))})

    def _tool_result(self, message: Mapping[str, Any]) -> None:
        content = _text(message.get("content"))
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id in self.pending:
            self.pending.remove(call_id)
        elif self.malformed > 0:
            self.malformed -= 1
            self.orphans.append(content)
            return
        elif self.pending:
            call_id = self.pending.pop(0)
        else:
            self.orphans.append(content)
            return
        self.answered.add(call_id)
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def close_turn(self) -> None:
        """End the last assistant turn: drop its unanswered calls, show results without a call as the user's."""
        if self.turn is not None and self.pending:
            kept = [call for call in self.turn["tool_calls"] if call["id"] in self.answered]
            if kept:
                self.turn["tool_calls"] = kept
            else:
                del self.turn["tool_calls"]
                self.turn["content"] = self.turn.get("content") or ""
        if self.orphans:
            self.out.append({"role": "user", "content": "\n\n".join(self.orphans)})
        self.turn, self.pending, self.answered, self.malformed, self.orphans = None, [], set(), 0, []

    def _assistant(self, message: Mapping[str, Any]) -> None:
        given = message.get("tool_calls")
        if isinstance(given, list):  # already structured
            calls = [c for c in (_wire_call(call) for call in given if isinstance(call, Mapping)) if c is not None]
            content: str | None = _text(message.get("content"))
            errors = 0
        else:
            content, calls, errors = self._parse(_text(message.get("content")))
        for call in calls:
            if not call.get("id"):
                call["id"] = f"call_{self.calls_made}"
            self.calls_made += 1
        item: dict[str, Any] = {"role": "assistant", "content": content or ("" if not calls else None)}
        if calls:
            item["tool_calls"] = calls
            self.turn, self.pending = item, [call["id"] for call in calls]
        self.malformed = errors
        self.out.append(item)

    def _parse(self, text: str) -> tuple[str, list[dict[str, Any]], int]:
        """``(content, calls, malformed calls)`` of an assistant turn's text."""
        try:
            parsed = self.parser.parse(text)
        except Exception:  # noqa: BLE001 - model text never breaks a request
            return text, [], 0
        calls = [{"type": "function", "function": {"name": call.name,
                                                   "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                 for call in parsed.tool_calls]
        recorded = self.record.calls.get(text)
        if recorded is not None and [c["function"]["name"] for c in recorded] == [c.name for c in parsed.tool_calls]:
            calls = [dict(call, function=dict(call["function"])) for call in recorded]
        content = parsed.content
        if parsed.tool_calls and "<tool_call>" in content:  # hermes keeps its call blocks in the content
            content = _HERMES_CALL.sub("", content).strip()
        return content, calls, len(parsed.errors)


def _text(content: Any) -> str:
    """A message's content as text (the text parts of a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def _content(content: Any) -> Any:
    """A system or user message's content: text, or a list of parts as given."""
    return content if isinstance(content, list) else _text(content)
