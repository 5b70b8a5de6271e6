"""Planning a collection: which episodes run (:class:`EpisodeSpec`) and how their envs are built.

:func:`plan_episodes` lays out every episode of a collection (task, reset seed,
group) before any runs, so the local and the Ray backend run the same episodes;
:func:`make_env_factory` turns an env id or factories into ``slot -> env``.

Example:
    >>> from agent_gym.rollout import plan_episodes
    >>> [spec.seed for spec in plan_episodes(None, 2, samples_per_task=2, seed=10)]
    [10, 10, 11, 11]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym

from agent_gym.checks import check_int
from agent_gym.envs import register_envs

__all__ = ["EpisodeSpec", "make_env_factory", "plan_episodes"]


@dataclass(frozen=True)
class EpisodeSpec:
    """What one episode runs: where its result goes, its seed and its task.

    Attributes:
        index: Position of the episode in the returned list.
        group: Index of its task group; ``samples_per_task`` siblings share it.
        sample: Position among its siblings.
        seed: Seed passed to ``env.reset`` (``seed + group``: siblings face the same task).
        task: The task dict, or None to let the env choose from ``seed``.
        group_id: Shared by the siblings (``Trajectory.group_id``).
        env: The env id (or factory) of this episode; None: the runner's.
        env_kwargs: Its ``gym.make`` keyword arguments; None: the runner's.
    """

    index: int
    group: int
    sample: int
    seed: int
    task: dict[str, Any] | None
    group_id: str
    env: Any = None
    env_kwargs: Mapping[str, Any] | None = None

    @property
    def episode_id(self) -> str:
        """Deterministic episode id (also the policy's session id): ``"<group_id>-<sample>"``.

        Seeded policies derive their per-turn sampling seeds from it, which makes a
        seeded run repeatable on any backend.
        """
        return f"{self.group_id}-{self.sample}"


def plan_episodes(
    tasks: Sequence[dict[str, Any]] | None,
    num_episodes: int | None,
    samples_per_task: int = 1,
    seed: int = 0,
) -> list[EpisodeSpec]:
    """Lay out the episodes of a collection, in result order.

    With ``tasks``, each task is one group (``num_episodes``, if given, takes that
    many groups, cycling through the tasks). Without ``tasks``, ``num_episodes``
    groups are drawn by the env from their seeds. Each group runs
    ``samples_per_task`` times with the same reset seed ``seed + group``.

    Args:
        tasks: Task dicts, or None.
        num_episodes: Number of groups (required without ``tasks``).
        samples_per_task: Episodes per group.
        seed: Base seed.

    Returns:
        One spec per episode, ordered by group then sibling.

    Raises:
        TypeError: ``tasks`` is not a list of dicts, or a number is not an int.
        ValueError: Neither ``tasks`` nor ``num_episodes``, or a count below 1.
    """
    check_int("samples_per_task", samples_per_task, low=1)
    check_int("seed", seed)
    if tasks is not None:
        if isinstance(tasks, (str, bytes, dict)) or not isinstance(tasks, Sequence):
            raise TypeError(f"tasks: expected a list of task dicts, got {type(tasks).__name__}")
        for i, task in enumerate(tasks):
            if not isinstance(task, dict):
                raise TypeError(f"tasks[{i}]: expected dict, got {type(task).__name__}")
        if not tasks:
            return []
        groups = len(tasks) if num_episodes is None else check_int("num_episodes", num_episodes, low=1)
        chosen: list[dict[str, Any] | None] = [tasks[g % len(tasks)] for g in range(groups)]
    else:
        if num_episodes is None:
            raise ValueError("collect: expected tasks or num_episodes, got neither")
        chosen = [None] * check_int("num_episodes", num_episodes, low=1)
    specs: list[EpisodeSpec] = []
    for group, chosen_task in enumerate(chosen):
        task_id = chosen_task.get("id") if chosen_task is not None else None
        group_id = f"{seed}-{group}" if task_id is None else f"{seed}-{group}-{task_id}"
        for sample in range(samples_per_task):
            specs.append(EpisodeSpec(len(specs), group, sample, seed + group, chosen_task, group_id))
    return specs


def make_env_factory(
    env: Any, *, env_kwargs: Mapping[str, Any] | None = None, max_steps: int | None = None
) -> Callable[[int], gym.Env]:
    """Turn an env id, a factory or a list of factories into ``slot -> env``.

    Args:
        env: A registered id (``gym.make(env, max_steps=..., **env_kwargs)``), a
            zero-argument callable, or a sequence of them (slot ``k`` uses
            ``env[k % len(env)]``).
        env_kwargs: Extra ``gym.make`` keyword arguments (ids only).
        max_steps: The env's step limit, passed to ``gym.make`` as ``max_steps`` (ids only).

    Returns:
        A function building the env for a worker slot.

    Raises:
        TypeError: ``env`` is none of the accepted kinds.
        ValueError: ``env_kwargs`` or ``max_steps`` given with factories.
    """
    if isinstance(env, str):
        kwargs = dict(env_kwargs or {})
        if max_steps is not None:
            kwargs["max_steps"] = check_int("max_steps", max_steps, low=1)
        env_id = env

        def _make_id(slot: int) -> gym.Env:
            register_envs()  # idempotent: the ids exist in a fresh worker process too
            return gym.make(env_id, **kwargs)

        return _make_id
    if env_kwargs or max_steps is not None:
        raise ValueError("env_kwargs/max_steps: expected None when env factories are given (configure the factories)")
    if callable(env):
        factory = cast("Callable[[], gym.Env]", env)
        return lambda slot: factory()
    if isinstance(env, Sequence) and env and all(callable(f) for f in env):
        fns = list(env)
        return lambda slot: fns[slot % len(fns)]()
    raise TypeError(f"env: expected an env id, a callable or a list of callables, got {type(env).__name__}")
