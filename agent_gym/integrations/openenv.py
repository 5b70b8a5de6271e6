"""Serve any registered agent_gym env as an OpenEnv environment server (``agent-gym serve-env``).

OpenEnv (PyPI ``openenv-core``) runs environments behind an HTTP/WebSocket server with typed
actions, observations and state: ``POST /reset``, ``POST /step``, ``GET /state``,
``GET /schema``, ``GET /health`` and the ``/ws`` session protocol its ``EnvClient`` speaks, one
environment instance per WebSocket session. :func:`create_openenv_app` builds that server, with
OpenEnv's own app factory, around ``gym.make(env_id, **env_kwargs)``:

* the action is :class:`AgentGymAction` - ``{"message": str}``, the assistant message the env
  parses (tool calls, ``<answer>``);
* the observation is :class:`AgentGymObservation` - ``messages`` (the whole conversation so
  far, the agent_gym observation), ``terminated`` / ``truncated``, ``info`` (the step info as
  JSON: ``toolcall_reward``, ``res_reward``, ``tool_calls``, ``error``; on reset the task and
  the tool schemas) besides OpenEnv's ``done`` and ``reward``;
* the state is :class:`AgentGymState` - ``episode_id``, ``step_count``, the env id and the task.

``reset`` takes OpenEnv's ``seed`` and ``episode_id`` and agent_gym's ``task`` (a task dict) and
``options`` (the env's reset options). Requires the ``openenv`` extra
(``pip install 'agent-gym[openenv]'``); it is imported when a server is built.

Example:
    >>> app = create_openenv_app("agent_gym/ToolUse-v0", max_sessions=16)  # doctest: +SKIP
    >>> # uvicorn.run(app, port=8200); then OpenEnv's GenericEnvClient("http://127.0.0.1:8200")
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from agent_gym.envs import register_envs
from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.types import PolicyOutput

__all__ = ["create_openenv_app", "jsonable", "openenv_types"]


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (objects that are not JSON become their ``str``)."""
    return json.loads(json.dumps(value, default=str))


def _step_info(info: Mapping[str, Any]) -> dict[str, Any]:
    return jsonable({k: v for k, v in info.items() if k not in ("trajectory", "policy_tools")})


@functools.cache
def openenv_types() -> tuple[type, type, type, type]:
    """``(AgentGymAction, AgentGymObservation, AgentGymState, AgentGymEnvironment)``, built on OpenEnv's types.

    Raises:
        MissingExtraError: ``openenv-core`` is not installed.
    """
    try:
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import Action, Observation, State
        from pydantic import Field
    except ImportError as exc:
        raise MissingExtraError("openenv-core", "openenv") from exc

    class AgentGymAction(Action):
        """The next assistant message of an agent_gym episode."""

        message: str = Field(..., description="The assistant message: text, <tool_call> blocks, <answer>.")

    class AgentGymObservation(Observation):
        """The conversation so far and what the last step caused."""

        messages: list[dict[str, str]] = Field(default_factory=list, description="The whole conversation so far.")
        terminated: bool = Field(default=False, description="The episode ended (answer or env end).")
        truncated: bool = Field(default=False, description="The step limit ended the episode.")
        info: dict[str, Any] = Field(default_factory=dict, description="The step info (JSON).")

    class AgentGymState(State):
        """The episode of one session."""

        env_id: str = Field(default="", description="The agent_gym env id.")
        task: Any = Field(default=None, description="The task of the episode.")
        done: bool = Field(default=False, description="The episode ended.")

    class AgentGymEnvironment(Environment):
        """One agent_gym env instance behind OpenEnv's server (one per session)."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
            super().__init__()
            self.env_id = env_id
            self.env = gym.make(env_id, **dict(env_kwargs))
            self._state = AgentGymState(episode_id=None, step_count=0, env_id=env_id)

        def reset(self, seed: int | None = None, episode_id: str | None = None, task: Any = None,
                  options: Mapping[str, Any] | None = None, **kwargs: Any) -> AgentGymObservation:
            opts = dict(options or {})
            if task is not None:
                opts["task"] = task
            obs, info = self.env.reset(seed=seed, options=opts or None)
            self._state = AgentGymState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                        env_id=self.env_id, task=jsonable(info.get("task")))
            return AgentGymObservation(messages=[dict(m) for m in obs], info=_step_info(info), reward=0.0,
                                       done=False)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> AgentGymObservation:
            message = action.message if hasattr(action, "message") else action
            if isinstance(message, PolicyOutput):
                message = message.text
            obs, reward, terminated, truncated, info = self.env.step(str(message))
            self._state.step_count += 1
            self._state.done = bool(terminated or truncated)
            return AgentGymObservation(messages=[dict(m) for m in obs], terminated=bool(terminated),
                                       truncated=bool(truncated), info=_step_info(info), reward=float(reward),
                                       done=self._state.done)

        @property
        def state(self) -> AgentGymState:
            return self._state

        def close(self) -> None:
            self.env.close()

    for cls in (AgentGymAction, AgentGymObservation, AgentGymState, AgentGymEnvironment):
        cls.__module__ = __name__
    return AgentGymAction, AgentGymObservation, AgentGymState, AgentGymEnvironment


def create_openenv_app(env_id: str, *, max_sessions: int = 64, env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """OpenEnv's FastAPI server for ``gym.make(env_id, **env_kwargs)`` (see the module docs).

    Args:
        env_id: A registered agent_gym env id.
        max_sessions: Most concurrent WebSocket sessions (each gets its own env instance).
        env_kwargs: Keyword arguments of ``gym.make``.

    Raises:
        ConfigError: Unknown env id, or ``max_sessions`` < 1.
        MissingExtraError: ``openenv-core`` is not installed.
    """
    register_envs()
    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
        raise ConfigError(f"env_id: expected a registered env id ({', '.join(known)}), got {env_id!r}")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(f"max_sessions: expected an int >= 1, got {max_sessions!r}")
    action_cls, observation_cls, _, environment_cls = openenv_types()
    kwargs = dict(env_kwargs or {})
    gym.make(env_id, **kwargs).close()  # a bad kwarg fails here, not in the first session
    from openenv.core.env_server.http_server import create_fastapi_app

    factory = functools.partial(environment_cls, env_id, kwargs)
    return create_fastapi_app(factory, action_cls, observation_cls, max_concurrent_envs=max_sessions)
