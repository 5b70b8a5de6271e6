"""The TRL adapter's dataset rows and reward functions (re-exported by :mod:`agent_gym.integrations.trl`).

A dataset row's ``prompt`` names the task the rollout function runs (:func:`task_prompt`,
:func:`task_dataset`); the reward functions read the fields the rollout function returns
(:func:`episode_reward`, :func:`metric_reward`) and give None for an episode that failed for
infrastructure reasons, which TRL leaves out of the group baseline with advantage 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.errors import ConfigError, MissingExtraError

__all__ = ["episode_reward", "metric_reward", "task_dataset", "task_prompt"]


def task_prompt(task: Mapping[str, Any]) -> str:
    """The dataset ``prompt`` that runs ``task``: its JSON (keys sorted), or its id.

    A task holding values JSON cannot (Terminal-v0's file contents are bytes) is named by its
    ``id``: the rollout function then finds it among ``tasks=`` or the env's own tasks.

    Args:
        task: A task dict (``id``, ``question``, ``ground_truth``, ...).

    Returns:
        A string the rollout function turns back into the task.
    """
    if not isinstance(task, Mapping):
        raise TypeError(f"task: expected a dict, got {type(task).__name__}")
    try:
        return json.dumps(dict(task), sort_keys=True)
    except (TypeError, ValueError):
        if task.get("id") in (None, ""):
            raise TypeError("task: expected JSON values or an 'id' to name it by") from None
        return str(task["id"])


def task_dataset(tasks: Sequence[Mapping[str, Any]] | str, *, env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (:func:`task_prompt`) and ``task_id``.

    Args:
        tasks: Task dicts, or an env id whose own tasks (``env.unwrapped.tasks``) are used.
        env_kwargs: ``gym.make`` keyword arguments when ``tasks`` is an env id.

    Returns:
        The dataset (extra columns reach TRL's reward functions as keyword arguments).

    Raises:
        MissingExtraError: ``datasets`` is not installed.
    """
    try:
        from datasets import Dataset
    except ImportError:
        raise MissingExtraError("datasets", "trl") from None
    if isinstance(tasks, str):
        import gymnasium as gym

        env = gym.make(tasks, **dict(env_kwargs or {}))
        try:
            unwrapped: Any = env.unwrapped
            tasks = list(unwrapped.tasks)
        finally:
            env.close()
    rows = [{"prompt": task_prompt(task), "task_id": str(task.get("id", ""))} for task in tasks]
    if not rows:
        raise ConfigError("tasks: expected at least one task, got none")
    return Dataset.from_list(rows)


def episode_reward(prompts: Any = None, completions: Any = None, episode_reward: Any = None, **kwargs: Any) -> list:
    """TRL reward function: the reward the rollout function recorded for each episode.

    None (an episode that failed for infrastructure reasons) makes TRL leave the sample out of its
    group's baseline and give it advantage 0.

    Args:
        prompts: The batch's prompts (unused).
        completions: The decoded completions (unused).
        episode_reward: The rollout function's ``episode_reward`` field.
        **kwargs: The other columns and fields TRL passes (unused).

    Returns:
        One float or None per sample.

    Raises:
        ConfigError: The batch did not come from :func:`rollout_func`.
    """
    if episode_reward is None:
        raise ConfigError("episode_reward: expected the 'episode_reward' field of agent_gym's rollout_func; "
                          "pass rollout_func=agent_gym.integrations.trl.rollout_func(...) to GRPOTrainer")
    return [None if r is None else float(r) for r in episode_reward]


def metric_reward(name: str) -> Callable[..., list]:
    """A TRL reward function reading one episode metric (e.g. ``"res_reward"``: the answer's score alone).

    Masked (infrastructure-failed) episodes give None, as in :func:`episode_reward`.

    Args:
        name: A key of ``Trajectory.metrics`` (``res_reward``, ``toolcall_reward``, ``steps``, ...).

    Returns:
        A reward function named ``name`` (TRL logs it under ``rewards/<name>``).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name: expected a metric name, got {name!r}")

    def reward(prompts: Any = None, completions: Any = None, episode_metrics: Any = None,
               episode_reward: Any = None, **kwargs: Any) -> list:
        if episode_metrics is None or episode_reward is None:
            raise ConfigError(f"{name}: expected the 'episode_metrics' field of agent_gym's rollout_func")
        return [None if r is None else float(m.get(name, 0.0))
                for m, r in zip(episode_metrics, episode_reward, strict=True)]

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = f"TRL reward function: each episode's ``metrics[{name!r}]`` (None when masked)."
    return reward
