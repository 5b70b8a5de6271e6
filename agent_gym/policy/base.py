"""The ``Policy`` protocol, a base class giving a safe synchronous ``act``, and the shared turn steps.

A policy turns the conversation so far into the next assistant turn, a
:class:`~agent_gym.types.PolicyOutput` with the exact prompt and sampled token ids.
Policies are asynchronous at heart (``aact``); :class:`AsyncPolicyBase` derives the
blocking ``act`` from it by running the coroutine on a private event loop in a helper
thread (a :class:`~agent_gym.utils.runtime.LoopThread`), so ``act`` also works where an
event loop is already running (Jupyter, async frameworks) and connection pools survive
across calls.

:class:`TokenPolicyBase` holds the steps every token-exact policy takes each turn, written
once: the tools of a session, the turn's seed, its token budget, the truncation status and
decoding and committing the sampled ids. It also makes a policy pickle as its configuration
(what Ray and other process pools send to their workers).
"""

from __future__ import annotations

import abc
import asyncio
import threading
import time
import weakref
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from agent_gym.types import FinishReason, Message, PolicyOutput
from agent_gym.utils.runtime import LoopThread

__all__ = ["AsyncPolicyBase", "Policy", "TokenPolicyBase"]

T = TypeVar("T")

# How long closing waits for the private loop to release its resources and stop.
_CLOSE_TIMEOUT_S = 10.0


@runtime_checkable
class Policy(Protocol):
    """Anything that produces assistant turns for agent_gym environments.

    ``session_id`` identifies one episode (use the ``episode_id`` from ``reset``'s
    info): a policy keeps per-session token state so that each turn's prompt
    extends the previous one exactly. ``tools`` are OpenAI function schemas.
    """

    def act(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Return the next assistant turn for ``messages`` (blocking)."""
        ...

    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Return the next assistant turn for ``messages``."""
        ...

    def close_session(self, session_id: str) -> None:
        """Forget the state kept for ``session_id`` (call when the episode ends)."""
        ...


_LOOP_STATE = ("_runner", "_loop_finalizer")


class AsyncPolicyBase(abc.ABC):
    """Base class implementing ``act`` on top of an ``aact`` coroutine.

    Subclasses implement :meth:`aact` and :meth:`close_session`. ``act`` runs
    ``aact`` on a private event loop owned by the policy (started lazily in a
    daemon thread), whether or not the calling thread already runs a loop.
    Call :meth:`close` (or use the policy as a context manager) to stop it; a policy
    that is garbage-collected stops its loop too.

    A policy pickles as its attributes without the private loop (subclasses holding
    unpicklable state override ``__getstate__``/``__setstate__``, as
    :class:`TokenPolicyBase` does).
    """

    def __init__(self) -> None:
        self._init_loop_state()

    def _init_loop_state(self) -> None:
        self._runner = LoopThread(f"{type(self).__name__}-loop")
        # A policy dropped without close() stops its loop thread (the loop's own resources
        # release themselves quietly, see VLLMClient); at exit the daemon thread just ends.
        self._loop_finalizer = weakref.finalize(self, self._runner.stop)
        self._loop_finalizer.atexit = False

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The private loop while it runs (None before the first ``act`` and after ``close``)."""
        return self._runner.running_loop

    @property
    def _thread(self) -> threading.Thread | None:
        """The private loop's thread (None before the first ``act``)."""
        return self._runner.thread

    @abc.abstractmethod
    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Return the next assistant turn for ``messages``; implemented by subclasses."""

    @abc.abstractmethod
    def close_session(self, session_id: str) -> None:
        """Forget the state kept for ``session_id``; implemented by subclasses."""

    def act(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Blocking version of :meth:`aact`, safe inside a running event loop.

        Args:
            messages: The conversation so far (role/content dicts).
            session_id: Identifies the episode.
            tools: OpenAI function schemas of the tools the model may call.

        Returns:
            The assistant turn.
        """
        return self._run_sync(self.aact(messages, session_id=session_id, tools=tools))

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the policy's private loop and return its result."""
        if self._runner.in_loop_thread():
            coro.close()
            raise RuntimeError("act() called from the policy's own event loop; await aact() instead")
        return self._runner.call(coro)

    async def _aclose_resources(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Release async resources bound to the private loop (override in subclasses)."""

    def close(self) -> None:
        """Stop the private event loop and release resources. The policy stays usable."""
        if self._runner.running_loop is None:
            return
        try:
            self._runner.call(self._aclose_resources(), timeout=_CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        self._runner.stop(timeout=_CLOSE_TIMEOUT_S)

    async def aclose(self) -> None:
        """Release what the policy bound to the running event loop (e.g. HTTP connections)."""
        await self._aclose_resources()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _LOOP_STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_loop_state()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TokenPolicyBase(AsyncPolicyBase):
    """The turn steps shared by token-exact policies (``VLLMPolicy``, ``TransformersPolicy``).

    Subclasses set ``tokenizer``, ``sampling``, ``logprobs_mode``, ``builder`` (a
    :class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder`, or None) and
    ``max_response_length``, call :meth:`_remember_config` with their constructor's
    arguments, and use the steps below in ``aact``. Every turn's
    :class:`~agent_gym.types.PolicyOutput` is made by :meth:`_output`, which stamps the
    policy's sampling record on it.

    Tools per session: a turn called with ``tools=None`` keeps the tools the session was
    last given (the env passes them with the first turn only); ``tools=[]`` removes them.

    Pickling: a policy pickles as its configuration (the arguments remembered by
    :meth:`_remember_config`) and is rebuilt from it on unpickling; connections and
    models are set up again, sessions in progress are not carried over.
    """

    tokenizer: Any
    sampling: Any
    logprobs_mode: str
    builder: Any
    max_response_length: int | None

    def __init__(self) -> None:
        super().__init__()
        self._config: dict[str, Any] = {}
        self._turns: dict[str, int] = {}  # session -> turns requested so far (seeds each turn)
        self._tools: dict[str, list[dict] | None] = {}  # session -> the tools its turns render

    def _remember_config(self, **config: Any) -> None:
        """Record the constructor arguments the policy pickles as."""
        self._config = config

    def __getstate__(self) -> dict[str, Any]:
        return {"config": dict(self._config)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, **state["config"])

    # ------------------------------------------------------------------ turn steps
    @staticmethod
    def _check_session(session_id: Any) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id: expected a non-empty str, got {session_id!r}")

    def _session_tools(self, session_id: str, tools: list[dict] | None) -> list[dict] | None:
        """The tools of this turn: ``tools``, or the session's current ones when None.

        Args:
            session_id: The session.
            tools: OpenAI function schemas; None keeps the session's tools, ``[]`` removes them.
        """
        if tools is None:
            return self._tools.get(session_id)
        if not isinstance(tools, (list, tuple)):
            raise TypeError(f"tools: expected a list of OpenAI function schemas or None, got {type(tools).__name__}")
        current = list(tools) or None
        self._tools[session_id] = current
        return current

    def _next_seed(self, session_id: str) -> int | None:
        """This turn's request seed (see ``SamplingParams.request_seed``); counts the turn."""
        turn = self._turns.get(session_id, 0)
        self._turns[session_id] = turn + 1
        return self.sampling.request_seed(session_id, turn)

    def _max_tokens(self, prompt_len: int, response_len: int, model_len: int | None) -> int:
        """Tokens allowed this turn (<= 0 means the context or response budget is full)."""
        limit = self.sampling.max_tokens
        if model_len is not None:
            limit = min(limit, model_len - prompt_len)
        if self.max_response_length is not None:
            limit = min(limit, self.max_response_length - response_len)
        return limit

    def _output(self, start: float, **fields: Any) -> PolicyOutput:
        """The turn's :class:`~agent_gym.types.PolicyOutput`, the one place every policy output is made.

        Sets ``llm_time`` (seconds since ``start``) and ``sampling`` (the policy's
        :meth:`~agent_gym.policy.sampling.SamplingParams.record` in its ``logprobs_mode``).

        Args:
            start: ``time.perf_counter()`` at the start of the turn.
            **fields: The other ``PolicyOutput`` fields.
        """
        return PolicyOutput(
            llm_time=time.perf_counter() - start, sampling=self.sampling.record(self.logprobs_mode), **fields
        )

    def _truncated(self, prompt_ids: list[int] | None, new_segment: bool, start: float, why: str) -> PolicyOutput:
        """The output of a turn whose prompt leaves no room to sample."""
        return self._output(
            start,
            text="",
            prompt_token_ids=list(prompt_ids) if prompt_ids is not None else None,
            token_ids=[],
            logprobs=[],
            finish_reason=FinishReason.PROMPT_TRUNCATION,
            new_segment=new_segment,
            error=why,
        )

    def _commit_turn(
        self,
        plan: Any,
        token_ids: list[int],
        logprobs: list[float] | None,
        finish: str,
        start: float,
        *,
        stop_ids: frozenset[int] | set[int] | tuple[int, ...] = (),
        stops: Sequence[str] = (),
        text: str | None = None,
        retokenized: bool = False,
        server: str | None = None,
        error: str | None = None,
    ) -> PolicyOutput:
        """Decode the sampled ids, commit them to the session and return the turn.

        A turn that ended with an ``error`` (the server aborted it, a stream broke) is not
        committed: its ids and text are reported with the error and the session's token state
        stays where it was (the episode ends with ``POLICY_ERROR``).

        Args:
            plan: The turn's :class:`~agent_gym.policy.chat_tokens.PromptPlan`.
            token_ids: The sampled ids.
            logprobs: Their logprobs.
            finish: The finish reason.
            start: ``time.perf_counter()`` at the start of the turn.
            stop_ids: A final id in this set ends a ``"stop"`` turn and is left out of the text.
            stops: Stop strings: a ``"stop"`` turn that ends on one has its text end right after
                it, as vLLM cuts it (:func:`~agent_gym.policy.sampling.turn_text`).
            text: The turn's text when the caller knows it by another rule (e.g. the server's
                ``stop_reason``); None decodes it by ``stop_ids`` and ``stops``.
            retokenized: Whether the ids were re-tokenized from text.
            server: The server that sampled the turn.
            error: Why the turn failed; None for a turn to commit.
        """
        if text is None:
            from agent_gym.policy.sampling import turn_text

            stopped = error is None and finish == FinishReason.STOP and bool(token_ids)
            text = turn_text(self.tokenizer, token_ids, stop_id=stopped and token_ids[-1] in stop_ids,
                             stops=stops if stopped else ())
        if error is None:
            self.builder.commit(plan, token_ids, text)
        return self._output(
            start,
            text=text,
            prompt_token_ids=list(plan.prompt_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish,
            retokenized=retokenized,
            new_segment=plan.new_segment,
            server=server,
            error=error,
        )

    def close_session(self, session_id: str) -> None:
        """Forget the token state, seed count and tools of ``session_id``."""
        if self.builder is not None:
            self.builder.close(session_id)
        self._turns.pop(session_id, None)
        self._tools.pop(session_id, None)
