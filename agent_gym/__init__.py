"""agent_gym: Gymnasium environments for multi-turn LLM agents with token-exact trajectories.

Importing the package registers every built environment id with Gymnasium
(``agent_gym/ToolUse-v0``). The public names below are the stable API.
"""

from __future__ import annotations

from agent_gym.engine import BaseEngineWrapper, GymEngineWrapper
from agent_gym.errors import AgentGymError, ConfigError, MissingExtraError, PolicyError, ServerError, TrajectoryError
from agent_gym.memory import MemoryConfig, MemorySimple, MemorySummary
from agent_gym.policy import Policy, SamplingParams, TransformersPolicy, VLLMPolicy
from agent_gym.rollout import collect, collect_async
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
from agent_gym.wrappers import TrajectoryWrapper

__version__ = "0.1.0"

__all__ = [
    "AgentGymError",
    "BaseEngineWrapper",
    "ConfigError",
    "EpisodeStatus",
    "FinishReason",
    "GymEngineWrapper",
    "MemoryConfig",
    "MemorySimple",
    "MemorySummary",
    "Message",
    "MissingExtraError",
    "Policy",
    "PolicyError",
    "PolicyOutput",
    "SamplingParams",
    "Segment",
    "ServerError",
    "Step",
    "StepTrajectory",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryWrapper",
    "TransformersPolicy",
    "VLLMPolicy",
    "__version__",
    "collect",
    "collect_async",
    "compute_mc_return",
]

from agent_gym.envs import register_envs  # noqa: E402

register_envs()
