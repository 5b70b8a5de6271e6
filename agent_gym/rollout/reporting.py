"""What the runners report as episodes end.

The progress bar, the per-episode callback, the labels of finished trajectories,
and the record of an episode that could not run. Shared by the local runner and the Ray backend.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from agent_gym.rollout.planning import EpisodeSpec
from agent_gym.types import EpisodeStatus, StepTrajectory
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

__all__ = ["STOPPED_REASON", "Progress", "failed_trajectory", "label", "notify", "stopped_trajectory"]

logger = logging.getLogger(__name__)

#: The reason recorded for an episode that a cancelled collection stopped (it ends with ``TIMEOUT``).
STOPPED_REASON = "stopped: the collection was cancelled before the episode ended"

_FAILED = (EpisodeStatus.TIMEOUT, EpisodeStatus.ENV_ERROR, EpisodeStatus.POLICY_ERROR, EpisodeStatus.JUDGE_ERROR)


class Progress:
    """A tqdm bar showing the running mean reward (no-op when disabled).

    Args:
        total: Number of episodes.
        enabled: Draw the bar (False: only count).
        desc: Label of the bar.
    """

    def __init__(self, total: int, enabled: bool, desc: str = "episodes") -> None:
        self.count = 0
        self.reward = 0.0
        self.failed = 0
        self._bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="ep", dynamic_ncols=True)

    def update(self, trajectory: StepTrajectory) -> None:
        """Count one finished episode."""
        self.count += 1
        self.reward += float(trajectory.trajectory_reward)
        if trajectory.status in _FAILED:
            self.failed += 1
        if self._bar is not None:
            postfix = {"reward": f"{self.reward / self.count:.3f}"}
            if self.failed:
                postfix["failed"] = str(self.failed)
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()


async def notify(on_episode: Callable[[StepTrajectory], Any], trajectory: StepTrajectory) -> None:
    """Call the user's per-episode callback; its failure is logged, never fatal.

    Every episode is still returned by ``collect``: a callback that raises (a full
    disk, a closed file) must not make the whole batch disappear.
    """
    try:
        outcome = on_episode(trajectory)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        logger.exception("on_episode raised for episode %d; the episode is still returned", trajectory.idx)


def label(trajectory: StepTrajectory, spec: EpisodeSpec) -> StepTrajectory:
    """Set ``idx``, ``group_id`` (and ``task`` when the env left it empty) from ``spec``."""
    trajectory.idx = spec.index
    trajectory.group_id = spec.group_id
    if trajectory.task is None and spec.task is not None:
        trajectory.task = spec.task
    return trajectory


def failed_trajectory(spec: EpisodeSpec, gamma: float, error: str,
                      status: EpisodeStatus = EpisodeStatus.ENV_ERROR) -> StepTrajectory:
    """The record, without turns, of an episode that could not run (no env, a dead actor).

    Its ``rollout_id`` is the episode id the episode would have run under.

    Args:
        spec: The episode.
        gamma: The discount factor of the run.
        error: Why it could not run.
        status: Its status (``ENV_ERROR`` by default).
    """
    builder = TrajectoryBuilder(spec.episode_id, gamma=gamma, task=spec.task)
    builder.end(error)
    return label(builder.build(status, conversation=()), spec)


def stopped_trajectory(spec: EpisodeSpec, gamma: float) -> StepTrajectory:
    """The ``TIMEOUT`` record of an episode that a cancelled collection never started."""
    return failed_trajectory(spec, gamma, STOPPED_REASON, EpisodeStatus.TIMEOUT)
