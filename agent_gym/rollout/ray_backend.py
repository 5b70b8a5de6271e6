"""Ray backend of ``collect``: episodes run in Ray actors.

Each actor holds one :class:`~agent_gym.rollout.runner.EpisodeRunner` for its lifetime
(its env, built from the same id or factory as the local backend and reused episode after
episode) and its own copy of the policy, and runs one episode at a time; the driver hands out
episodes as actors free up. The policy object itself is shipped (pickled once
into Ray's object store, unpickled in each actor: policies pickle as their
configuration and rebuild their connections or reload their model there); a
zero-argument callable that builds the policy in the actor works too. Episodes
use the same specs (seeds, tasks, episode ids) as the local backend, so a seeded
policy gives the same trajectories, timings aside. Ray is imported lazily:
without it, ``backend="ray"`` raises :class:`~agent_gym.errors.MissingExtraError`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Sequence
from typing import Any

from agent_gym.errors import MissingExtraError
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, make_env_factory
from agent_gym.rollout.reporting import Progress, failed_trajectory, notify
from agent_gym.rollout.runner import EpisodeRunner
from agent_gym.types import StepTrajectory
from agent_gym.utils.runtime import LoopThread

__all__ = ["LOCAL_NUM_CPUS", "EpisodeActor", "collect_ray", "import_ray", "init_ray"]

logger = logging.getLogger(__name__)

LOCAL_NUM_CPUS = 2
"""CPUs given to a Ray instance started by ``collect`` (no cluster address given)."""

CLOSE_TIMEOUT_S = 10.0
"""Seconds the driver waits for the actors to release their policies before killing them."""


def import_ray() -> Any:
    """Import ``ray`` or raise ``MissingExtraError("ray", "ray")``."""
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError("ray", "ray") from exc
    return ray


def init_ray(address: str | None = None) -> Any:
    """Connect to Ray (or start a local instance) unless already connected; return the module.

    Args:
        address: Cluster address; None uses ``RAY_ADDRESS`` or starts a local
            instance with ``LOCAL_NUM_CPUS`` CPUs (left running for reuse).
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    else:
        ray.init(num_cpus=LOCAL_NUM_CPUS, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    return ray


def _is_policy(obj: Any) -> bool:
    return not isinstance(obj, type) and (hasattr(obj, "aact") or hasattr(obj, "act"))


class EpisodeActor:
    """Body of the Ray actor: one runner (one env), one policy, one episode at a time.

    Args:
        env: Env id, factory or factories (as for ``collect``).
        policy: The policy, or a zero-argument callable (a class, a function)
            building it in the actor.
        options: The collection's options (``n_parallel`` is ignored: one slot).
    """

    def __init__(self, env: Any, policy: Any, options: RolloutOptions) -> None:
        if not _is_policy(policy):
            policy = policy()
        self.policy = policy
        self.runner = EpisodeRunner(env, policy, options.replace(n_parallel=1, progress=False, on_episode=None))
        self.loop = LoopThread("agent-gym-ray-actor")  # the actor's episodes and the policy's pools

    def run(self, spec: EpisodeSpec) -> dict[str, Any]:
        """Run one episode and return its ``to_dict()`` record."""
        trajectory = self.loop.call(self.runner.run_episode(spec))
        return trajectory.to_dict()

    def close(self) -> None:
        """Close the env, the worker threads and the policy's connections."""
        self.runner.close()
        aclose = getattr(self.policy, "aclose", None)
        close = getattr(self.policy, "close", None)
        try:
            if inspect.iscoroutinefunction(aclose):
                self.loop.call(aclose(), timeout=CLOSE_TIMEOUT_S)
            elif callable(close):
                close()
        except Exception:  # noqa: BLE001 - releasing connections is best effort
            logger.debug("closing the policy failed", exc_info=True)
        self.loop.stop()


async def collect_ray(
    env: Any, policy: Any, specs: Sequence[EpisodeSpec], options: RolloutOptions
) -> list[StepTrajectory]:
    """Run ``specs`` in up to ``options.n_parallel`` Ray actors; results in spec order.

    Connects to ``options.ray_address`` (see :func:`init_ray`). An actor that dies
    gives ``ENV_ERROR`` for its episode and is replaced.

    Args:
        env: Env id, factory or factories.
        policy: A picklable policy, or a zero-argument callable building one in each actor.
        specs: The episodes.
        options: The collection's options.

    Returns:
        One trajectory per spec.

    Raises:
        MissingExtraError: Ray is not installed.
        TypeError: The policy is neither a policy nor a callable, or cannot be pickled.
    """
    import_ray()
    if not specs:
        return []
    if not (_is_policy(policy) or callable(policy)):
        raise TypeError(
            f"policy: expected an object with aact() or act(), or a zero-argument callable building one, "
            f"got {type(policy).__name__}"
        )
    make_env_factory(env, env_kwargs=options.env_kwargs, max_steps=options.max_steps)  # check before any actor
    ray = init_ray(options.ray_address)
    try:
        policy_ref = ray.put(policy)  # pickled once, unpickled in each actor
    except Exception as exc:  # noqa: BLE001 - Ray raises several types for an unpicklable object
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TypeError(
            f"policy: expected a picklable policy or a zero-argument callable building it in each Ray actor, "
            f"got a {type(policy).__name__} that cannot be pickled ({first_line})"
        ) from exc
    actor_options = options.replace(n_parallel=1, progress=False, on_episode=None)
    actor_cls = ray.remote(num_cpus=0, max_restarts=0)(EpisodeActor)

    def spawn() -> Any:
        return actor_cls.remote(env, policy_ref, actor_options)

    actors = [spawn() for _ in range(min(options.n_parallel, len(specs)))]
    results: list[StepTrajectory | None] = [None] * len(specs)
    pending: dict[asyncio.Future[Any], tuple[Any, int]] = {}
    next_index = 0
    bar = Progress(len(specs), options.progress, desc="episodes (ray)")

    def submit(actor: Any) -> None:
        nonlocal next_index
        if next_index >= len(specs):
            return
        i = next_index
        next_index += 1
        future = asyncio.wrap_future(actor.run.remote(specs[i]).future())
        pending[future] = (actor, i)

    completed = False
    try:
        for actor in actors:
            submit(actor)
        while pending:
            done, _ = await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                actor, i = pending.pop(future)
                try:
                    trajectory = StepTrajectory.from_dict(future.result())
                except Exception as exc:  # noqa: BLE001 - the actor died or could not run the episode
                    logger.warning("episode %d: ray actor failed: %s", i, exc)
                    trajectory = failed_trajectory(
                        specs[i], options.gamma, f"ray actor failed: {type(exc).__name__}: {exc}"
                    )
                    ray.kill(actor)
                    actors.remove(actor)
                    actor = spawn()
                    actors.append(actor)
                results[i] = trajectory
                bar.update(trajectory)
                if options.on_episode is not None:
                    await notify(options.on_episode, trajectory)
                submit(actor)
        completed = True
    finally:
        bar.close()
        if completed:  # let the actors release their policies (HTTP pools) before they go
            closing = [asyncio.wrap_future(actor.close.remote().future()) for actor in actors]
            try:
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                logger.debug("ray actors did not close within %ss", CLOSE_TIMEOUT_S)
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
    return results  # type: ignore[return-value]
