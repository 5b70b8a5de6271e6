"""agent_gym: Gymnasium environments for multi-turn LLM agents with token-exact trajectories.

Importing the package registers every built environment id with Gymnasium.
"""

from __future__ import annotations

from agent_gym.errors import AgentGymError, ConfigError, MissingExtraError, PolicyError, ServerError, TrajectoryError
from agent_gym.types import (
    EpisodeStatus,
    FinishReason,
    Message,
    PolicyOutput,
    Segment,
    Step,
    StepTrajectory,
    Trajectory,
    compute_mc_return,
)

__version__ = "0.1.0"

__all__ = [
    "AgentGymError",
    "ConfigError",
    "EpisodeStatus",
    "FinishReason",
    "Message",
    "MissingExtraError",
    "PolicyError",
    "PolicyOutput",
    "Segment",
    "ServerError",
    "Step",
    "StepTrajectory",
    "Trajectory",
    "TrajectoryError",
    "__version__",
    "compute_mc_return",
]

from agent_gym.envs import register_envs  # noqa: E402

register_envs()
