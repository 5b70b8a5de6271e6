"""Which episodes an evaluation runs: the tasks of each env and the ``(env, task, sample)`` keys.

:func:`plan_env` builds an env once to read its task list, picks the evaluated tasks
(all of them, or ``num_tasks`` drawn with the seed, kept in task order) and records what
identifies the data: the env's version and entry point and a hash of the chosen tasks
(:func:`~agent_gym.evaluation.store.tasks_hash`). :func:`episode_specs` turns the keys still
to run into rollout specs whose episode ids (the policies' session ids, from which seeded
sampling derives its seeds) depend only on the key, so an episode run again after a crash
samples what it would have sampled the first time.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.evaluation.store import tasks_hash

__all__ = ["EnvPlan", "episode_specs", "plan_env"]


@dataclass(frozen=True)
class EnvPlan:
    """The evaluated tasks of one env.

    Attributes:
        env_id: The registered id.
        env_kwargs: The ``gym.make`` keyword arguments (``split`` when asked for).
        task_indices: Indices of the evaluated tasks in the env's task list, ascending.
        tasks: The evaluated task dicts, in the same order.
        total_tasks: Tasks the env has.
        data_hash: :func:`~agent_gym.evaluation.store.tasks_hash` of ``tasks``.
        version: ``{"id", "version", "entry_point", "agent_gym", "nondeterministic"}``.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    task_indices: tuple[int, ...]
    tasks: tuple[dict[str, Any], ...] = field(repr=False)
    total_tasks: int
    data_hash: str
    version: dict[str, Any]

    def manifest(self) -> dict[str, Any]:
        """The env's entry of ``manifest.json``."""
        return {**self.version, "env_kwargs": dict(self.env_kwargs), "task_indices": list(self.task_indices),
                "task_ids": [str(t.get("id", "")) for t in self.tasks], "total_tasks": self.total_tasks,
                "tasks_sha256": self.data_hash}


def _accepts(entry_point: Any, name: str) -> bool:
    """Whether the env class of a registry entry point takes keyword ``name``."""
    if isinstance(entry_point, str):
        import importlib

        module, _, attr = entry_point.partition(":")
        entry_point = getattr(importlib.import_module(module), attr)
    try:
        parameters = inspect.signature(entry_point).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def plan_env(env_id: str, *, num_tasks: int | None = None, split: str | None = None, seed: int = 0,
             env_kwargs: Mapping[str, Any] | None = None) -> EnvPlan:
    """Read an env's tasks and choose the evaluated ones.

    Args:
        env_id: A registered env id.
        num_tasks: Tasks to evaluate (None: all). Fewer than the env has are drawn with
            ``seed`` (the same ones run after run) and kept in task order.
        split: The env's ``split`` argument, for envs that take one (e.g. SWE-v0).
        seed: Seed of the draw.
        env_kwargs: Further ``gym.make`` keyword arguments.

    Returns:
        The plan.

    Raises:
        ConfigError: An unknown env id, an env without ``split`` given one, an env without a
            task list, or ``num_tasks`` < 1.
    """
    import gymnasium as gym

    from agent_gym import __version__
    from agent_gym.envs import register_envs

    register_envs()
    if env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if k.startswith("agent_gym/")))
        raise ConfigError(f"unknown env id {env_id!r}; registered: {known}")
    spec = gym.registry[env_id]
    kwargs = dict(env_kwargs or {})
    if split is not None:
        if not _accepts(spec.entry_point, "split"):
            raise ConfigError(f"--split: {env_id} takes no split argument (its tasks are one set)")
        kwargs["split"] = split
    env = gym.make(env_id, **kwargs)
    try:
        all_tasks = [dict(t) for t in (getattr(env.unwrapped, "tasks", None) or [])]
    finally:
        env.close()
    if not all_tasks:
        raise ConfigError(f"{env_id}: expected an env with a task list (env.unwrapped.tasks), got none")
    total = len(all_tasks)
    if num_tasks is not None and num_tasks < 1:
        raise ConfigError(f"--tasks: expected an int >= 1, got {num_tasks}")
    if num_tasks is None or num_tasks >= total:
        indices = list(range(total))
    else:
        indices = sorted(random.Random(f"{seed}/{env_id}").sample(range(total), num_tasks))
    tasks = tuple(all_tasks[i] for i in indices)
    version = {"id": env_id, "version": spec.version, "entry_point": str(spec.entry_point), "agent_gym": __version__,
               "nondeterministic": bool(spec.nondeterministic)}
    return EnvPlan(env_id, kwargs, tuple(indices), tasks, total, tasks_hash(tasks), version)


def episode_specs(plans: Mapping[str, EnvPlan], keys: Iterable[tuple[str, int, int]], seed: int) -> list[Any]:
    """Rollout specs of ``keys`` (``(env id, task index, sample index)``), in the order given.

    The reset seed is ``seed + task index``; the episode id is
    ``"<env name>-<seed>-<task index>-<sample>"``, the same whenever the key runs.

    Returns:
        :class:`~agent_gym.rollout.planning.EpisodeSpec` objects.
    """
    from agent_gym.rollout.planning import EpisodeSpec

    positions = {env_id: {t: i for i, t in enumerate(plan.task_indices)} for env_id, plan in plans.items()}
    specs = []
    for index, (env_id, task_index, sample) in enumerate(keys):
        plan = plans[env_id]
        task = plan.tasks[positions[env_id][task_index]]
        name = env_id.rsplit("/", 1)[-1]
        specs.append(EpisodeSpec(index, task_index, sample, seed + task_index, task, f"{name}-{seed}-{task_index}",
                                 env=env_id, env_kwargs=plan.env_kwargs))
    return specs
