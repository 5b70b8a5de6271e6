"""check_agent_env: a sound env passes every check; each kind of defect fails the check made for it."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.env.core import AgentEnv
from agent_gym.errors import AgentGymError, ConfigError, EnvCheckError
from agent_gym.utils import CheckResult, EnvCheckReport, check_agent_env
from agent_gym.utils.env_checker import CHECKS
from agent_gym.utils.env_probes import constructor_arguments, docstring_sections, first_difference, random_actions

FAST = {"episodes": 2, "seeds": (0, 1)}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def _tasks() -> list[dict]:
    return [
        {"id": f"add-{i}", "question": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1),
         "solution": [[{"name": "add", "arguments": {"a": i, "b": i + 1}}]]}
        for i in range(6)
    ]


class SumEnv(AgentEnv):
    """Add two numbers with a tool.

    ## Description
    Six additions; the ``add`` tool computes them.

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``).

    ## Observation Space
    The conversation so far.

    ## Rewards
    ``res_reward`` 1 for the right sum.

    ## Starting State
    A task drawn with the seeded RNG.

    ## Episode End
    An ``<answer>``, or ``max_steps`` messages.

    ## Arguments
    * ``tasks``: the additions (default: six).
    * ``tools``: the tools (default: ``add``).
    * ``max_steps`` and the rest: see ``AgentEnv``.

    ## Version History
    * v0: first version.
    """

    def __init__(self, tasks=None, tools=None, **kwargs) -> None:
        super().__init__(tasks, tools, **kwargs)

    def default_tasks(self):
        return _tasks()

    def default_tools(self):
        return [add]

    def score_answer(self, task, answer):
        return 1.0 if answer.strip() == task["ground_truth"] else 0.0


class UndocumentedEnv(SumEnv):
    """Add two numbers.

    ## Action Space
    Text.

    ## Observation Space
    Messages.

    ## Episode End

    ## Arguments
    * ``tasks``: the additions.
    """

    def __init__(self, tasks=None, tools=None, *, scale: int = 1, **kwargs) -> None:
        super().__init__(tasks, tools, **kwargs)


_COUNTER = itertools.count()


class UnseededEnv(SumEnv):
    """Numbers the questions with a process-wide counter (not from the seed)."""

    __doc__ = SumEnv.__doc__

    def format_question(self, task):
        return f"{task['question']} (question {next(_COUNTER)})"


class FragileEnv(SumEnv):
    """Raises on a huge message instead of answering with an error observation."""

    __doc__ = SumEnv.__doc__

    def step(self, action):
        text = action if isinstance(action, str) else action.text
        if len(text) > 100_000:
            raise ValueError("message too long")
        return super().step(action)


class GenerousEnv(SumEnv):
    """Scores every answer as correct."""

    __doc__ = SumEnv.__doc__

    def score_answer(self, task, answer):
        return 1.0


class WrongOracleEnv(SumEnv):
    """The oracle answers one more than the sum."""

    __doc__ = SumEnv.__doc__

    def oracle_answer(self, task):
        return str(int(task["ground_truth"]) + 1)


class BrokenSolutionEnv(SumEnv):
    """The reference solutions leave out an argument of the tool."""

    __doc__ = SumEnv.__doc__

    def default_tasks(self):
        tasks = _tasks()
        for task in tasks:
            del task["solution"][0][0]["arguments"]["b"]
        return tasks


class CloseOnceEnv(SumEnv):
    """Raises on a second close()."""

    __doc__ = SumEnv.__doc__

    def __init__(self, tasks=None, tools=None, **kwargs) -> None:
        super().__init__(tasks, tools, **kwargs)
        self.resource = object()

    def close(self):
        if self.resource is None:
            raise RuntimeError("already closed")
        self.resource = None
        super().close()


class LockedEnv(SumEnv):
    """Keeps a lock, which does not pickle."""

    __doc__ = SumEnv.__doc__

    def __init__(self, tasks=None, tools=None, **kwargs) -> None:
        super().__init__(tasks, tools, **kwargs)
        self.lock = threading.Lock()


@pytest.fixture
def register() -> Iterator:
    ids = []

    def register_class(cls: type) -> str:
        env_id = f"agent_gym_checker_test/{cls.__name__}-v0"
        gym.register(id=env_id, entry_point=cls, max_episode_steps=10)
        ids.append(env_id)
        return env_id

    yield register_class
    for env_id in ids:
        gym.registry.pop(env_id, None)


def _failed(report: EnvCheckReport) -> dict[str, str]:
    return {r.name: r.detail for r in report.failures}


def test_a_sound_env_passes_every_check(register):
    report = check_agent_env(register(SumEnv), **FAST)
    assert report.ok, report.format()
    assert [r.name for r in report.results] == list(CHECKS)
    assert all(isinstance(r, CheckResult) and r.status == "passed" for r in report.results)
    text = str(report)
    assert "8/8 checks passed" in text and "FAIL" not in text
    assert "2 seeded tasks solved" in text


def test_an_env_instance_without_a_spec_is_checked_too():
    env = SumEnv()
    report = check_agent_env(env, **FAST)
    assert report.ok, report.format()
    assert report.env == "SumEnv"
    assert "render modes not checked" in next(r.detail for r in report.results if r.name == "gymnasium")
    env.reset(seed=0)  # the checker does not close an env it did not make


@pytest.mark.parametrize(
    "cls, check, words",
    [
        (UndocumentedEnv, "docstring", ["lacks the section(s) Rewards", "are empty", "Episode End",
                                        "does not mention the constructor argument(s) tools, scale"]),
        (UnseededEnv, "seeding", ["two reset(seed=0) calls differ at (obs, info)", "self.np_random"]),
        (FragileEnv, "random_actions", ["a 200,000-character message", "ValueError: message too long",
                                        "test_env_checker.py", "model output must never raise"]),
        (GenerousEnv, "random_actions", ["earned res_reward 1", "the outcome reward must need a correct answer"]),
        (WrongOracleEnv, "oracle", ["earned res_reward 0, not the full 1", "task 'add-"]),
        (BrokenSolutionEnv, "oracle", ["step 0: the oracle's message", "caused the error", "reference solution"]),
        (CloseOnceEnv, "close", ["a second close() before reset raised RuntimeError: already closed",
                                 "idempotent"]),
        (LockedEnv, "pickle", ["pickling the env before reset raised TypeError", "__getstate__"]),
    ],
)
def test_each_defect_fails_its_check_with_advice(register, cls, check, words):
    report = check_agent_env(register(cls), raise_on_failure=False, **FAST)
    failed = _failed(report)
    assert check in failed, report.format()
    for word in words:
        assert word in failed[check], failed[check]
    assert "docstring" not in failed or cls is UndocumentedEnv


def test_failures_raise_an_agent_gym_error_holding_the_report(register):
    with pytest.raises(EnvCheckError) as caught:
        check_agent_env(register(GenerousEnv), **FAST)
    error = caught.value
    assert isinstance(error, AgentGymError) and isinstance(error, AssertionError)
    assert str(error).startswith("agent_gym_checker_test/GenerousEnv-v0 failed 1 check(s):")
    assert "random_actions:" in str(error)
    assert not error.report.ok and [r.name for r in error.report.failures] == ["random_actions"]


def test_skipped_checks_are_reported_and_names_are_checked(register):
    env_id = register(GenerousEnv)
    report = check_agent_env(env_id, skip=["random_actions", "oracle"], **FAST)
    assert report.ok
    assert {r.name for r in report.results if r.status == "skipped"} == {"random_actions", "oracle"}
    assert "skip  oracle" in report.format()
    with pytest.raises(ConfigError, match="skip: expected names among docstring, gymnasium"):
        check_agent_env(env_id, skip=["orcale"])


def test_bad_arguments(register):
    env_id = register(SumEnv)
    with pytest.raises(ConfigError, match="seeds"):
        check_agent_env(env_id, seeds=())
    with pytest.raises(ConfigError, match="episodes"):
        check_agent_env(env_id, episodes=-1)
    with pytest.raises(TypeError, match="env_kwargs: only for an env id"):
        check_agent_env(SumEnv(), env_kwargs={"max_steps": 3})
    with pytest.raises(TypeError, match="env_or_id"):
        check_agent_env(3)


def test_env_kwargs_reach_gym_make(register):
    env_id = register(SumEnv)
    report = check_agent_env(env_id, env_kwargs={"tasks": _tasks()[:1]}, **FAST)
    assert report.ok, report.format()


def test_random_actions_cover_each_tool_and_policy_failures():
    import numpy as np

    schemas = SumEnv().tool_schemas
    actions = random_actions(np.random.default_rng(0), schemas)
    labels = [label for label, _, _ in actions]
    assert "add without arguments" in labels and "add with wrong argument types" in labels
    assert [str(status) for _, _, status in actions if status is not None] == [
        "TRUNCATION", "PROMPT_TRUNCATION", "POLICY_ERROR"]
    again = random_actions(np.random.default_rng(0), schemas)
    assert [a for _, a, _ in again] == [a for _, a, _ in actions]


def test_probe_helpers():
    sections = docstring_sections(SumEnv.__doc__)
    assert list(sections)[:2] == ["Description", "Action Space"]
    assert sections["Episode End"] == "An ``<answer>``, or ``max_steps`` messages."
    assert constructor_arguments(UndocumentedEnv) == ["tasks", "tools", "scale"]
    assert first_difference(({"a": [1, 2]},), ({"a": [1, 3]},), "obs") == "obs[0]['a'][1]: 2 != 3"
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "value['b']: present in only one of them"
    assert first_difference((1,), [1]) == "value: tuple != list"
    assert first_difference(float("nan"), float("nan")) is None


def test_the_checker_is_reachable_from_the_package():
    assert agent_gym.utils.check_agent_env is check_agent_env
