"""The body of one shard of a sharded Ray collection: :class:`ShardActor`.

A shard is an async Ray actor: its methods run on the actor's event loop, where one long-lived
:class:`~agent_gym.rollout.runner.EpisodeRunner` keeps up to ``capacity`` episodes in flight
(the policy's ``aact`` on the loop, env calls and blocking tools on the runner's worker
threads). The driver (:mod:`agent_gym.rollout.sharded_runner`) hands it numbered episodes with
:meth:`ShardActor.start` and long-polls :meth:`ShardActor.take` for the finished ones; a
finished episode waits in the shard's outbox (at most ``capacity`` records: the driver never
hands a shard more than that unreturned) until a poll takes it. This module imports no Ray: the
driver wraps the class with ``ray.remote``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
from typing import Any

from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec
from agent_gym.rollout.reporting import failed_trajectory
from agent_gym.rollout.runner import EpisodeRunner

__all__ = ["ShardActor"]

logger = logging.getLogger(__name__)

BATCH_WAIT_S = 0.01
"""Most seconds a poll that found fewer finished episodes than ``capacity // 8`` waits for more to finish."""


def _is_policy(obj: Any) -> bool:
    return not isinstance(obj, type) and (hasattr(obj, "aact") or hasattr(obj, "act"))


class ShardActor:
    """One shard: a runner with many episodes in flight and an outbox of finished ones.

    Args:
        env: Env id, factory or factories (as for ``collect``); None when every spec names its env.
        policy: The policy, or a zero-argument callable building it in the actor.
        options: The collection's options (``n_parallel`` is replaced by ``capacity``).
        capacity: Most episodes in flight in this shard.
    """

    def __init__(self, env: Any, policy: Any, options: RolloutOptions, capacity: int) -> None:
        self.policy = policy if _is_policy(policy) else policy()
        self.capacity = int(capacity)
        self.options = options.replace(n_parallel=self.capacity, progress=False, on_episode=None)
        self.runner = EpisodeRunner(env, self.policy, self.options)
        self.outbox: list[tuple[int, dict[str, Any]]] = []
        self.running: dict[int, asyncio.Task[None]] = {}
        self.finished = 0
        self._arrived: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    async def ready(self) -> dict[str, Any]:
        """Where the shard runs: ``{"node_id", "host", "pid"}`` (the call also shows it started)."""
        node_id = ""
        try:
            import ray

            node_id = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray (a direct call) there is no node id
            node_id = ""
        return {"node_id": node_id, "host": socket.gethostname(), "pid": os.getpid()}

    async def start(self, batch: list[tuple[int, EpisodeSpec]]) -> int:
        """Start the numbered episodes of ``batch``; returns the episodes now in flight."""
        for number, spec in batch:
            if number not in self.running:
                self.running[number] = asyncio.ensure_future(self._run(number, spec))
        return len(self.running)

    async def _run(self, number: int, spec: EpisodeSpec) -> None:
        try:
            trajectory = await self.runner.run_episode(spec)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - run_episode records env/policy failures itself
            logger.warning("episode %d: the shard could not run it: %s", spec.index, exc)
            trajectory = failed_trajectory(spec, self.options.gamma,
                                           f"the shard could not run the episode: {type(exc).__name__}: {exc}")
        finally:
            self.running.pop(number, None)
        self.outbox.append((number, trajectory.to_dict()))
        self.finished += 1
        self._event().set()

    async def take(self, max_items: int, wait_s: float) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``max_items`` finished episodes as ``(number, record)``; waits up to ``wait_s`` for one."""
        arrived = self._event()
        if not self.outbox:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), wait_s)
            except asyncio.TimeoutError:
                return []
            # let episodes finishing together travel together: fewer calls per episode for the driver
            want = min(max_items, max(1, self.capacity // 8))
            deadline = asyncio.get_running_loop().time() + BATCH_WAIT_S
            while len(self.outbox) < want and self.running and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(BATCH_WAIT_S / 5)
        taken = self.outbox[:max_items]
        del self.outbox[:max_items]
        if not self.outbox:
            arrived.clear()
        return taken

    async def cancel(self, numbers: list[int]) -> int:
        """Cancel the numbered episodes (their records are dropped); returns how many were running."""
        wanted = set(numbers)
        jobs = [job for number, job in self.running.items() if number in wanted]
        for job in jobs:
            job.cancel()
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)
        self.outbox = [(n, r) for n, r in self.outbox if n not in wanted]
        return len(jobs)

    async def set_weight_version(self, version: int) -> None:
        """Label the policy's later samples with ``version`` (when the server gives none)."""
        if hasattr(self.policy, "weight_version"):
            self.policy.weight_version = version

    async def stats(self) -> dict[str, int]:
        """``{"running", "finished", "waiting", "env_builds"}`` of this shard."""
        return {"running": len(self.running), "finished": self.finished, "waiting": len(self.outbox),
                "env_builds": self.runner.env_builds}

    async def close(self) -> None:
        """Cancel the running episodes, close the envs, the worker threads and the policy's connections."""
        await self.cancel(list(self.running))
        self.runner.close()
        aclose = getattr(self.policy, "aclose", None)
        close = getattr(self.policy, "close", None)
        try:
            if inspect.iscoroutinefunction(aclose):
                await aclose()
            elif callable(close):
                close()
        except Exception:  # noqa: BLE001 - releasing connections is best effort
            logger.debug("closing the policy failed", exc_info=True)
