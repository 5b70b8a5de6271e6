"""The ``Policy`` protocol and a base class giving a safe synchronous ``act``.

A policy turns the conversation so far into the next assistant turn, a
:class:`~agent_gym.types.PolicyOutput` with the exact prompt and sampled token ids.
Policies are asynchronous at heart (``aact``); :class:`AsyncPolicyBase` derives the
blocking ``act`` from it by running the coroutine on a private event loop in a helper
thread, so ``act`` also works where an event loop is already running (Jupyter, async
frameworks) and connection pools survive across calls.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from agent_gym.types import Message, PolicyOutput

__all__ = ["AsyncPolicyBase", "Policy"]

T = TypeVar("T")


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


class AsyncPolicyBase(abc.ABC):
    """Base class implementing ``act`` on top of an ``aact`` coroutine.

    Subclasses implement :meth:`aact` and :meth:`close_session`. ``act`` runs
    ``aact`` on a private event loop owned by the policy (started lazily in a
    daemon thread), whether or not the calling thread already runs a loop.
    Call :meth:`close` (or use the policy as a context manager) to stop it.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()

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

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def _run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=_run, name=f"{type(self).__name__}-loop", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the policy's private loop and return its result."""
        loop = self._background_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("act() called from the policy's own event loop; await aact() instead")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _aclose_resources(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Release async resources bound to the private loop (override in subclasses)."""

    def close(self) -> None:
        """Stop the private event loop and release resources. The policy stays usable."""
        with self._loop_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._aclose_resources(), loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        loop.close()

    async def aclose(self) -> None:
        """Release what the policy bound to the running event loop (e.g. HTTP connections)."""
        await self._aclose_resources()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
