"""Ray backend of ``collect``: episodes run in Ray actors.

Each actor owns one env (built from the same id or factory as the local backend)
and a copy of the policy, and runs one episode at a time with the local episode
runner; the driver hands out episodes as actors free up. Episodes use the same
specs (seeds, tasks) as the local backend, so a deterministic policy gives the
same trajectories, timings aside. Ray is imported lazily: without it,
``backend="ray"`` raises :class:`~agent_gym.errors.MissingExtraError`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from agent_gym.errors import MissingExtraError
from agent_gym.rollout._local import EpisodeSpec, LocalRunner, _notify, _NullEnv, _Progress
from agent_gym.types import EpisodeStatus, StepTrajectory

__all__ = ["EpisodeActor", "collect_ray", "import_ray"]

logger = logging.getLogger(__name__)

LOCAL_NUM_CPUS = 2
"""CPUs given to a Ray instance started by ``collect`` (no cluster address given)."""


def import_ray() -> Any:
    """Import ``ray`` or raise ``MissingExtraError("ray", "ray")``."""
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError("ray", "ray") from exc
    return ray


def _is_policy(obj: Any) -> bool:
    return hasattr(obj, "aact") or hasattr(obj, "act")


class EpisodeActor:
    """Body of the Ray actor: one env, one policy, one episode at a time.

    Args:
        env: Env id, factory or factories (as for ``collect``).
        policy: The policy, or a zero-argument callable building it in the actor.
        options: ``LocalRunner`` keyword arguments (gamma, memory, max_steps, ...).
    """

    def __init__(self, env: Any, policy: Any, options: dict[str, Any]) -> None:
        if not _is_policy(policy) and callable(policy):
            policy = policy()
        options = {**options, "n_parallel": 1}
        self.runner = LocalRunner(env, policy, **options)
        self.loop = asyncio.new_event_loop()

    def run(self, spec: EpisodeSpec) -> dict[str, Any]:
        """Run one episode and return its ``to_dict()`` record."""
        trajectory = self.loop.run_until_complete(self.runner.run_episode(spec, 0))
        return trajectory.to_dict()

    def close(self) -> None:
        """Close the env and the worker threads."""
        self.runner.close()


def _failed(spec: EpisodeSpec, gamma: float, error: str) -> StepTrajectory:
    from agent_gym.wrappers.trajectory import TrajectoryWrapper

    trajectory = TrajectoryWrapper(_NullEnv(), gamma=gamma).finish(EpisodeStatus.ENV_ERROR, error)
    return LocalRunner._label(trajectory, spec)


def _init_ray(ray: Any, address: str | None) -> None:
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    else:
        ray.init(
            num_cpus=LOCAL_NUM_CPUS,
            include_dashboard=False,
            ignore_reinit_error=True,
            log_to_driver=False,
        )


async def collect_ray(
    env: Any,
    policy: Any,
    specs: Sequence[EpisodeSpec],
    *,
    gamma: float = 1.0,
    memory: Any = None,
    max_steps: int | None = None,
    episode_timeout: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    n_parallel: int = 8,
    progress: bool = False,
    on_episode: Callable[[StepTrajectory], Any] | None = None,
    ray_address: str | None = None,
) -> list[StepTrajectory]:
    """Run ``specs`` in up to ``n_parallel`` Ray actors; results in spec order.

    Connects to ``ray_address`` (or ``RAY_ADDRESS``) when given, otherwise starts
    a local Ray instance with ``LOCAL_NUM_CPUS`` CPUs (left running for reuse).
    An actor that dies gives ``ENV_ERROR`` for its episode and is replaced.

    Returns:
        One trajectory per spec.
    """
    ray = import_ray()
    if not specs:
        return []
    # Validate arguments here, before any actor exists.
    LocalRunner(
        env,
        policy if _is_policy(policy) else _Placeholder(),
        gamma=gamma,
        memory=memory,
        max_steps=max_steps,
        episode_timeout=episode_timeout,
        env_kwargs=env_kwargs,
        n_parallel=n_parallel,
    )
    _init_ray(ray, ray_address)
    options = {
        "gamma": gamma,
        "memory": memory,
        "max_steps": max_steps,
        "episode_timeout": episode_timeout,
        "env_kwargs": env_kwargs,
    }
    actor_cls = ray.remote(num_cpus=0, max_restarts=0)(EpisodeActor)

    def spawn() -> Any:
        return actor_cls.remote(env, policy, options)

    actors = [spawn() for _ in range(min(n_parallel, len(specs)))]
    results: list[StepTrajectory | None] = [None] * len(specs)
    pending: dict[asyncio.Future[Any], tuple[Any, int]] = {}
    next_index = 0
    bar = _Progress(len(specs), progress, desc="episodes (ray)")

    def submit(actor: Any) -> None:
        nonlocal next_index
        if next_index >= len(specs):
            return
        i = next_index
        next_index += 1
        future = asyncio.wrap_future(actor.run.remote(specs[i]).future())
        pending[future] = (actor, i)

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
                    trajectory = _failed(specs[i], gamma, f"ray actor failed: {type(exc).__name__}: {exc}")
                    ray.kill(actor)
                    actors.remove(actor)
                    actor = spawn()
                    actors.append(actor)
                results[i] = trajectory
                bar.update(trajectory)
                if on_episode is not None:
                    await _notify(on_episode, trajectory)
                submit(actor)
    finally:
        bar.close()
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
    return results  # type: ignore[return-value]


class _Placeholder:
    """Stands for a policy built later inside the actors (argument validation only)."""

    async def aact(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        raise RuntimeError("the policy is built inside each Ray actor; this stand-in only passes validation")

    def close_session(self, session_id: str) -> None:  # pragma: no cover - never called
        """Nothing to forget."""
