"""A policy for OpenAI-compatible servers that take messages, not token ids (``/v1/chat/completions``).

:class:`VLLMChatPolicy` sends the conversation as messages; the server renders the prompt.
With vLLM's ``return_token_ids`` the answer carries the prompt and sampled ids, which the turn
records; from a server that does not return them the sampled text is re-tokenized locally (when
a tokenizer is given) and the turn is marked ``retokenized``. Prefer
:class:`~agent_gym.policy.VLLMPolicy` (token-in) for training data: only it controls the exact
prompt ids of every turn.

An answer aborted by a pause for a weight update (``finish_reason: "abort"``, vLLM's
``POST /pause?mode=abort``) does not end the turn: the policy sends the messages again with the
text sampled so far as an open final assistant message (vLLM's assistant prefill,
``continue_final_message: true`` with ``add_generation_prompt: false``), ``max_tokens`` reduced by
the ids kept and the seed moved on, until an answer ends the turn another way; the turn's text,
ids and logprobs are the aborted answers' followed by the last one's. This continues *by text*:
the server renders the prefix again from the text, so the continued answer is conditioned on
the re-tokenized text, which may differ from the ids sampled before the abort (the recorded ids
are still exactly the sampled ones). Without ids in the answers and without a tokenizer to count
the kept text, an aborted turn ends with ``finish_reason="error"`` (its episode with
``POLICY_ERROR``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agent_gym.errors import ConfigError, PromptTooLong
from agent_gym.messages import vision_messages
from agent_gym.parsers import ChatFamily, get_family, make_parser
from agent_gym.policy.chat_messages import normalize_messages
from agent_gym.policy.openai_chat import (
    TOKEN_LIMIT_FIELDS,
    AnswerRecord,
    check_openai_sampling,
    openai_chat_path,
    openai_messages,
    openai_request,
)
from agent_gym.policy.turn_resume import TurnResume, answer_versions
from agent_gym.policy.vllm_base import VLLMPolicyBase
from agent_gym.policy.vllm_protocol import map_finish_reason
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["APIS", "VLLMChatPolicy"]

#: The chat dialects: vLLM's (token ids, prefill, template kwargs) and the OpenAI API's alone (hosted endpoints).
APIS = ("vllm", "openai")


class VLLMChatPolicy(VLLMPolicyBase):
    """Policy sampling through ``/v1/chat/completions`` (for servers that cannot take token ids).

    The arguments are :class:`~agent_gym.policy.VLLMPolicy`'s, with these differences:
    ``tokenizer`` is optional (with a chat template it renders the prompt locally, to keep each
    turn within ``max_model_len`` / ``max_response_length`` and to fill in ids a server does not
    return), and ``chat_template_kwargs`` are sent with each request for the server to render.

    ``PolicyOutput.new_segment`` is set when the prompt the server rendered does not extend the
    session's previous prompt and sampled ids.

    The messages go in the model family's shape (structured ``tool_calls``, reasoning fields,
    tool results with call ids; see :class:`~agent_gym.parsers.ChatFamily`); an answer's
    ``reasoning_content`` and ``tool_calls`` (from a server running vLLM's reasoning and tool-call
    parsers) come back as text in the family's format, which the env's parser reads.
    :meth:`astream` yields the whole turn as one delta.

    Tools go with ``tool_choice: "none"`` by default: the server renders them into the prompt
    through the chat template and returns the model's text as it is, tool calls included, which
    the env's parser reads. A plain ``vllm serve`` refuses tools with ``"auto"`` (HTTP 400, "auto
    tool choice requires --enable-auto-tool-choice and --tool-call-parser"); pass
    ``tool_choice="auto"`` only for a server started with those flags, whose parsed ``tool_calls``
    then come back as text in the family's format.

    ``api="openai"`` speaks the OpenAI Chat Completions API alone, for hosted endpoints that
    refuse vLLM's fields (see :mod:`~agent_gym.policy.openai_chat`): only OpenAI request fields
    are sent (``model=`` is required; ``top_k``, ``min_p``, ``repetition_penalty``,
    ``min_tokens``, ``stop_token_ids`` and ``chat_template_kwargs`` are refused with a
    ``ConfigError``; the token limit goes as ``token_limit_field``, ``max_completion_tokens`` by
    default), tools go with ``tool_choice="auto"`` by default, each earlier assistant turn is
    sent with its calls as structured ``tool_calls`` (the ids the API returned with it) and each
    tool result as a ``tool`` message with its ``tool_call_id``; no ids, logprobs or abort
    continuation (the turn's ids are the text re-tokenized when a tokenizer is given, else
    None). The path is the OpenAI SDK's: ``{base_url}/chat/completions`` (``/v1/chat/completions``
    under an address ending in ``/v1`` or without a path). The default ``api="vllm"`` is
    token-exact on vLLM servers; prefer it (or :class:`~agent_gym.policy.VLLMPolicy`) there.

    Images an env attached to its messages (``images``, see :mod:`agent_gym.messages`, e.g.
    Web-v0's ``screenshots="observation"``) are sent only with ``send_images=True``, as OpenAI
    ``image_url`` content parts (:func:`~agent_gym.messages.vision_messages`: on a user message,
    or in a user message after the tool results they belong to), for a vision model; by default
    they are left out and the server sees text only (vLLM refuses image parts for a text-only
    model with HTTP 400, ``"<model> is not a multimodal model"``). The local tokenizer renders the
    text alone, so with images the prompt's length is checked by the server; the server's prompt
    ids then hold the images' placeholder tokens, and a turn whose earlier images were dropped
    from the conversation starts a new segment.

    Example:
        >>> policy = VLLMChatPolicy(["127.0.0.1:8000"], sampling=SamplingParams(max_tokens=64))  # doctest: +SKIP
        >>> out = policy.act([{"role": "user", "content": "hi"}], session_id="ep-0")  # doctest: +SKIP
    """

    mode: ClassVar[str] = "chat"
    needs_chat_template: ClassVar[bool] = False

    def __init__(self, *args: Any, tool_choice: str | None = None, api: str = "vllm",
                 token_limit_field: str = "max_completion_tokens", send_images: bool = False, **kwargs: Any) -> None:
        if api not in APIS:
            raise ConfigError(f"api: expected one of {', '.join(APIS)}, got {api!r}")
        tool_choice = tool_choice if tool_choice is not None else ("auto" if api == "openai" else "none")
        if tool_choice not in ("none", "auto"):
            raise ValueError(f"tool_choice: expected 'none' or 'auto', got {tool_choice!r}")
        if token_limit_field not in TOKEN_LIMIT_FIELDS:
            raise ConfigError(f"token_limit_field: expected one of {', '.join(TOKEN_LIMIT_FIELDS)}, "
                              f"got {token_limit_field!r}")
        if not isinstance(send_images, bool):
            raise TypeError(f"send_images: expected a bool, got {send_images!r}")
        self.tool_choice, self.api, self.token_limit_field = tool_choice, api, token_limit_field
        self.send_images = send_images
        super().__init__(*args, **kwargs)
        self._chat_path = "/v1/chat/completions"
        if api == "openai":
            self._check_openai()
        # session -> the structured calls of its answers (api="openai": replayed with the API's ids)
        self._answers: dict[str, AnswerRecord] = {}
        self._remember_config(**self._config, tool_choice=tool_choice, api=api, token_limit_field=token_limit_field,
                              send_images=send_images)

    def _check_openai(self) -> None:
        """Check what ``api="openai"`` needs (a model name, OpenAI sampling) and find the chat path."""
        if not self.model:
            raise ConfigError("api='openai': expected model= (the name of the model the endpoint serves)")
        if self.chat_template_kwargs:
            raise ConfigError("api='openai': chat_template_kwargs is a vLLM extension the OpenAI API does not take")
        check_openai_sampling(self.sampling)
        # the client keeps each base URL without a final /v1: the path follows from what is left
        bases = [self.client.url(name, "") for name in self.client.server_addresses]
        paths = {openai_chat_path(base) for base in bases}
        if len(paths) > 1:
            raise ConfigError(f"api='openai': the addresses serve the chat API at different paths: {bases}")
        self._chat_path = paths.pop()

    def _wire_messages(self, messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The conversation as text (rendered locally) and as sent (its images as content parts with send_images)."""
        text = normalize_messages(messages)
        return text, normalize_messages(vision_messages(messages)) if self.send_images else text

    def _chat_family(self) -> tuple[ChatFamily, Any]:
        """The model family and its parser: the tokenizer's (given or read from its template), else the names given."""
        if self.builder is not None:
            return self.builder.family, self.builder.parser
        return get_family(self._config.get("tool_parser")), None

    async def _turn(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, start: float
    ) -> PolicyOutput:
        if self.api == "openai":
            return await self._openai_turn(messages, session_id, tools, start)
        msgs, wire = self._wire_messages(messages)
        local_prompt = self.builder.render_ids(msgs, tools) if self.builder is not None else None
        family, parser = self._chat_family()
        sent = family.template_messages(wire, parser) if family.structured else wire
        previous = self._server_ids.get(session_id)
        seed = self._next_seed(session_id)
        # An answer aborted by a pause is continued from its text as an open assistant message.
        head = _ChatHead(lambda: self.weight_version)

        async def make_body(server: str) -> dict[str, Any]:
            info = await self._info(server, need_len=False)
            budget = self.sampling.max_tokens
            if local_prompt is not None:
                response_len = len(local_prompt) - len(previous) if previous else 0
                budget = self._budget(info, len(local_prompt), max(0, response_len))
            body = self._request(
                info,
                max(budget - head.count, 1),
                seed if seed is None or not head.count else seed + head.count,
                messages=sent if not head.text else [*sent, {"role": "assistant", "content": head.text}],
                logprobs=True,
                top_logprobs=self.sampling.logprobs,
                return_token_ids=True,
                skip_special_tokens=False,
                include_stop_str_in_output=True,
            )
            if head.text:  # vLLM's assistant prefill: the final message stays open and the model continues it
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
            if head.count and body.get("min_tokens"):
                body["min_tokens"] = max(int(body["min_tokens"]) - head.count, 0)
            head.budget = budget
            if tools:
                body["tools"] = tools
                body["tool_choice"] = self.tool_choice
            if self.chat_template_kwargs:
                body["chat_template_kwargs"] = self.chat_template_kwargs
            return body

        while True:
            try:
                data, server = await self.client.post(session_id, "/v1/chat/completions", make_body)
            except PromptTooLong as exc:
                if not head.count:
                    return self._truncated(local_prompt, False, start, str(exc))
                data, server = head.ended("length"), head.server
            answer = self._chat_answer(data)
            if answer.finish != "abort" or (answer.token_ids is None and self.builder is None):
                break
            head.keep(answer, data, server)
            if head.budget is not None and head.count >= head.budget:  # the kept ids used the whole budget
                data = head.ended("length")
                break
        return self._chat_output(session_id, data, local_prompt, previous, server, start, head)

    async def _openai_turn(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, start: float
    ) -> PolicyOutput:
        """One turn through the OpenAI Chat Completions API alone (``api="openai"``, see :mod:`.openai_chat`)."""
        msgs, wire = self._wire_messages(messages)
        local_prompt = self.builder.render_ids(msgs, tools) if self.builder is not None else None
        family, parser = self._chat_family()
        record = self._answers.setdefault(session_id, AnswerRecord())
        sent = openai_messages(wire, parser or make_parser(family.name, "openai" if family.name == "openai" else None),
                               record)
        previous = self._server_ids.get(session_id)
        seed = self._next_seed(session_id)
        budget = self.sampling.max_tokens
        if local_prompt is not None:
            try:
                budget = self._budget({}, len(local_prompt), len(local_prompt) - len(previous) if previous else 0)
            except PromptTooLong as exc:
                return self._truncated(local_prompt, False, start, str(exc))

        async def make_body(server: str) -> dict[str, Any]:
            return openai_request(self.sampling, model=str(self.model), messages=sent, max_tokens=budget, seed=seed,
                                  tools=tools, tool_choice=self.tool_choice, token_limit_field=self.token_limit_field)

        try:
            data, server = await self.client.post(session_id, self._chat_path, make_body)
        except PromptTooLong as exc:
            return self._truncated(local_prompt, False, start, str(exc))
        out = self._chat_output(session_id, data, local_prompt, previous, server, start)
        message = ((data.get("choices") or [{}])[0] or {}).get("message") or {}
        record.remember(out.text, message.get("tool_calls"))
        return out

    def close_session(self, session_id: str) -> None:
        """Forget the session's token state, tools, server assignment and recorded calls."""
        super().close_session(session_id)
        self._answers.pop(session_id, None)

    def _chat_answer(self, data: dict[str, Any]) -> _ChatAnswer:
        """The text, ids and logprobs of a chat answer's first choice (ids re-tokenized when it has none)."""
        choice = data["choices"][0]
        message = choice.get("message") or {}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        text = self._chat_family()[0].assistant_text(str(reasoning or ""), str(message.get("content") or ""),
                                                  _structured_calls(message.get("tool_calls")))
        finish, _ = map_finish_reason(choice.get("finish_reason"), chat=True)
        token_ids = choice.get("token_ids")
        retokenized = token_ids is None
        if token_ids is None and self.builder is not None:
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            if finish == FinishReason.STOP:
                token_ids.append(self.builder.eot_token_id)
        logprobs = None
        content = (choice.get("logprobs") or {}).get("content") if not retokenized else None
        if content is not None and token_ids is not None and len(content) == len(token_ids):
            logprobs = [float(c.get("logprob", 0.0)) for c in content]
        ids = [int(t) for t in token_ids] if token_ids is not None else None
        return _ChatAnswer(text, ids, logprobs, choice.get("finish_reason"), retokenized)

    def _chat_output(
        self,
        session_id: str,
        data: dict[str, Any],
        local_prompt: list[int] | None,
        previous: list[int] | None,
        server: str,
        start: float,
        head: _ChatHead | None = None,
    ) -> PolicyOutput:
        """The turn of a chat answer after the aborted ones (``head``); the session's ids advance unless it failed."""
        head = head if head is not None else _ChatHead(lambda: self.weight_version)
        answer = self._chat_answer(data)
        finish, error = map_finish_reason(answer.finish, chat=True)
        text, token_ids, logprobs, versions = answer.text, answer.token_ids, answer.logprobs, None
        if token_ids is not None:
            versions = answer_versions(data, len(token_ids), self.weight_version)
        if head.count:
            text = head.text + text
            if token_ids is not None and head.token_ids is not None:
                token_ids, logprobs, versions = head.resume.whole(token_ids, logprobs, versions or [])
            else:
                token_ids = logprobs = versions = None
        prompt_ids = head.prompt_ids if head.count else _prompt_ids(data)
        prompt_ids = prompt_ids if prompt_ids is not None else local_prompt
        new_segment = False
        if prompt_ids is not None and token_ids is not None:
            if previous is not None:
                new_segment = prompt_ids[: len(previous)] != previous
            if error is None:
                self._server_ids[session_id] = prompt_ids + token_ids
        out = self._output(
            start,
            text=text,
            prompt_token_ids=prompt_ids,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish,
            retokenized=answer.retokenized or head.retokenized,
            new_segment=new_segment,
            server=server,
            error=f"server {server}: {error}" if error is not None else None,
        )
        if versions is not None and token_ids is not None and len(versions) == len(token_ids):
            out.weight_versions = versions
        return out


@dataclass
class _ChatAnswer:
    """What one chat answer sampled (``finish``: the server's ``finish_reason``)."""

    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    finish: Any
    retokenized: bool


class _ChatHead:
    """The aborted answers of one chat turn: their text (the open assistant message), ids and logprobs."""

    def __init__(self, default_version: int | Callable[[], int]) -> None:
        self.resume = TurnResume(default_version)
        self.text = ""
        self.count = 0  # ids kept (the server's, else the re-tokenized text's)
        self.token_ids: list[int] | None = []
        self.prompt_ids: list[int] | None = None  # the first answer's prompt
        self.retokenized = False
        self.budget: int | None = None
        self.server = ""

    def keep(self, answer: _ChatAnswer, data: dict[str, Any], server: str) -> None:
        """Keep an aborted answer (see :meth:`TurnResume.keep`)."""
        ids = answer.token_ids or []
        if not self.count and not self.text:
            self.prompt_ids = _prompt_ids(data)
        self.resume.keep(ids, answer.logprobs, answer_versions(data, len(ids), self.resume.default_version), server)
        self.text += answer.text
        self.count += len(ids)
        self.retokenized = self.retokenized or answer.retokenized
        self.token_ids = None if answer.token_ids is None or self.token_ids is None else self.token_ids + ids
        self.server = server

    def ended(self, finish: str) -> dict[str, Any]:
        """An empty answer ending the turn with ``finish`` (after the kept ids)."""
        return {"choices": [{"message": {"content": ""}, "finish_reason": finish, "token_ids": [],
                             "logprobs": {"content": []}}]}


def _prompt_ids(data: dict[str, Any]) -> list[int] | None:
    """The prompt ids a chat answer reports (vLLM's ``prompt_token_ids``), if any."""
    choices = data.get("choices") or [{}]
    ids = data.get("prompt_token_ids") or (choices[0] or {}).get("prompt_token_ids")
    return [int(t) for t in ids] if ids is not None else None


def _structured_calls(tool_calls: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """``(name, arguments)`` of an answer's OpenAI ``tool_calls`` (what a server's tool-call parser found)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                arguments = {"arguments": arguments}
        out.append((function["name"], arguments if isinstance(arguments, dict) else {"arguments": arguments}))
    return out
