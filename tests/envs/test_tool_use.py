from __future__ import annotations

import pickle
import re
import warnings

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym  # noqa: F401
from agent_gym.envs.tool_use import (
    BUILTIN_TOOLS,
    ToolUseEnv,
    builtin_tasks,
    calculator,
    convert_units,
    date_add,
    date_diff,
    generate_tasks,
    lookup_item,
    weekday,
)
from agent_gym.envs.tool_use.builtin_tools import inventory
from agent_gym.grading import answer_matches
from agent_gym.types import EpisodeStatus, PolicyOutput

ENV_ID = "agent_gym/ToolUse-v0"


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: The text.
    """
    return text.upper()


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = gym.make(ENV_ID)
    yield e.unwrapped
    e.close()


def test_builtin_tasks_are_many_distinct_and_complete():
    tasks = builtin_tasks()
    assert len(tasks) >= 400
    assert len({t["id"] for t in tasks}) == len(tasks)
    assert len({t["question"] for t in tasks}) == len(tasks)
    assert {t["family"] for t in tasks} == {"arithmetic", "units", "dates", "lookup"}
    for task in tasks:
        assert task["ground_truth"] and task["solution"] and task["answer_type"] in ("number", "date", "weekday",
                                                                                      "string")
    assert builtin_tasks() == tasks  # deterministic
    assert generate_tasks(per_family=5, seed=1) != generate_tasks(per_family=5, seed=2)
    with pytest.raises(ValueError):
        generate_tasks(per_family=0)


def test_every_builtin_task_is_solved_by_its_oracle(env):
    assert len(env.tasks) >= 400
    for task in env.tasks:
        env.reset(seed=0, options={"task": task})
        total, steps = 0.0, 0
        while True:
            obs, reward, terminated, truncated, info = env.step(env.oracle_action())
            total += reward
            steps += 1
            assert "error" not in info, (task["id"], info["error"])
            if terminated or truncated:
                break
        n_calls = len(task["solution"])
        assert terminated and info["status"] is EpisodeStatus.ENV_DONE, task["id"]
        assert info["res_reward"] == 1.0, (task["id"], obs[-1])
        # max reward: the correct answer plus the episode's bonus (one useful step's worth, however many calls)
        assert total == pytest.approx(1.0 + 0.1 * min(n_calls, 1)), task["id"]
        assert steps == n_calls + 1


def test_random_text_earns_no_res_reward(env):
    env.action_space.seed(0)
    for i in range(200):
        env.reset(seed=i)
        for _ in range(3):
            *_, terminated, truncated, info = env.step(env.action_space.sample())
            assert info["res_reward"] == 0.0
            if terminated or truncated:
                break
    for i, task in enumerate(env.tasks[::7]):
        env.reset(options={"task": task})
        *_, info = env.step(f"<answer>zq{i}x</answer>")
        assert info["res_reward"] == 0.0


def test_wrong_numbers_earn_nothing(env):
    task = next(t for t in env.tasks if t["answer_type"] == "number")
    env.reset(options={"task": task})
    *_, info = env.step(f"<answer>{float(task['ground_truth']) + 1}</answer>")
    assert info["res_reward"] == 0.0


def test_answer_matching_rules():
    assert answer_matches("1,234.5", "1234.5", "number", 0.01)
    assert answer_matches("The total is 12.004 kg", "12", "number", 0.01)
    assert not answer_matches("12.02", "12", "number", 0.01)
    assert not answer_matches("none", "12", "number", 0.01)
    assert answer_matches("March 5, 2024", "2024-03-05", "date")
    assert answer_matches("It is 2024-03-05.", "2024-03-05", "date")
    assert not answer_matches("2024-03-06", "2024-03-05", "date")
    assert answer_matches("It was a Tuesday", "Tuesday", "weekday")
    assert not answer_matches("Monday or Tuesday", "Tuesday", "weekday")
    assert answer_matches("  tamsin works. ", "Tamsin Works", "string")
    assert answer_matches("42", 42)  # inferred numeric
    assert answer_matches("2020-01-01", "2020-01-01")  # inferred date


@pytest.mark.parametrize(("answer", "expected", "correct"), [
    # a difference equal to the tolerance is inside, both ways round, whatever float subtraction says
    ("263.46", "263.47", True), ("263.48", "263.47", True), ("159.60", "159.59", True), ("159.59", "159.60", True),
    ("The total is $263.46.", 263.47, True), ("159.60", 159.59, True), ("1,000.01", "1000", True),
    # just outside
    ("263.459", "263.47", False), ("263.4801", "263.47", False), ("159.5799", "159.59", False),
    ("159.6001", "159.59", False), ("1,000.0101", "1000", False), ("-0.0101", "0", False),
])
def test_numeric_tolerance_is_decided_on_the_decimals_written(answer, expected, correct):
    assert answer_matches(answer, expected, "number", 0.01) is correct
    assert answer_matches(answer, expected, "number", "0.01") is correct  # the tolerance as text: the same


def test_one_cent_off_is_inside_at_every_amount_float_subtraction_would_split():
    # what the old float comparison did: one cent off accepted for one pair, rejected for the other
    assert (abs(263.46 - 263.47) <= 0.01) != (abs(159.60 - 159.59) <= 0.01)
    cents = range(0, 1_000_000, 37)  # 0.00 .. 9999.99 in uneven steps (below 10000, 1e-6 relative < 0.01)
    for c in cents:
        truth = f"{c // 100}.{c % 100:02d}"
        for off, inside in ((1, True), (-1, True)):
            got = c + off
            if got < 0:
                continue
            text = f"{got // 100}.{got % 100:02d}"
            assert answer_matches(text, truth, "number", 0.01) is inside, (text, truth)
            assert answer_matches(text + "1", truth, "number", 0.01) is (off < 0), (text + "1", truth)


def test_relative_tolerance_boundary_is_exact_too():
    assert answer_matches("1000001", "1000000", "number", 0)  # 1e-6 of the expected value
    assert not answer_matches("1000001.01", "1000000", "number", 0)
    assert not answer_matches("999998.99", "1000000", "number", 0)


def test_env_scores_the_boundary_answer_as_correct():
    task = {"id": "cents", "question": "q", "ground_truth": "263.47", "answer_type": "number", "tolerance": 0.01}
    env = ToolUseEnv(tasks=[task])
    for answer, reward in (("263.46", 1.0), ("263.48", 1.0), ("263.459", 0.0), ("263.4801", 0.0)):
        env.reset(seed=0)
        *_, info = env.step(f"<answer>{answer}</answer>")
        assert info["res_reward"] == reward, answer


def test_builtin_tools():
    assert calculator("(12.5 + 3) * 4 / 7") == "8.85714285714"
    assert calculator("2 ** 10 - 24") == "1000"
    assert calculator("-2**2") == "-4" and calculator("sqrt(16) + max(1, 2)") == "6"
    for bad, fragment in [("1/0", "division by zero"), ("9**9**9", "exponent"), ("__import__('os')", "unexpected"),
                          ("2^3", "use **"), ("(1", "expected ')'"), ("x" * 2000, "too long"), ("", "empty"),
                          ("(" * 200 + "1" + ")" * 200, "nested"), ("10**400", "too large")]:
        with pytest.raises(ValueError, match=re.escape(fragment)):
            calculator(bad)
    assert convert_units(1, "mi", "km") == "1.609344"
    assert convert_units(212, "fahrenheit", "c") == "100"
    assert convert_units(2, "pounds", "kg") == "0.90718474"
    with pytest.raises(ValueError, match="cannot convert"):
        convert_units(1, "kg", "km")
    with pytest.raises(ValueError, match="unknown unit"):
        convert_units(1, "parsec", "km")
    assert date_add("2024-02-28", 2) == "2024-03-01" and date_diff("2024-01-01", "2024-12-31") == 365
    assert weekday("2024-03-05") == "Tuesday"
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        date_add("5 March", 1)
    item = sorted(inventory())[0]
    assert lookup_item(item.upper(), "stock").isdigit()
    assert item in lookup_item(item)
    with pytest.raises(ValueError, match="no item"):
        lookup_item("Nonexistent widget")


def test_env_turns_tool_errors_into_observations(env):
    env.reset(seed=0)
    obs, reward, *_, info = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}'
                                     "</tool_call>")
    assert "division by zero" in info["error"] and obs[-1]["role"] == "tool" and reward < 0


def test_user_tasks_and_tools_through_make():
    tasks = [{"id": "u1", "question": "Shout 'hi'.", "ground_truth": "HI",
              "solution": [[{"name": "shout", "arguments": {"text": "hi"}}]]}]
    env = gym.make(ENV_ID, tasks=tasks, tools=[shout, *BUILTIN_TOOLS[:1]])
    obs, info = env.reset(seed=0)
    assert info["task"]["id"] == "u1"
    assert [s["function"]["name"] for s in info["tools"]] == ["shout", "calculator"]
    obs, reward, *_ = env.step(env.unwrapped.oracle_action())
    assert obs[-1] == {"role": "tool", "content": "HI"}
    *_, terminated, _, info = env.step(env.unwrapped.oracle_action())
    assert terminated and info["res_reward"] == 1.0
    assert pickle.loads(pickle.dumps(env)).unwrapped.tasks == env.unwrapped.tasks


def test_user_task_validation():
    with pytest.raises(ValueError, match="answer_type"):
        ToolUseEnv(tasks=[{"id": 1, "question": "q", "ground_truth": "a", "answer_type": "color"}])
    with pytest.raises(ValueError, match="numeric"):
        ToolUseEnv(tasks=[{"id": 1, "question": "q", "ground_truth": "abc", "answer_type": "number"}])


@pytest.mark.parametrize(
    ("task", "fragment"),
    [
        ({"id": 1, "question": "q", "ground_truth": "a", "answer_type": "color"}, "'answer_type' among"),
        ({"id": 1, "question": "q", "ground_truth": "abc", "answer_type": "number"}, "numeric 'ground_truth'"),
        ({"id": 1, "question": "q"}, "missing ['ground_truth']"),
    ],
)
def test_task_option_goes_through_the_env_checks(task, fragment):
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r'^options\["task"\]: expected') as info:
        env.reset(options={"task": task})
    assert fragment in str(info.value)
    good = {"id": 1, "question": "What is 2 + 2?", "ground_truth": "4", "answer_type": "number"}
    _, info = env.reset(options={"task": good})
    assert info["task"] == good
    *_, info = env.step("<answer>4.0</answer>")
    assert info["res_reward"] == 1.0


def test_tools_in_prompt(env):
    e = gym.make(ENV_ID, tools_in_prompt=True)
    obs, info = e.reset(seed=0)
    assert info["tools"] == []
    for name in ("calculator", "convert_units", "lookup_item"):
        assert obs[0]["content"].count(f"## {name}") == 1
    obs, info = env.reset(seed=0)
    assert "## calculator" not in obs[0]["content"] and len(info["tools"]) == 6


def test_policy_output_length_truncates(env):
    env.reset(seed=0)
    *_, terminated, truncated, info = env.step(PolicyOutput(text="<think>long", finish_reason="length"))
    assert truncated and info["status"] == EpisodeStatus.TRUNCATION


def test_registered_time_limit_matches_max_steps():
    e = gym.make(ENV_ID)
    e.reset(seed=0)
    for _ in range(10):
        *_, terminated, truncated, info = e.step("no action")
        if truncated:
            break
    assert truncated and info["status"] == EpisodeStatus.MAX_STEPS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200), st.sampled_from(["calculator", "convert_units", "date_add", "lookup_item", "x"]))
def test_step_never_raises_on_arbitrary_tool_arguments(env, text, name):
    import json

    env.reset(seed=1)
    for action in (text, "<tool_call>" + json.dumps({"name": name, "arguments": {"expression": text, "date": text,
                                                                                   "days": text, "item": text}})
                   + "</tool_call>", f"<answer>{text}</answer>"):
        *_, terminated, truncated, info = env.step(action)
        assert isinstance(info["tool_calls"], list)
        if terminated or truncated:
            env.reset(seed=1)
