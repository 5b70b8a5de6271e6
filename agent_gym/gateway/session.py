"""Gateway sessions: one client conversation recorded as one episode.

A :class:`GatewaySession` turns each request of a client into one turn of a token-exact
episode. It resolves the client's history into agent_gym messages (the assistant messages it
produced become the exact sampled text again, see :mod:`agent_gym.gateway.convert`), asks
the policy for the next turn with the session id (so the prompt ids extend the previous
prompt + sampled ids, and a rewritten history starts a new segment), and records a
:class:`~agent_gym.types.Step` plus the turn's ids, timing and sampling record in a
:class:`~agent_gym.wrappers.trajectory_builder.TrajectoryBuilder` (the builder of env
episodes too: the prefix check decides the segments, the first turn's ``PolicyOutput.sampling``
is the trajectory's ``sampling``). :meth:`GatewaySession.finish` attaches rewards and builds the
:class:`~agent_gym.types.StepTrajectory`.

:class:`~agent_gym.gateway.store.SessionStore` holds the sessions of a gateway.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import RequestError, ServerError
from agent_gym.gateway.convert import ClientCall, ClientTurn, render_assistant, signature
from agent_gym.gateway.history import text_tool_calls, unordered_signature
from agent_gym.parsers import ToolCallParser
from agent_gym.parsers.streaming import client_content
from agent_gym.policy.vllm_protocol import CONTEXT_ERROR
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput, Step, StepTrajectory
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

__all__ = ["GatewaySession", "TurnResult", "TurnStream"]


@dataclass
class TurnResult:
    """One served turn: what the client sees and the exact ids behind it."""

    turn: ClientTurn
    output: PolicyOutput
    step_index: int
    new_segment: bool
    history_rewritten: bool
    errors: list[str] = field(default_factory=list)


class TurnStream:
    """A streamed turn in progress: its items arrive on ``queue`` as the upstream samples.

    Items: ``("pieces", [piece, ...])`` (see :class:`~agent_gym.gateway.stream.StreamSplitter`),
    then either ``("result", TurnResult)`` or ``("error", RequestError, started)`` where
    ``started`` tells whether pieces were queued before the failure. The turn runs in its own
    task, so it completes and is recorded even when the client goes away.
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.client_gone = False
        self.task: asyncio.Task | None = None


@dataclass
class _Lineage:
    """One agent of a session: its name, policy session, first message and last turn."""

    name: str
    policy_session: str
    first: dict[str, Any]
    last: list[dict[str, str]] = field(default_factory=list)
    awaiting_tools: bool = False  # its last reply called tools whose results no request has carried yet
    last_step: int = -1  # the session step of its last turn
    reply_unsure: bool = False  # its last reply may not have reached the client (gone, or a stream)


class GatewaySession:
    """One episode driven by a client (see the module docs).

    Args:
        session_id: The id (also the API key handed to the client).
        task: Anything JSON-like describing the task (stored in the trajectory).
        parser: Splits sampled text into thought / tool calls.
        gamma: Discount of ``mc_return``.
        group_id: Shared by the sessions that sample the same task (``Trajectory.group_id``).
        env_id: Names the agent or env driving the session (``Trajectory.env_id``).
        idx: Index of the episode in the caller's batch (``Trajectory.idx``).
        api_key: The key the client samples with (None: naming the session is enough, as for
            sessions a client created by using them, ``auto_create``).
        reward_range: ``(low, high)`` bounds of every reward :meth:`finish` takes (None: any finite number).
    """

    def __init__(
        self,
        session_id: str,
        *,
        task: Any = None,
        parser: ToolCallParser,
        gamma: float = 1.0,
        group_id: str = "",
        env_id: str = "",
        idx: int = 0,
        api_key: str | None = None,
        reward_range: tuple[float, float] | None = None,
    ) -> None:
        self.id = session_id
        self.api_key = api_key
        self.reward_range = reward_range
        self.parser = parser
        self.turn_lock = asyncio.Lock()  # one turn at a time per session (asyncio.Lock binds on first use)
        self._lock = threading.Lock()
        self.record = TrajectoryBuilder(session_id, gamma=gamma, env_id=env_id, task=task, group_id=group_id,
                                        idx=idx)
        self.steps = self.record.steps  # the builder's list
        self._raw_by_signature: dict[str, str] = {}
        self._raw_unordered: dict[str, str] = {}
        self._conversation: list[dict[str, str]] = []
        self._lineages: list[_Lineage] = []
        self.last_error: str | None = None
        self.status_hint: EpisodeStatus | None = None
        self.finished: StepTrajectory | None = None

    # ------------------------------------------------------------------ inbound
    def resolve(self, messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, str]], bool]:
        """Client messages -> agent_gym messages; True when an assistant message is not one of ours."""
        out: list[dict[str, str]] = []
        rewritten = False
        for msg in messages:
            if msg["role"] != "assistant":
                out.append({"role": msg["role"], "content": msg["content"]})
                continue
            calls = msg.get("calls") or []
            raw = self.recorded_text(msg["content"], calls)
            if raw is None:
                rewritten = True
                raw = render_assistant(msg["content"], calls, self.parser)
            out.append({"role": "assistant", "content": raw})
        return out, rewritten

    def recorded_text(self, content: str, calls: Sequence[tuple[str, Any]]) -> str | None:
        """The sampled text of the recorded turn a client's assistant message stands for, else None.

        Tried in order: the exact text and calls; the same calls in another order; calls the
        client rendered into its text (see :func:`~agent_gym.gateway.history.text_tool_calls`).
        """
        raw = self._raw_by_signature.get(signature(content, calls))
        if raw is None:
            raw = self._raw_unordered.get(unordered_signature(content, calls))
        if raw is None and not calls:
            found = text_tool_calls(content)
            if found is not None:
                raw = self._raw_unordered.get(unordered_signature(*found))
        return raw

    def lineage_for(self, messages: Sequence[dict[str, str]]) -> _Lineage:
        """The agent (lineage) a request comes from, split by prefix.

        In order: (1) the lineage whose last turn (its messages and the sampled reply) the
        request extends (the longest such; of equal ones, the one that took the latest turn);
        (2) a lineage with the same first message whose last reply the request carries (the
        agent rewrote its history around it: a new segment of that lineage); (3) a request of
        system and user messages only (an agent's first request) while a lineage with the same
        first message awaits the results of the tools its last reply called: a new agent, the
        subagent that call started (it may share its parent's system prompt and even its first
        user message); (4) the first lineage with the same first message (rewritten history,
        dropped turns, a retried turn whose reply may have been lost); (5) else a new lineage. The first
        lineage is the session's own (its turns use the session id); the others, named
        ``agent-1``, ``agent-2``..., get their own policy session and segments.
        See ``docs/subagents.md`` for what the rule cannot tell apart.
        """
        best: _Lineage | None = None
        for lineage in self._lineages:
            n = len(lineage.last)
            if n > len(messages) or list(messages[:n]) != lineage.last or best is not None and (
                    n < len(best.last) or n == len(best.last) and lineage.last_step < best.last_step):
                continue
            best = lineage
        if best is not None:
            return best
        head = dict(messages[0]) if messages else {}
        mates = [lineage for lineage in self._lineages if lineage.first == head]
        replies = {m["content"] for m in messages if m["role"] == "assistant"}
        carried = [lineage for lineage in mates if lineage.last and lineage.last[-1]["content"] in replies]
        if carried:
            return carried[-1]
        if mates and not self._starts_an_agent(messages, mates):
            return mates[0]
        k = len(self._lineages)
        best = _Lineage("" if k == 0 else f"agent-{k}", self.id if k == 0 else f"{self.id}.agent-{k}", head)
        self._lineages.append(best)
        return best

    @staticmethod
    def _starts_an_agent(messages: Sequence[dict[str, str]], mates: Sequence[_Lineage]) -> bool:
        """Rule (3) of :meth:`lineage_for`: an agent's first request while a mate awaits its tools' results.

        A verbatim repeat of a mate's last request whose reply may not have reached the client
        (the client went away, or the reply was streamed: a stream's client may go away after the
        turn was recorded) is that mate retrying, not a new agent.
        """
        if not all(m["role"] in ("system", "user") for m in messages):
            return False
        return any(lineage.awaiting_tools and not (lineage.reply_unsure and list(messages) == lineage.last[:-1])
                   for lineage in mates)

    @property
    def policy_sessions(self) -> builtins.list[str]:
        """The policy session ids the session's lineages used (the session id first)."""
        return [lineage.policy_session for lineage in self._lineages] or [self.id]

    # ------------------------------------------------------------------ outbound
    def client_turn(self, output: PolicyOutput) -> tuple[ClientTurn, Any]:
        """Parse the sampled text into what the client sees."""
        parsed = self.parser.parse(output.text)
        content = client_content(self.parser, parsed)
        calls = [ClientCall(f"call_{uuid.uuid4().hex[:24]}", c.name, dict(c.arguments)) for c in parsed.tool_calls]
        turn = ClientTurn(content=content, thought=parsed.thought, calls=calls, finish=output.finish_reason)
        return turn, parsed

    # ------------------------------------------------------------------ turns
    async def run_turn(
        self, policy: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]], *, api: str,
        stream: bool,
    ) -> TurnResult:
        """Serve one request: sample the next turn and record it.

        Raises:
            RequestError: The session is finished, the prompt is too long (400, vLLM's message) or
                every server failed (502).
        """
        resolved, rewritten = self._start_turn(messages)
        async with self.turn_lock:
            lineage = self.lineage_for(resolved)
            # The turn completes even if the client goes away meanwhile: the session stays consistent.
            task = asyncio.ensure_future(policy.aact(resolved, session_id=lineage.policy_session, tools=tools))
            try:
                output = await asyncio.shield(task)
            except asyncio.CancelledError:
                output = await task
                self._record(resolved, output, rewritten, api, stream, disconnected=True, lineage=lineage)
                raise
            except ServerError as exc:
                raise self._upstream_error(exc) from None
            failure = self._failed_turn(output)
            if failure is not None:
                raise failure
            return self._record(resolved, output, rewritten, api, stream, lineage=lineage)

    def _start_turn(self, messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, str]], bool]:
        """Resolve a request's messages (see :meth:`resolve`); a finished session refuses the turn (409)."""
        if self.finished is not None:
            raise RequestError(f"session {self.id!r} is finished (its reward was set)", status=409,
                               kind="ConflictError")
        return self.resolve(messages)

    def _upstream_error(self, exc: ServerError) -> RequestError:
        """The client's error for a request every server failed or rejected; the episode would end POLICY_ERROR."""
        self.last_error = str(exc)
        self.status_hint = EpisodeStatus.POLICY_ERROR
        if exc.status == 400:
            return RequestError(str(exc), status=400, kind="BadRequestError")
        return RequestError(str(exc), status=502, kind="BadGatewayError")

    def _failed_turn(self, output: PolicyOutput) -> RequestError | None:
        """The client's error for a turn that sampled nothing (prompt too long, policy error), else None."""
        if output.finish_reason == FinishReason.PROMPT_TRUNCATION:
            self.last_error = output.error
            self.status_hint = EpisodeStatus.PROMPT_TRUNCATION
            message = output.error or "prompt too long"
            if CONTEXT_ERROR not in message.lower():
                message = f"This model's {CONTEXT_ERROR} is exceeded: {message}"
            return RequestError(message, status=400, param="messages")
        if output.error is not None:
            self.last_error = output.error
            self.status_hint = EpisodeStatus.POLICY_ERROR
            return RequestError(output.error, status=502, kind="BadGatewayError")
        return None

    def stream_turn(
        self, policy: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]], *, api: str,
        splitter: Any,
    ) -> TurnStream:
        """Start a streamed turn (``policy.astream``); read its pieces and result from the returned stream.

        The recorded step and ids are those :meth:`run_turn` records for the same sample.

        Raises:
            RequestError: The session is finished (409).
        """
        resolved, rewritten = self._start_turn(messages)
        stream = TurnStream()
        stream.task = asyncio.ensure_future(self._drive(stream, policy, resolved, rewritten, tools, api, splitter))
        return stream

    async def _drive(
        self, stream: TurnStream, policy: Any, resolved: list[dict[str, str]], rewritten: bool,
        tools: list[dict[str, Any]], api: str, splitter: Any,
    ) -> None:
        put = stream.queue.put_nowait
        started = False
        content: list[str] = []
        calls: list[tuple[str, Any]] = []

        def forward(pieces: list[Any]) -> None:
            nonlocal started
            if pieces:
                started = True
                for piece in pieces:
                    if piece[0] == "content":
                        content.append(piece[1])
                    elif piece[0] == "call":
                        calls.append((piece[1], piece[2]))
                put(("pieces", pieces))

        async with self.turn_lock:
            output: PolicyOutput | None = None
            lineage = self.lineage_for(resolved)
            try:
                async for event in policy.astream(resolved, session_id=lineage.policy_session, tools=tools):
                    if event.output is not None:
                        output = event.output
                        break
                    if event.text:
                        forward(splitter.feed(event.text))
            except ServerError as exc:
                put(("error", self._upstream_error(exc), started))
                return
            except Exception as exc:  # noqa: BLE001 - the client gets a 502, the gateway keeps serving
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.status_hint = EpisodeStatus.POLICY_ERROR
                put(("error", RequestError(self.last_error, status=502, kind="BadGatewayError"), started))
                return
            if output is None:
                put(("error", RequestError("the upstream stream ended without a turn", status=502,
                                           kind="BadGatewayError"), started))
                return
            failure = self._failed_turn(output)
            if failure is not None:
                put(("error", failure, started))
                return
            forward(splitter.finish(output.text))
            view = signature("".join(content), calls)
            result = self._record(resolved, output, rewritten, api, True, disconnected=stream.client_gone,
                                  view=view, lineage=lineage)
            put(("result", result))

    def _record(
        self, messages: list[dict[str, str]], output: PolicyOutput, rewritten: bool, api: str, stream: bool,
        disconnected: bool = False, view: str | None = None, lineage: _Lineage | None = None,
    ) -> TurnResult:
        turn, parsed = self.client_turn(output)
        if api == "anthropic":
            for call in turn.calls:
                call.id = "toolu_" + call.id[len("call_"):]
        with self._lock:
            step_index = len(self.steps)
            if self.finished is not None:  # finished while sampling: the trajectory must not change
                return TurnResult(turn, output, step_index, False, rewritten)
            info: dict[str, Any] = {
                "finish_reason": output.finish_reason,
                "num_prompt_tokens": 0,
                "num_sampled_tokens": 0,
                "new_segment": False,
                "llm_time": output.llm_time,
                **self.record.add_output(step_index, output, lineage.name if lineage is not None else ""),
            }
            if lineage is not None:
                lineage.last = [dict(m) for m in messages] + [{"role": "assistant", "content": output.text}]
                lineage.awaiting_tools, lineage.last_step = bool(parsed.tool_calls), step_index
                lineage.reply_unsure = disconnected or stream
                if lineage.name:
                    info["lineage"] = lineage.name
            new_segment = bool(info["new_segment"])
            last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            observed = [m["content"] for m in messages[last_assistant + 1:] if m["role"] != "system"]
            info.update({
                "history_rewritten": rewritten,
                "server": output.server,
                "api": api,
                "stream": stream,
                "tool_calls": [c.to_dict() for c in parsed.tool_calls],
            })
            if parsed.errors:
                info["parse_errors"] = list(parsed.errors)
            if disconnected:
                info["client_disconnected"] = True
            self.steps.append(
                Step(
                    chat_completions=[dict(m) for m in messages],
                    thought=parsed.thought or "",
                    action=parsed.action_text,
                    observation="\n".join(observed),
                    model_response=output.text,
                    info=info,
                )
            )
            self._conversation = [dict(m) for m in messages] + [{"role": "assistant", "content": output.text}]
            seen = [(c.name, c.arguments) for c in turn.calls]
            self._raw_by_signature[signature(turn.content, seen)] = output.text
            self._raw_unordered.setdefault(unordered_signature(turn.content, seen), output.text)
            if view is not None:  # what a streaming client saw, should it differ from the parse of the whole text
                self._raw_by_signature.setdefault(view, output.text)
            self.last_error = None
            self.status_hint = EpisodeStatus.TRUNCATION if output.finish_reason == FinishReason.LENGTH else None
        return TurnResult(turn, output, step_index, new_segment, rewritten, list(parsed.errors))

    # ------------------------------------------------------------------ trajectory
    def trajectory(self) -> StepTrajectory:
        """The trajectory so far (status ``""`` while open), or the finished one."""
        with self._lock:
            if self.finished is not None:
                return self.finished
            return self._build("")

    def finish(
        self, reward: float | None = None, rewards: Sequence[float] | None = None, status: str | None = None
    ) -> StepTrajectory:
        """Attach rewards, end the episode and return its trajectory.

        Args:
            reward: Added to the last step's reward (the outcome).
            rewards: One reward per step (process rewards); combined with ``reward`` if both given.
            status: An :class:`~agent_gym.types.EpisodeStatus` value; default ``env_done`` (or the
                truncation / error the last request ended with).

        Raises:
            RequestError: Already finished (409), or malformed rewards / status (400).
        """
        with self._lock:
            if self.finished is not None:
                raise RequestError(f"session {self.id!r} is already finished", status=409, kind="ConflictError")
            if status is None:
                status = (self.status_hint or EpisodeStatus.ENV_DONE).value
            if not isinstance(status, str) or status not in EpisodeStatus._value2member_map_:
                raise RequestError(f"status: expected one of {[s.value for s in EpisodeStatus]}, got {status!r:.80}",
                                   param="status")
            if rewards is not None:
                if not isinstance(rewards, (list, tuple)) or len(rewards) != len(self.steps):
                    raise RequestError(f"rewards: expected {len(self.steps)} numbers (one per step), "
                                       f"got {rewards!r:.80}", param="rewards")
                values = [_number("rewards[]", value, self.reward_range) for value in rewards]
                for step, value in zip(self.steps, values, strict=True):
                    step.reward = value
            if reward is not None:
                value = _number("reward", reward, self.reward_range)
                self.record.end()  # a session without turns gets one step holding the reward
                self.steps[-1].reward += value
            for step in self.steps:  # the client's rewards are the outcome (res_reward in the metrics)
                step.info["res_reward"] = step.reward
            self.record.end(self.last_error)
            self.finished = self._build(status)
            return self.finished

    def _build(self, status: str) -> StepTrajectory:
        record = self.record
        # The session's env time is the client's own time between turns (its tools, its thinking).
        record.times["env_time"] = max(0.0, record.elapsed - record.times["llm_time"])
        return record.build(status, conversation=self._conversation, detach=True)


def _number(name: str, value: Any, bounds: tuple[float, float] | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        raise RequestError(f"{name}: expected a finite number, got {value!r:.80}", param=name)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise RequestError(f"{name}: expected a number in [{bounds[0]:g}, {bounds[1]:g}] (the gateway's reward "
                           f"range), got {value!r:.80}", param=name)
    return float(value)
