"""``RubricGrading``: grade any agent_gym env's episodes with a rubric (an LLM judge) as they end.

The wrapper lets the env run its episode as usual; on the step that ends it (unless it already ended
with an infrastructure failure) the rubric scores the episode's final answer against the task's
``ground_truth``. The rubric's outcome replaces the step's outcome (``info["res_reward"]`` =
``correct * outcome``, the reward changed by the difference) and its shaping is added to the reward;
``info["rubric"]`` records the criteria. A judge that fails ends the episode ``JUDGE_ERROR``
(``truncated``, ``info["error"]`` saying why) with the env's own rewards left as they were: the
trainer adapters mask it, it is never a zero.

Example:
    >>> env = RubricGrading(gym.make("agent_gym/RAG-v0"), rubric)  # doctest: +SKIP
    >>> trajectories = collect(lambda: RubricGrading(gym.make("agent_gym/RAG-v0"), rubric), policy,
    ...                        tasks=tasks)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agent_gym.integrations.contract import INFRA_FAILURE_STATUSES
from agent_gym.judges.rubric import JudgedEpisode, Rubric
from agent_gym.types import EpisodeStatus

__all__ = ["RubricGrading"]


class RubricGrading(gym.Wrapper):
    """Score each episode of ``env`` with ``rubric`` when it ends (see the module doc).

    Args:
        env: An agent_gym env (its ``reset`` info has the task).
        rubric: The rubric; group-relative criteria see a group of one here (score whole groups
            afterwards with :func:`~agent_gym.judges.judge_trajectories` instead).
        correct: The reward of a fully correct outcome (default: the env's ``rewards.correct``, else 1.0).
    """

    def __init__(self, env: gym.Env, rubric: Rubric, *, correct: float | None = None) -> None:
        super().__init__(env)
        if not isinstance(rubric, Rubric):
            raise TypeError(f"rubric: expected a Rubric, got {type(rubric).__name__}")
        self.rubric = rubric
        rewards = getattr(env.unwrapped, "rewards", None)
        self.correct = float(correct if correct is not None else getattr(rewards, "correct", 1.0))
        self._task: dict[str, Any] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env and remember the episode's task."""
        observation, info = self.env.reset(**kwargs)
        self._task = dict(info.get("task") or {})
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the env; the step that ends the episode is scored by the rubric."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated) or str(info.get("status", "")) in INFRA_FAILURE_STATUSES:
            return observation, float(reward), terminated, truncated, info
        episode = JudgedEpisode.from_messages(self._task, list(observation))
        (score,) = self.rubric.score([episode])
        info["rubric"] = score.info()
        if score.failure is not None or score.outcome is None:
            reason = str(score.failure) if score.failure is not None else "the rubric has no outcome criterion"
            info.update(status=EpisodeStatus.JUDGE_ERROR, end_reason="judge_error", error=f"judge failed: {reason}")
            return observation, float(reward), False, True, info
        outcome = self.correct * score.outcome
        delta = outcome - float(info.get("res_reward", 0.0))
        info["res_reward"] = outcome
        return observation, float(reward) + delta + score.shaping, terminated, truncated, info
