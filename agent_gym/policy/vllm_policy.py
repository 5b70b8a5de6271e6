"""A token-in policy backed by one or more vLLM (OpenAI-compatible) servers.

:class:`VLLMPolicy` samples through ``POST /v1/completions``: each turn's prompt ids come from a
:class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder` and are sent as a list of ints with
``return_token_ids``, so the recorded tokens are exactly the ids the server sampled.
:meth:`VLLMPolicy.astream` sends the same request streamed and yields the sampled text and ids as
they arrive. Servers that cannot take token ids are served by
:class:`~agent_gym.policy.vllm_chat.VLLMChatPolicy`.

A turn's ``token_ids`` are every id the server sampled, the final stop id or the id that completed
a stop string included; its text leaves a stop id's text out and ends right after a stop string
(vLLM's text with ``include_stop_str_in_output=True``, cut where vLLM cuts it; see
:func:`~agent_gym.policy.sampling.turn_text`).

Every turn records its sampling (``PolicyOutput.sampling``): the policy's
:class:`~agent_gym.policy.sampling.SamplingParams` and the ``logprobs_mode`` the policy is
told the server runs with (vLLM's ``--logprobs-mode``, ``raw_logprobs`` by default), so a
trajectory says whether its logprobs are the model's raw log-softmax or the processed
distribution.

This module holds the turn logic (request bodies, reading the answers); the configuration
shared with the chat policy is :class:`~agent_gym.policy.vllm_base.VLLMPolicyBase`, the HTTP
side (session-affine routing, retries, failover, ``/v1/models``) is
:class:`~agent_gym.policy.vllm_client.VLLMClient` with its
:class:`~agent_gym.policy.client_options.ClientOptions`. Requests carry the session id in
``x-session-id`` and ``X-SMG-Routing-Key`` (for vllm-router and the SGLang gateway) and
stick to one server per session. Connection errors, timeouts, HTTP 5xx and 429 are retried
with exponential backoff on another server; a 400 is not retried; an over-long prompt ends
the turn with ``finish_reason="prompt_truncation"``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ClassVar

from agent_gym.errors import PromptTooLong, ServerError, StreamInterrupted
from agent_gym.policy.sampling import turn_text
from agent_gym.policy.token_apis import TokenAPI, token_api
from agent_gym.policy.turn_resume import ContinuedText, TurnResume, answer_versions, choice_versions
from agent_gym.policy.vllm_base import StreamEvent, VLLMPolicyBase
from agent_gym.policy.vllm_protocol import is_context_error, map_finish_reason, parse_completion_choice
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = ["VLLMPolicy"]


class VLLMPolicy(VLLMPolicyBase):
    """Policy talking to vLLM-compatible servers with exact token capture (token-in ``/v1/completions``).

    Args:
        server_addresses: ``"IP:PORT"`` strings or URLs (one or several servers of the same
            model), or a ready :class:`~agent_gym.policy.vllm_client.VLLMClient` (its options
            are then the client's: leave ``client_options`` None).
        tokenizer: The model's Hugging Face tokenizer with a chat template (or a path/name to
            load one).
        sampling: ``SamplingParams`` (or a dict of them) with ``n=1``: a turn is one sample (for K
            samples of a task use ``collect(..., samples_per_task=K)``; ``n`` > 1 raises
            ``ValueError``).
        max_model_len: Context length; when None it is read from the server's ``/v1/models``.
        max_response_length: Most ids after a segment's first prompt (sampled and environment
            ids); each turn's ``max_tokens`` is capped by what is left.
        model: Model name to send; when None the server's first model is used.
        chat_template_kwargs: Extra chat template variables (e.g. ``{"enable_thinking": False}``).
        logprobs_mode: The ``--logprobs-mode`` the servers run with: ``"raw_logprobs"``
            (vLLM's default: the log-softmax of the model's logits before temperature,
            penalties and top-k/top-p/min-p) or ``"processed_logprobs"`` (after them). The
            server decides what it returns; this names it in each turn's ``sampling`` record
            (and so in the trajectories).
        client_options: :class:`~agent_gym.policy.client_options.ClientOptions` (or a dict of
            them): concurrency, timeouts, retries (connection errors, timeouts, 5xx, 429),
            backoff, how long a failed server is avoided, API key.
        api: The token-in API to sample through (:mod:`agent_gym.policy.token_apis`):
            ``"completions"`` (``POST /v1/completions``, the default), ``"vllm_generate"``
            (vLLM's ``POST /inference/v1/generate``) or ``"sglang_generate"`` (SGLang's
            ``POST /generate``). Every API records the ids and logprobs the server sampled;
            only ``"completions"`` streams token by token (the others' ``astream`` yields the
            whole turn as one delta).

    ``tools`` given to a turn stay with the session: a later turn called with ``tools=None``
    renders the same tools, ``tools=[]`` removes them.

    The HTTP connections of each event loop are pooled. ``act``, ``collect`` and the context
    manager close them; in your own event loop use ``async with VLLMPolicy(...) as policy:``
    or ``await policy.aclose()`` before the loop ends. A pool left open is released quietly
    when its loop is gone or at exit.

    The policy pickles as its configuration (servers, client options, tokenizer, sampling); the
    copy opens its own connections on first use (e.g. in a Ray actor).

    Example:
        >>> policy = VLLMPolicy(["127.0.0.1:8000"], tokenizer, SamplingParams(temperature=1.0),
        ...                     client_options=ClientOptions(max_retries=1))  # doctest: +SKIP
        >>> out = policy.act(obs, session_id=info["episode_id"], tools=info["policy_tools"])  # doctest: +SKIP
    """

    mode: ClassVar[str] = "tokens"

    def __init__(self, *args: Any, api: str = "completions", **kwargs: Any) -> None:
        self.api: TokenAPI = token_api(api)
        super().__init__(*args, **kwargs)
        self._remember_config(**self._config, api=api)

    async def _turn(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, start: float
    ) -> PolicyOutput:
        api = self.api
        plan, make_body = self._token_request(messages, session_id, tools, stream=False)
        # An answer aborted by a pause (vLLM's finish_reason "abort") keeps its ids; the turn goes on.
        resume = TurnResume(lambda: self.weight_version)
        budget = [0]

        async def api_body(server: str) -> dict[str, Any]:
            body = await make_body(server)
            budget[0] = int(body["max_tokens"])
            return api.build(resume.extend_body(body))

        while True:
            try:
                data, server = await self.client.post(session_id, api.path, api_body, required_key=api.required_key)
            except PromptTooLong as exc:
                return self._truncated(plan.prompt_ids, plan.new_segment, start, str(exc))
            try:
                choice = api.parse(data)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ServerError(f"server {server} returned an unexpected body for POST {api.path} ({exc!r}): "
                                  f"{str(data)[:200]}", server=server, status=200) from None
            if not resume.absorb(choice, data, server):
                break
            if resume.budget_spent(budget[0]):  # the ids kept used the whole budget
                choice, data = {"token_ids": [], "logprobs": {"token_logprobs": []}, "finish_reason": "length"}, {}
                break
        choice, versions = resume.merged(choice, data)
        out = self._token_output(plan, choice, server, start)
        if versions is not None and out.token_ids is not None and len(versions) == len(out.token_ids):
            out.weight_versions = versions
        return out

    async def astream(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Sample the next assistant turn as a stream: deltas as the server samples them, then the turn.

        The request is the one :meth:`aact` sends, with ``"stream": true``; routing, session
        affinity, seeds and token state are the same, and the last event's ``output`` equals what
        :meth:`aact` returns for the same sample. The deltas' text concatenates to
        ``output.text`` exactly, as vLLM's streamed text does to its whole text: the server's
        deltas are passed on, and the last one is cut from the turn's text, so the text of a stop
        id (which the request's ``include_stop_str_in_output`` makes the server stream) is not
        passed on, and a stop string ends the text. Retries and failover happen only before the first
        chunk arrived; a stream that breaks later ends the turn with ``finish_reason="error"`` (the
        turn is not committed).

        An answer aborted by a pause (``finish_reason: "abort"``) is continued as :meth:`aact`
        continues it (:mod:`~agent_gym.policy.turn_resume`): the ids streamed so far are kept and
        the next answer's deltas follow them in the same stream, so the deltas' ids are the turn's
        ids once each. From the abort on, the text deltas are decoded from the turn's ids (the
        aborted answer's last text may end inside a character); they still concatenate to the
        turn's text. A continuation that fails after deltas were handed on ends the turn with
        ``finish_reason="error"``.

        Yields:
            :class:`StreamEvent` deltas (``text``, ``token_ids``, ``logprobs``), then one event
            whose ``output`` is the complete :class:`~agent_gym.types.PolicyOutput`.

        Raises:
            ServerError: Before the first chunk: every attempt failed, a request was rejected, or
                a body was malformed.
        """
        if not self.api.streams:
            async for event in super().astream(messages, session_id=session_id, tools=tools):
                yield event
            return
        self._check_session(session_id)
        start = time.perf_counter()
        tools = self._session_tools(session_id, tools)
        plan, make_body = self._token_request(messages, session_id, tools, stream=True)
        # An answer aborted by a pause continues as aact's does; the stream goes on with the new answer.
        resume = TurnResume(lambda: self.weight_version)
        budget = [0]
        text = ContinuedText(self.tokenizer)

        async def body_for(server: str) -> dict[str, Any]:
            body = await make_body(server)
            budget[0] = int(body["max_tokens"])
            return resume.extend_body(body)

        server: str | None = None
        handed = False  # whether an event was yielded (after that a failure ends the turn, it is not raised)
        ids: list[int] = []
        lps: list[float] = []
        versions: list[int] = []  # the weight version of each id, as the unstreamed turn records them
        texts: list[str] = []
        while True:
            ids, lps, versions, texts = [], [], [], []
            held = ""  # server text not passed on yet (a stop id's, until the chunk with the finish_reason)
            answer_version: int | None = None  # the counter when this answer's first chunk came (see below)
            ids_ok = lps_ok = True
            finish: Any = None
            stop_reason: Any = None
            broken: str | None = None
            try:
                async for chunk, server in self.client.post_stream(session_id, "/v1/completions", body_for):
                    choices = chunk.get("choices")
                    if not choices:  # the usage chunk
                        continue
                    choice = choices[0]
                    if not isinstance(choice, dict):
                        raise StreamInterrupted(f"server {server} sent a chunk without a choice object",
                                                server=server, status=200)
                    token_ids, logprobs = parse_completion_choice(choice)
                    delta = str(choice.get("text") or "")
                    texts.append(delta)
                    if token_ids is None:
                        ids_ok = False
                    elif token_ids:
                        ids += token_ids
                        # one version for the whole answer, read when its sampling showed (a server samples
                        # only unpaused, and a weight update moves the counter before it resumes): chunks
                        # read late, after an update, still belong to the weights that sampled them
                        if answer_version is None:
                            answer_version = self.weight_version
                        versions += answer_versions(chunk, len(token_ids), answer_version)
                        if logprobs is None:
                            lps_ok = False
                        else:
                            lps += logprobs
                    if choice.get("finish_reason") is not None:
                        finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
                        versions = choice_versions(choice, len(ids)) or versions  # the server's, when it says
                    if finish == "abort" and ids_ok:
                        delta = ""  # an aborted answer's last text may end inside a character
                    elif finish is not None and ids_ok:
                        # the last delta ends on the turn's text (no stop id's text, cut at a stop string)
                        last = text.finish(self._final_text(resume.ids + ids, finish, stop_reason))
                        delta = last if last is not None else held + delta if not resume.ids else ""
                    elif ids_ok and token_ids and token_ids[-1] in self._stop_ids:
                        # a stop id whose finish_reason comes in a later chunk: its text waits for the end
                        held, delta = held + delta, ""
                    elif resume.ids and ids_ok:
                        delta = text.delta(resume.ids + ids)
                    else:
                        delta, held = text.sent_text(held + delta), ""
                    if delta or token_ids:
                        handed = True
                        yield StreamEvent(text=delta, token_ids=token_ids or [],
                                          logprobs=logprobs if token_ids else None)
            except PromptTooLong as exc:
                if not handed and not resume.ids:
                    yield StreamEvent(output=self._truncated(plan.prompt_ids, plan.new_segment, start, str(exc)))
                    return
                broken = str(exc)
            except ServerError as exc:
                if not handed:  # nothing was handed on: the caller sees the failure as aact would
                    raise
                broken = str(exc)
            if broken is None and finish is None:
                broken = f"server {server}: the stream ended without a finish_reason"
            if broken is None and finish == "abort" and ids_ok:
                assert server is not None  # a finish_reason arrived, so a chunk did
                try:
                    resume.keep(ids, lps if lps_ok and len(lps) == len(ids) else None, versions, server)
                except ServerError as exc:  # it keeps aborting without sampling
                    if not handed:
                        raise
                    ids, lps, versions, texts, broken = [], [], [], [], str(exc)
                    break
                if not resume.budget_spent(budget[0]):
                    continue
                ids, lps, versions, texts, finish, stop_reason = [], [], [], [], "length", None
            break
        if broken is not None:
            if ids_ok:
                token_ids, logprobs, _ = resume.whole(ids, lps if lps_ok else None, versions)
            else:
                token_ids = resume.ids + self.tokenizer.encode("".join(texts), add_special_tokens=False)
                logprobs = None
            error = broken if broken.startswith("server ") else f"server {server}: {broken}"
            yield StreamEvent(output=self._commit_turn(plan, token_ids, logprobs, FinishReason.ERROR, start,
                                                       retokenized=not ids_ok, server=server, error=error))
            return
        assert server is not None
        whole: dict[str, Any] = {"text": "".join(texts), "finish_reason": finish, "stop_reason": stop_reason,
                                 "token_ids": None}
        if ids_ok:
            token_ids, logprobs, versions = resume.whole(ids, lps if lps_ok else None, versions)
            whole["token_ids"] = token_ids
            if logprobs is not None and self.sampling.logprobs is not None:
                whole["logprobs"] = {"token_logprobs": logprobs}
        elif resume.ids:  # a server without ids finished the turn: its text is re-tokenized after the kept ids
            whole["text"] = self.tokenizer.decode(resume.ids, skip_special_tokens=False) + whole["text"]
        out = self._token_output(plan, whole, server, start)
        if out.token_ids is not None and len(versions) == len(out.token_ids):
            out.weight_versions = versions
        yield StreamEvent(output=out)

    def _token_request(
        self, messages: Sequence[Message], session_id: str, tools: list[dict] | None, *, stream: bool
    ) -> tuple[Any, Callable[[str], Awaitable[dict[str, Any]]]]:
        """The prompt plan of a token-mode turn and the builder of its request body per server."""
        assert self.builder is not None
        plan = self.builder.prepare(session_id, messages, tools)
        stop_ids = sorted(set(self.sampling.stop_token_ids) | {self.builder.eot_token_id}
                          | self.builder.family_stop_ids)
        seed = self._next_seed(session_id)

        async def make_body(server: str) -> dict[str, Any]:
            info = await self._info(server)
            budget = self._budget(info, len(plan.prompt_ids), plan.response_length)
            body = self._request(
                info,
                budget,
                seed,
                stop_token_ids=stop_ids,
                prompt=plan.prompt_ids,
                logprobs=self.sampling.logprobs,
                return_token_ids=True,
                return_tokens_as_token_ids=True,
                skip_special_tokens=False,
                spaces_between_special_tokens=False,
                include_stop_str_in_output=True,
            )
            if stream:
                body["stream"] = True
            return body

        return plan, make_body

    def _token_output(self, plan: Any, choice: dict[str, Any], server: str, start: float) -> PolicyOutput:
        """The turn of a token-mode answer's choice (committed unless the server reported an error)."""
        token_ids, logprobs = parse_completion_choice(choice)
        retokenized = token_ids is None
        finish, error = map_finish_reason(choice.get("finish_reason"))
        if error is not None and choice.get("abort_message"):
            if is_context_error(choice["abort_message"]) and not token_ids:  # SGLang aborts an over-long input
                return self._truncated(plan.prompt_ids, plan.new_segment, start, choice["abort_message"])
            error = f"{error}: {choice['abort_message']}"
        if token_ids is None:  # a server that does not return ids: fall back to re-tokenizing its text
            token_ids = self.tokenizer.encode(str(choice.get("text") or ""), add_special_tokens=False)
            if finish == FinishReason.STOP:
                token_ids.append(self.builder.eot_token_id)
            logprobs = None
        return self._commit_turn(
            plan,
            token_ids,
            logprobs,
            finish,
            start,
            text=self._turn_text(token_ids, finish if error is None else None, choice.get("stop_reason"),
                                 self._stop_ids),
            retokenized=retokenized,
            server=server,
            error=None if error is None else f"server {server}: {error}",  # an error is not committed
        )

    def _final_text(self, token_ids: list[int], raw_finish: Any, stop_reason: Any) -> str:
        """The text :meth:`_token_output` gives a turn of these ids ending with the server's ``raw_finish``."""
        finish, error = map_finish_reason(raw_finish)
        return self._turn_text(token_ids, finish if error is None else None, stop_reason)

    def _turn_text(
        self, token_ids: list[int], finish: str | None, stop_reason: Any,
        stop_ids: frozenset[int] | set[int] | tuple[int, ...] | None = None,
    ) -> str:
        """The text of a turn's ids by vLLM's rules (:func:`~agent_gym.policy.sampling.turn_text`).

        A ``"stop"`` turn whose ``stop_reason`` is one of the policy's stop strings ends right after
        that string (vLLM's ``include_stop_str_in_output=True``); one that ended on a stop id (vLLM's
        ``stop_reason`` is the id, or null for the end-of-sequence id) leaves that id's text out.
        Other turns decode every id.
        """
        if finish != FinishReason.STOP or not token_ids:
            return turn_text(self.tokenizer, token_ids)
        if isinstance(stop_reason, str):  # a stop string (or a reason vLLM names in words): no stop id
            return turn_text(self.tokenizer, token_ids,
                             stops=[stop_reason] if stop_reason in self.sampling.stop else ())
        stop_ids = self._stop_ids if stop_ids is None else stop_ids
        return turn_text(self.tokenizer, token_ids, stop_id=token_ids[-1] in stop_ids)
