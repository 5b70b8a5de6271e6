"""agent_gym: Gymnasium environments for multi-turn LLM agents with token-exact trajectories.

Importing the package registers every built environment id with Gymnasium
(``agent_gym/ToolUse-v0``). The public names below are the stable API; each is
imported on first use (PEP 562), so ``import agent_gym`` followed by
``gym.make("agent_gym/ToolUse-v0")`` loads neither torch, transformers, aiohttp
nor pyarrow. The submodules a Gymnasium user reaches for are attributes too,
loaded the same way: ``agent_gym.spaces`` (:mod:`agent_gym.env.spaces`), ``agent_gym.wrappers``,
``agent_gym.errors``, ``agent_gym.tools`` and ``agent_gym.utils`` (the env checker).

Example:
    >>> import gymnasium as gym
    >>> import agent_gym
    >>> env = gym.make("agent_gym/ToolUse-v0")
    >>> isinstance(env.unwrapped, agent_gym.AgentEnv)
    True
    >>> agent_gym.PolicyOutput(text="<answer>4</answer>") in env.action_space
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agent_gym.envs import register_envs

__version__ = "0.1.0"

__all__ = [
    "AgentEnv",
    "AgentGymError",
    "AssistantMessageSpace",
    "BaseEngineWrapper",
    "ClientOptions",
    "ConfigError",
    "ConversationSpace",
    "EpisodeRunner",
    "EpisodeStatus",
    "FinishReason",
    "Grade",
    "GymEngineWrapper",
    "MemoryConfig",
    "MemorySimple",
    "MemorySummary",
    "Message",
    "MessageSpace",
    "MissingExtraError",
    "Policy",
    "PolicyError",
    "PolicyOutput",
    "RewardConfig",
    "SamplingParams",
    "Segment",
    "ServerError",
    "Step",
    "StepTrajectory",
    "TextSpace",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryWrapper",
    "TransformersPolicy",
    "VLLMChatPolicy",
    "VLLMPolicy",
    "__version__",
    "collect",
    "collect_async",
    "compute_mc_return",
    "errors",
    "spaces",
    "tools",
    "utils",
    "wrappers",
]

_LAZY: dict[str, str] = {
    "AgentEnv": "agent_gym.env.core",
    "Grade": "agent_gym.env.grade",
    "BaseEngineWrapper": "agent_gym.integrations.engine",
    "GymEngineWrapper": "agent_gym.integrations.engine",
    "AgentGymError": "agent_gym.errors",
    "ConfigError": "agent_gym.errors",
    "MissingExtraError": "agent_gym.errors",
    "PolicyError": "agent_gym.errors",
    "ServerError": "agent_gym.errors",
    "TrajectoryError": "agent_gym.errors",
    "MemoryConfig": "agent_gym.memory",
    "MemorySimple": "agent_gym.memory",
    "MemorySummary": "agent_gym.memory",
    "Policy": "agent_gym.policy",
    "SamplingParams": "agent_gym.policy",
    "TransformersPolicy": "agent_gym.policy",
    "VLLMChatPolicy": "agent_gym.policy",
    "ClientOptions": "agent_gym.policy",
    "VLLMPolicy": "agent_gym.policy",
    "EpisodeRunner": "agent_gym.rollout",
    "collect": "agent_gym.rollout",
    "collect_async": "agent_gym.rollout",
    "EpisodeStatus": "agent_gym.types",
    "FinishReason": "agent_gym.types",
    "Message": "agent_gym.types",
    "PolicyOutput": "agent_gym.types",
    "Segment": "agent_gym.types",
    "Step": "agent_gym.types",
    "StepTrajectory": "agent_gym.types",
    "Trajectory": "agent_gym.types",
    "compute_mc_return": "agent_gym.types",
    "RewardConfig": "agent_gym.env.rewards",
    "AssistantMessageSpace": "agent_gym.env.spaces",
    "ConversationSpace": "agent_gym.env.spaces",
    "MessageSpace": "agent_gym.env.spaces",
    "TextSpace": "agent_gym.env.spaces",
    "TrajectoryWrapper": "agent_gym.wrappers",
}
"""Public name -> module that defines it, imported on first attribute access."""

_SUBMODULES: dict[str, str] = {
    "errors": "agent_gym.errors",
    "spaces": "agent_gym.env.spaces",
    "tools": "agent_gym.tools",
    "utils": "agent_gym.utils",
    "wrappers": "agent_gym.wrappers",
}
"""Attribute -> the submodule it names, imported on first attribute access."""


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        submodule = importlib.import_module(_SUBMODULES[name])
        globals()[name] = submodule  # later lookups skip __getattr__
        return submodule
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_gym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from agent_gym import errors, tools, utils, wrappers
    from agent_gym.env import spaces
    from agent_gym.env.core import AgentEnv
    from agent_gym.env.grade import Grade
    from agent_gym.env.rewards import RewardConfig
    from agent_gym.env.spaces import AssistantMessageSpace, ConversationSpace, MessageSpace, TextSpace
    from agent_gym.errors import (
        AgentGymError,
        ConfigError,
        MissingExtraError,
        PolicyError,
        ServerError,
        TrajectoryError,
    )
    from agent_gym.integrations.engine import BaseEngineWrapper, GymEngineWrapper
    from agent_gym.memory import MemoryConfig, MemorySimple, MemorySummary
    from agent_gym.policy import (
        ClientOptions,
        Policy,
        SamplingParams,
        TransformersPolicy,
        VLLMChatPolicy,
        VLLMPolicy,
    )
    from agent_gym.rollout import EpisodeRunner, collect, collect_async
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

register_envs()
