"""Envs with ``expect_reset`` that record what they were told and how they were reset, for the hint tests."""

from __future__ import annotations

import threading
from typing import Any

from rollout_fakes import ADD_TASKS, add, make_add_env

from agent_gym.env.core import AgentEnv
from agent_gym.tools import FunctionTool

__all__ = ["HintedEnv", "HintedEnvFactory", "count_hints"]


class HintedEnv(AgentEnv):
    """The add env with the hook: records each hint and each reset it got, in order."""

    def __init__(self) -> None:
        super().__init__(tasks=list(ADD_TASKS), tools=[FunctionTool(add, name="add", time_limit=None)], max_steps=4)
        self.events: list[tuple[str, Any, Any]] = []
        self.lock = threading.Lock()

    def expect_reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.events.append(("hint", seed, (options or {}).get("task")))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.events.append(("reset", seed, (options or {}).get("task")))
        return super().reset(seed=seed, options=options)


class HintedEnvFactory:
    """Builds :class:`HintedEnv` (or the plain add env) and keeps every env it built."""

    def __init__(self, hinted: bool) -> None:
        self.hinted = hinted
        self.built: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        env = HintedEnv() if self.hinted else make_add_env()
        with self.lock:
            self.built.append(env)
        return env


def count_hints(envs: HintedEnvFactory, *, reset_after_each: bool = False) -> tuple[int, int]:
    """``(told, right)``: the hints the built envs got, and those whose episode ran next on the env told.

    Args:
        envs: The factory whose envs are read.
        reset_after_each: Check that every hint came before a reset of its env (a hint is given when the
            env's episode starts, before that episode's reset).

    Raises:
        AssertionError: ``reset_after_each`` and a hint came after the last reset of its env.
    """
    told = right = 0
    for env in envs.built:
        events = env.events
        for i, (kind, seed, task) in enumerate(events):
            if kind == "hint":
                told += 1
                later = [e for e in events[i + 1:] if e[0] == "reset"]
                assert later or not reset_after_each, "a hint is given before the reset of the episode it follows"
                right += len(later) > 1 and later[1] == ("reset", seed, task)
    return told, right
