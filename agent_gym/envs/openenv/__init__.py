"""Remote OpenEnv environments stepped as agent_gym envs (see :mod:`agent_gym.envs.openenv.env`)."""

from __future__ import annotations

from agent_gym.envs.openenv.env import OpenEnvEnv

__all__ = ["OpenEnvEnv"]
