"""Shaping cannot be farmed: on every env a policy that makes a new successful call every step and never
solves returns less than the oracle, and the same whatever ``max_steps``; shaping and outcome stay apart.

Also the per-episode budget of :class:`~agent_gym.env.rewards.RewardConfig` itself, and what the README and
docs say about rewards (the env docstrings' numbers, the return = outcome + shaping).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.env.core import AgentEnv
from agent_gym.env.rewards import RewardConfig, ShapingBudget
from agent_gym.errors import ConfigError
from agent_gym.sandbox import bwrap_available
from agent_gym.types import EpisodeStatus, StepTrajectory
from agent_gym.wrappers import TrajectoryWrapper

LENGTHS = (12, 36)
"""Two ``max_steps``: the farmer's return must not grow from the first to the second."""

DEFAULTS = RewardConfig()
BONUS_CAP: float = DEFAULTS.bonus_cap or 0.0  # resolved: tool_success
needs_bwrap = pytest.mark.skipif(bwrap_available() is None,
                                 reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# ---------------------------------------------------------------- one env per family, its farmer's next call

def tool_use_env(max_steps: int) -> AgentEnv:
    from agent_gym.envs.tool_use import ToolUseEnv, builtin_tasks
    task = next(t for t in builtin_tasks() if t["family"] == "arithmetic")
    return ToolUseEnv(tasks=[task], max_steps=max_steps)


def rag_env(max_steps: int) -> AgentEnv:
    from agent_gym.envs.rag import RAGEnv, builtin_tasks
    task = next(t for t in builtin_tasks() if t["type"] == "two_hop")
    return RAGEnv(tasks=[task], max_steps=max_steps)


def terminal_env(max_steps: int) -> AgentEnv:
    from agent_gym.envs.terminal import TerminalEnv, builtin_tasks
    return TerminalEnv(tasks=[builtin_tasks()[0]], max_steps=max_steps)


def swe_env(max_steps: int) -> AgentEnv:
    from agent_gym.envs.swe import SWEEnv
    from agent_gym.envs.swe.tasks import shipped_tasks
    return SWEEnv(tasks=[shipped_tasks("train")[0]], max_steps=max_steps)


def conversation_env(max_steps: int) -> AgentEnv:
    from agent_gym.envs.conversation import ConversationEnv, builtin_tasks
    task = next(t for t in builtin_tasks() if t["id"] == "calendar-0000")
    # no per-turn call limit before max_steps: the farmer runs the whole episode
    return ConversationEnv(tasks=[task], max_steps=max_steps, max_tool_calls_per_turn=1000)


FARM_CALLS: dict[str, Callable[[int], str]] = {
    "ToolUse": lambda i: call("calculator", expression=f"{i} + 1"),
    "RAG": lambda i: call("search", query=f"river number {i}"),
    "Terminal": lambda i: call("bash", command=f"echo farm-{i}"),
    "SWE": lambda i: call("bash", command=f"echo farm-{i}"),
    "Conversation": lambda i: call("find_events", title=f"farm {i}"),
}
ENVS: dict[str, Callable[[int], AgentEnv]] = {
    "ToolUse": tool_use_env, "RAG": rag_env, "Terminal": terminal_env, "SWE": swe_env,
    "Conversation": conversation_env,
}
SANDBOXED = {"Terminal", "SWE"}


def play(env: AgentEnv, policy: Callable[[AgentEnv, int], str]) -> tuple[StepTrajectory, list[dict], float]:
    """One episode on the env's only task: the trajectory, every step's info and the summed step rewards."""
    wrapped = TrajectoryWrapper(env, gamma=1.0)
    wrapped.reset(seed=0)
    infos: list[dict] = []
    total, i = 0.0, 0
    while True:
        _, reward, terminated, truncated, info = wrapped.step(policy(env, i))
        infos.append(info)
        total += float(reward)
        i += 1
        if terminated or truncated:
            return info["trajectory"], infos, total


def check_records(trajectory: StepTrajectory, infos: list[dict], total: float) -> None:
    """Shaping and outcome apart in every record, and the return their sum."""
    shaping = sum(i["toolcall_reward"] for i in infos)
    outcome = sum(i["res_reward"] for i in infos)
    for step, info in zip(trajectory.steps, infos, strict=True):
        assert step.reward == pytest.approx(info["toolcall_reward"] + info["res_reward"])
        assert step.info["toolcall_reward"] == info["toolcall_reward"]
        assert step.info["res_reward"] == info["res_reward"]
    assert trajectory.metrics["toolcall_reward"] == pytest.approx(shaping)
    assert trajectory.metrics["res_reward"] == pytest.approx(outcome)
    assert trajectory.trajectory_reward == pytest.approx(total) == pytest.approx(shaping + outcome)
    assert trajectory.steps[0].mc_return == pytest.approx(total)
    assert -DEFAULTS.penalty_cap - 1e-9 <= shaping <= BONUS_CAP + 1e-9


RESULTS: dict[tuple[str, int], dict[str, float]] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_bwrap) if n in SANDBOXED else n for n in ENVS])
def test_a_call_farmer_returns_less_than_the_oracle_whatever_the_episode_length(name: str) -> None:
    farmer_returns = []
    for max_steps in LENGTHS:
        env = ENVS[name](max_steps)
        try:
            oracle, oracle_infos, oracle_total = play(env, lambda e, _: e.oracle_action())
            check_records(oracle, oracle_infos, oracle_total)
            assert oracle.metrics["res_reward"] == pytest.approx(DEFAULTS.correct), (name, oracle_infos[-1])

            farmer, farmer_infos, farmer_total = play(env, lambda _, i: FARM_CALLS[name](i))
            check_records(farmer, farmer_infos, farmer_total)
        finally:
            env.close()
        # the farmer really farmed: a new successful call every step, the whole episode, nothing solved
        assert len(farmer_infos) == max_steps, (name, farmer_infos[-1].get("end_reason"))
        for info in farmer_infos:
            assert [c["ok"] for c in info["tool_calls"]] == [True], (name, info["tool_calls"])
        assert farmer.metrics["res_reward"] == 0.0
        assert farmer.status in (EpisodeStatus.MAX_STEPS.value, EpisodeStatus.ENV_ERROR.value)
        # what it earned: the bonus budget once, however many calls
        assert farmer_total == pytest.approx(BONUS_CAP)
        assert farmer_total < oracle_total
        assert oracle_total >= DEFAULTS.correct - DEFAULTS.penalty_cap
        farmer_returns.append(farmer_total)
        RESULTS[(name, max_steps)] = {"farmer": farmer_total, "oracle": oracle_total,
                                      "farmer_raw": DEFAULTS.tool_success * max_steps}
    assert farmer_returns[0] == pytest.approx(farmer_returns[1])


def test_penalties_are_bounded_too_and_a_solver_with_errors_beats_every_non_solver() -> None:
    for max_steps in LENGTHS:
        env = tool_use_env(max_steps)
        env.reset(seed=0)
        rewards = [env.step("<tool_call>{oops}</tool_call>")[1] for _ in range(max_steps)]
        assert sum(rewards) == pytest.approx(-DEFAULTS.penalty_cap)  # the same at both lengths
        # errors first, then the reference solution: still above anything a non-solver can reach
        env.reset(seed=0)
        total, steps = 0.0, 0
        while steps < max_steps - 4:
            total += env.step("thinking aloud, no call")[1]
            steps += 1
        task = env.task
        assert task is not None
        for turn in task["solution"]:  # the reference calls (oracle_action counts from the first step)
            total += env.step("".join(call(c["name"], **c["arguments"]) for c in turn))[1]
        _, reward, terminated, _, info = env.step(f"<answer>{task['ground_truth']}</answer>")
        total += reward
        assert terminated and info["res_reward"] == DEFAULTS.correct
        assert total == pytest.approx(DEFAULTS.correct - DEFAULTS.penalty_cap + BONUS_CAP)
        assert total > BONUS_CAP


def test_the_bonus_is_paid_once_and_repeats_and_errors_follow_the_budget() -> None:
    env = tool_use_env(10)
    env.reset(seed=0)
    first = env.step(FARM_CALLS["ToolUse"](1))[4]
    assert first["toolcall_reward"] == pytest.approx(DEFAULTS.tool_success)  # the first useful step: the bonus
    assert env.step(FARM_CALLS["ToolUse"](2))[4]["toolcall_reward"] == 0.0  # a new call: the budget is spent
    assert env.step(FARM_CALLS["ToolUse"](2))[4]["toolcall_reward"] == 0.0  # a repeat
    assert env.step(call("nope"))[4]["toolcall_reward"] == pytest.approx(DEFAULTS.tool_error)  # errors still cost
    env.reset(seed=0)  # a new episode, a new budget
    assert env.step(FARM_CALLS["ToolUse"](1))[4]["toolcall_reward"] == pytest.approx(DEFAULTS.tool_success)


def test_a_larger_bonus_cap_pays_several_steps_up_to_the_cap() -> None:
    from agent_gym.envs.tool_use import ToolUseEnv
    env = ToolUseEnv(tasks=tool_use_env(1).tasks, max_steps=30, rewards={"bonus_cap": 0.25})
    env.reset(seed=0)
    paid = [env.step(FARM_CALLS["ToolUse"](i))[4]["toolcall_reward"] for i in range(29)]
    assert paid[:2] == pytest.approx([0.1, 0.1]) and paid[2] == pytest.approx(0.05) and set(paid[3:]) == {0.0}
    assert sum(paid) == pytest.approx(0.25)


def test_shaping_a_subclass_sets_goes_through_the_same_budget() -> None:
    class Generous(AgentEnv):
        def handle_message(self, parsed, info):
            super().handle_message(parsed, info)
            info["toolcall_reward"] += 5.0  # an env's own shaping: raw, like run_tool_calls'

    env = Generous(tasks=[{"id": "t", "question": "q", "ground_truth": "a"}], max_steps=50)
    env.reset(seed=0)
    total = sum(env.step("hm")[1] for _ in range(50))
    assert total == pytest.approx(BONUS_CAP)


def test_budget_rule() -> None:
    budget = ShapingBudget(RewardConfig())
    assert [budget.pay(r) for r in (0.1, 0.1, -0.1, -0.2, -0.1, 0.0)] == pytest.approx([0.1, 0, -0.1, -0.2, 0, 0])
    assert (budget.bonus, budget.penalty) == pytest.approx((0.1, -0.3))
    budget = RewardConfig(bonus_cap=0.3, correct=1.0).budget()
    assert sum(budget.pay(0.1) for _ in range(1000)) == pytest.approx(0.3)  # 0.1 + 0.1 + 0.1 fits whole
    with pytest.raises(ValueError, match="finite"):
        budget.pay(float("nan"))
    no_shaping = RewardConfig(bonus_cap=0.0, penalty_cap=0.0).budget()
    assert [no_shaping.pay(r) for r in (0.1, -0.1)] == [0.0, 0.0]


@pytest.mark.parametrize(("values", "error", "fragment"), [
    ({"correct": 0.35}, ConfigError, "bonus_cap \\+ penalty_cap < correct"),
    ({"bonus_cap": 0.8}, ConfigError, "bonus_cap \\+ penalty_cap < correct"),
    ({"tool_success": -0.1}, ConfigError, "tool_success"),
    ({"tool_error": 0.1}, ConfigError, "tool_error"),
    ({"no_action": 0.5}, ConfigError, "no_action"),
    ({"penalty_cap": -1}, ConfigError, "penalty_cap"),
    ({"correct": float("inf")}, ConfigError, "correct"),
    ({"bonus_cap": True}, TypeError, "bonus_cap"),
    ({"correct": "1"}, TypeError, "correct"),
])
def test_reward_config_refuses_shaping_that_could_outweigh_solving(values, error, fragment) -> None:
    with pytest.raises(error, match=fragment):
        RewardConfig.coerce(values)


def test_reward_config_defaults() -> None:
    assert RewardConfig() == RewardConfig.coerce({"bonus_cap": None}) == RewardConfig(bonus_cap=0.1)
    assert RewardConfig(tool_success=0.2).bonus_cap == 0.2  # one useful step's worth by default
    assert RewardConfig(correct=0.0, bonus_cap=0.0, penalty_cap=0.0).correct == 0.0  # no shaping at all: allowed
    assert BONUS_CAP + DEFAULTS.penalty_cap < DEFAULTS.correct


# ---------------------------------------------------------------- what the docs say

def test_writing_envs_page_states_the_rule_and_the_defaults() -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "writing_envs.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (-?[\d.]+|`tool_success`) \|", page, re.M))
    assert {k: v for k, v in rows.items() if k in {f for f in DEFAULTS.__dataclass_fields__}} == {
        "correct": f"{DEFAULTS.correct:g}", "tool_success": f"{DEFAULTS.tool_success:g}",
        "tool_error": f"{DEFAULTS.tool_error:g}", "no_action": f"{DEFAULTS.no_action:g}",
        "bonus_cap": "`tool_success`", "penalty_cap": f"{DEFAULTS.penalty_cap:g}",
    }
    assert "[-penalty_cap, bonus_cap]" in page and "bonus_cap + penalty_cap < correct" in page


def test_tool_use_docstring_numbers_are_the_defaults() -> None:
    from agent_gym.envs.tool_use import ToolUseEnv

    doc = " ".join((ToolUseEnv.__doc__ or "").split())
    assert f"bonuses up to {DEFAULTS.bonus_cap:g} and penalties down to -{DEFAULTS.penalty_cap:g} per episode" in doc
    assert f"+{DEFAULTS.tool_success:g} for a step with a successful, non-repeated call" in doc


def test_discounted_shaping_is_bounded_for_any_gamma() -> None:
    for gamma in (0.0, 0.5, 0.9, 1.0):
        env = TrajectoryWrapper(tool_use_env(36), gamma=gamma)
        env.reset(seed=0)
        i, done, info = 0, False, dict[str, Any]()
        while not done:
            action = FARM_CALLS["ToolUse"](i) if i % 3 else "<tool_call>{oops}</tool_call>"
            _, _, terminated, truncated, info = env.step(action)
            i, done = i + 1, terminated or truncated
        for step in info["trajectory"].steps:
            assert -DEFAULTS.penalty_cap - 1e-9 <= step.mc_return <= BONUS_CAP + 1e-9
