"""A policy driven on a loop of its own thread, for the gateway's large requests.

Rendering and tokenizing a prompt happens inside the policy's ``aact`` / ``astream``, between
their awaits, on whatever loop runs them: a conversation of a few MiB takes seconds there. The
gateway hands the turns of large requests to :class:`OffLoopPolicy`, which runs them on a
:class:`~agent_gym.utils.runtime.LoopThread`, so the gateway's own loop (``/health``, the
other sessions, a stop signal) never waits for them. Small requests stay on the gateway's loop,
where the hand-over would cost more than the work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agent_gym.utils.runtime import LoopThread

__all__ = ["OffLoopPolicy"]


class OffLoopPolicy:
    """``policy`` whose ``aact`` and ``astream`` run on a loop thread (everything else is ``policy``'s).

    Args:
        policy: The gateway's policy.
        thread: The loop thread (one is made by default).
    """

    def __init__(self, policy: Any, thread: LoopThread | None = None) -> None:
        self.policy = policy
        self.thread = thread or LoopThread("agent-gym-gateway-turns")
        self._used = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    async def aact(self, messages: Sequence[Any], *, session_id: str, tools: list[dict] | None = None) -> Any:
        """The policy's ``aact``, run on the loop thread."""
        self._used = True
        return await self.thread.run(self.policy.aact(messages, session_id=session_id, tools=tools))

    async def astream(self, messages: Sequence[Any], *, session_id: str,
                      tools: list[dict] | None = None) -> AsyncIterator[Any]:
        """The policy's ``astream``, iterated on the loop thread."""
        self._used = True
        async for event in self.thread.iterate(lambda: self.policy.astream(messages, session_id=session_id,
                                                                             tools=tools)):
            yield event

    async def aclose(self, timeout: float = 2.0) -> None:
        """Close the policy's connections of the loop thread, then stop it."""
        if self._used:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.thread.run(self.policy.aclose()), timeout)
        self.thread.stop(wait=False)
