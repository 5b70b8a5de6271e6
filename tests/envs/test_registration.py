"""What every registered id shares: one step limit, one rule for ``tools=``, explicit constructor
signatures, ``solution`` as the oracle's data, and a passive checker that survives a failing first reset."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.env.core import AgentEnv
from agent_gym.envs import ENV_INFOS
from agent_gym.envs.passive_checker import PassiveEnvChecker
from agent_gym.errors import ConfigError
from agent_gym.types import EpisodeStatus

IDS = [info.id for info in ENV_INFOS]
MALFORMED = "<tool_call>{not json</tool_call>"  # an action that neither answers nor ends a user's turn


def skip_without_browser(env_id: str) -> None:
    """Web-v0 builds a browser with the env: skipped, with the reason, where none can run."""
    if env_id == "agent_gym/Web-v0":
        from agent_gym.envs.web.browser import browser_unavailable_reason

        reason = browser_unavailable_reason()
        if reason is not None:
            pytest.skip(f"Web-v0: {reason}")


def env_class(env_id: str) -> type[AgentEnv]:
    cls = gym.envs.registration.load_env_creator(gym.spec(env_id).entry_point)
    assert issubclass(cls, AgentEnv)
    return cls


def wrappers(env: gym.Env) -> list[type]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(type(env))
        env = env.env
    return found


def ping() -> str:
    """Answer pong."""
    return "pong"


@pytest.mark.parametrize("env_id", IDS)
def test_max_steps_is_the_one_step_limit(env_id):
    skip_without_browser(env_id)
    env = gym.make(env_id, max_steps=2)
    assert env.spec.max_episode_steps is None and gym.wrappers.TimeLimit not in wrappers(env)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(MALFORMED)
    assert not (terminated or truncated) and "status" not in info
    _, _, terminated, truncated, info = env.step(MALFORMED)
    assert truncated and not terminated
    assert (info["status"], info["end_reason"]) == (EpisodeStatus.MAX_STEPS, "max_steps")
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_tools_argument_is_honoured_or_refused_naming_the_alternative(env_id):
    skip_without_browser(env_id)
    cls = env_class(env_id)
    if cls.tools_not_accepted is None:
        env = gym.make(env_id, tools=[ping])
        _, info = env.reset(seed=0)
        assert list(env.unwrapped.tools) == ["ping"] and [t["function"]["name"] for t in info["tools"]] == ["ping"]
        env.close()
    else:
        with pytest.raises(ConfigError, match=f"tools: {cls.__name__} takes no tools= \\(") as caught:
            gym.make(env_id, tools=[ping])
        assert cls.tools_not_accepted in str(caught.value)


def test_the_envs_that_refuse_tools_say_what_to_pass_instead():
    refusing = {env_class(i).__name__: env_class(i).tools_not_accepted for i in IDS if env_class(i).tools_not_accepted}
    assert set(refusing) == {"TerminalEnv", "ConversationEnv", "SWEEnv", "WebEnv"}
    assert "sandbox_factory=" in refusing["TerminalEnv"] and "classes=" in refusing["ConversationEnv"]


@pytest.mark.parametrize("env_id", IDS)
def test_constructors_spell_out_every_keyword(env_id):
    params = inspect.signature(env_class(env_id)).parameters
    assert not [p for p in params.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    base = inspect.signature(AgentEnv).parameters
    assert set(base) <= set(params)
    for name, param in base.items():
        assert params[name].kind == param.kind, name
        if param.kind == param.KEYWORD_ONLY and name != "max_tool_output_chars":  # RAG derives its default
            assert params[name].annotation == param.annotation, name
    assert list(params)[:2] == ["tasks", "tools"]


@pytest.mark.parametrize("env_id", IDS)
def test_no_task_names_its_solution_reference(env_id):
    skip_without_browser(env_id)
    tasks = env_class(env_id)(max_steps=1).tasks if env_id != "agent_gym/Terminal-v0" else \
        gym.make(env_id).unwrapped.tasks
    assert not any("reference" in task for task in tasks)
    with_solution = [task for task in tasks if task.get("solution")]
    # RAG's oracle answers at once; Web-v0's oracles are scripted from the page's state (a page's refs and
    # problem exist only once it is loaded)
    assert with_solution or env_id in ("agent_gym/RAG-v0", "agent_gym/Web-v0")


class _SharedObsEnv(gym.Env):
    """Returns the same info dict from reset and step; reset fails on request."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if options and options.get("fail"):
            raise ValueError("bad option")
        return 0, self.info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return 0, 0.0, False, False, self.info


def test_checker_checks_the_first_reset_that_returns():
    env = PassiveEnvChecker(_SharedObsEnv())
    with pytest.raises(ValueError, match="bad option"):
        env.reset(options={"fail": True})
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="infos returned by `reset` and the following `step` share an object"):
        env.step(0)  # compared with the reset that returned (Gymnasium's own checker raises TypeError here)
    assert env.checked_reset and env.checked_step


@pytest.mark.parametrize("env_id", IDS)
def test_a_gym_make_env_steps_after_a_first_reset_that_raised(env_id):
    skip_without_browser(env_id)
    env = gym.make(env_id)
    assert wrappers(env)[0] is PassiveEnvChecker and gym.wrappers.PassiveEnvChecker not in wrappers(env)[1:]
    with pytest.raises(ValueError, match="task_index"):
        env.reset(options={"task_index": 10**6})
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.step(env.unwrapped.oracle_action())
    env.close()
    again = gym.make(env.spec)  # the spec rebuilds the same wrappers
    assert wrappers(again) == wrappers(env)
    again.close()
