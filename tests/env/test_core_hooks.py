"""The step loop's public hooks of ``AgentEnv``: what a message does, the gate, the end, the grade, extra info."""

from __future__ import annotations

from typing import Any

import pytest

from agent_gym.env.core import AgentEnv
from agent_gym.env.grade import Grade
from agent_gym.errors import ConfigError
from agent_gym.parsers import ParsedResponse, ToolCall
from agent_gym.parsers.hermes import format_tool_call
from agent_gym.tools import ToolResult, skipped_call_result
from agent_gym.types import EpisodeStatus, PolicyOutput

TASKS = [{"id": "t", "question": "Count.", "ground_truth": "2"}]


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


class Counting(AgentEnv):
    """One ``tick`` tool; at most ``budget`` ticks per episode; ``stop`` ends the episode; graded at the end."""

    def __init__(self, budget: int = 2, grade: float | None = 0.5, **kwargs: Any) -> None:
        self.budget, self.grade, self.ticks = budget, grade, 0
        self.results: list[tuple[str, bool]] = []
        self.grades: list[tuple[EpisodeStatus, str]] = []
        super().__init__(TASKS, **kwargs)

    def default_tools(self) -> list[Any]:
        def tick() -> str:
            """Tick once."""
            self.ticks += 1
            return f"tick {self.ticks}"

        def stop() -> str:
            """Stop the episode."""
            return "stopping"

        return [tick, stop]

    def episode_tools(self, task: dict[str, Any]) -> None:
        self.ticks = 0
        return None

    def handle_message(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        if parsed.text == "done":
            self.add_message("user", "ok")
            self.end_episode(EpisodeStatus.ENV_DONE, "said_done")
            return
        super().handle_message(parsed, info)

    def gate_tool_call(self, call: ToolCall, index: int) -> ToolResult | None:
        refused = super().gate_tool_call(call, index)
        if refused is None and call.name == "tick" and self.ticks >= self.budget:
            refused = skipped_call_result(call.name, self.budget, per="episode")
        return refused

    def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        self.results.append((call.name, result.ok))
        if call.name == "stop":
            self.end_episode(EpisodeStatus.ENV_DONE, "stop")

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> float | None:
        self.grades.append((status, reason))
        info["graded"] = True
        return self.grade

    def episode_info(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "toolcall_reward": "never wins over the step's own key"}


def test_handle_message_gives_messages_another_meaning():
    env = Counting()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("done")
    assert terminated and not truncated and (info["status"], info["end_reason"]) == ("ENV_DONE", "said_done")
    assert obs[-1] == {"role": "user", "content": "ok"} and reward == info["res_reward"] == 0.5


def test_gate_refuses_calls_and_on_tool_result_sees_the_ones_that_ran():
    env = Counting(budget=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(call("tick") + call("tick") + call("tick"))
    assert [c["ok"] for c in info["tool_calls"]] == [True, True, False]
    assert info["tool_calls"][2]["kind"] == "too_many_calls"
    assert "at most 2 calls are run per episode" in info["tool_calls"][2]["error"]
    assert env.ticks == 2 and env.results == [("tick", True), ("tick", True)]


def test_end_episode_from_a_tool_result_refuses_the_calls_after_it():
    env = Counting(budget=5)
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(call("tick") + call("stop") + call("tick"))
    assert terminated and info["end_reason"] == "stop" and env.ticks == 1
    assert "skipped: the episode ended (stop) before it" in info["tool_calls"][2]["error"]
    assert obs[-1]["content"].startswith("Error: tool call 'tick' skipped")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("more")


@pytest.mark.parametrize(
    ("action", "status", "reason"),
    [("<answer>2</answer>", "ENV_DONE", "answer"), ("hm", "MAX_STEPS", "max_steps"),
     (PolicyOutput(text="cut", finish_reason="length"), "TRUNCATION", "policy_length")],
)
def test_grade_episode_runs_once_at_every_end(action, status, reason):
    env = Counting(grade=0.25, max_steps=1)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(action)
    assert env.grades == [(status, reason)] and info["graded"] and (terminated or truncated)
    answered = 1.0 if reason == "answer" else 0.0
    assert info["res_reward"] == pytest.approx(answered + 0.25)
    assert reward == info["toolcall_reward"] + info["res_reward"]
    assert env.last_reward_time >= 0.0


def test_a_grade_is_clamped_and_none_adds_nothing():
    for grade, expected in ((3.0, 1.0), (-1.0, 0.0), (None, 0.0)):
        env = Counting(grade=grade, max_steps=1)
        env.reset(seed=0)
        assert env.step("hm")[-1]["res_reward"] == expected


def test_no_grade_before_the_end():
    env = Counting(max_steps=3)
    env.reset(seed=0)
    _, _, _, _, info = env.step(call("tick"))
    assert env.grades == [] and "graded" not in info and "status" not in info and "end_reason" not in info


def test_episode_info_reaches_reset_and_every_step_without_overriding():
    env = Counting()
    _, info = env.reset(seed=0)
    assert info["ticks"] == 0 and info["toolcall_reward"] == "never wins over the step's own key"
    _, _, _, _, info = env.step(call("tick"))
    assert info["ticks"] == 1 and info["toolcall_reward"] == pytest.approx(0.1)


def test_end_episode_needs_an_episode_and_a_reason():
    env = Counting()
    with pytest.raises(RuntimeError, match="reset"):
        env.end_episode(EpisodeStatus.ENV_DONE, "x")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="reason"):
        env.end_episode(EpisodeStatus.ENV_DONE, "")
    with pytest.raises(ValueError):
        env.end_episode("NOT_A_STATUS", "x")  # type: ignore[arg-type]
    env.end_episode(EpisodeStatus.ENV_ERROR, "outside")  # between steps: the next step ends
    env.end_episode(EpisodeStatus.ENV_DONE, "later")  # the first request wins
    _, _, terminated, truncated, info = env.step(call("tick"))
    assert truncated and not terminated and (info["status"], info["end_reason"]) == ("ENV_ERROR", "outside")
    assert env.ticks == 0  # the call was refused


def test_public_episode_state():
    env = Counting(max_steps=2)
    assert (env.episode_id, env.step_count, env.episode_running) == ("", 0, False)
    _, info = env.reset(seed=0)
    assert env.episode_id == info["episode_id"] and env.episode_id.startswith("t-") and env.episode_running
    env.step(call("tick"))
    assert env.step_count == 1
    env.step(call("tick"))
    assert env.step_count == 2 and not env.episode_running
    with pytest.raises(ValueError, match="role"):
        env.add_message("narrator", "x")


def test_an_env_that_cannot_take_tools_refuses_them_by_name():
    class Fixed(AgentEnv):
        tools_not_accepted = "pass budget= instead"

    with pytest.raises(ConfigError, match=r"tools: Fixed takes no tools= \(pass budget= instead\), got list"):
        Fixed(TASKS, [lambda: 1])
    assert list(Fixed(TASKS).tools) == []


class GradedBy(AgentEnv):
    """Every end of an episode gets the grade given; no ``step`` override."""

    def __init__(self, grade: Grade | float | None, **kwargs: Any) -> None:
        self.grade = grade
        super().__init__(TASKS, **kwargs)

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade | float | None:
        info["graded"] = (status, reason)
        return self.grade


@pytest.mark.parametrize(
    ("action", "status", "reason", "answered"),
    [("<answer>2</answer>", "ENV_DONE", "answer", 1.0), ("hm", "MAX_STEPS", "max_steps", 0.0),
     (PolicyOutput(text="cut", finish_reason="length"), "TRUNCATION", "policy_length", 0.0)],
)
def test_an_infra_failure_grade_ends_the_episode_env_error_with_its_reason(action, status, reason, answered):
    assert "step" not in vars(GradedBy)
    env = GradedBy(Grade.infra_failure("grader_down"), max_steps=1)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(action)
    assert info["graded"] == (status, reason)  # graded as the episode ended, then the grade's status wins
    assert truncated and not terminated
    assert info["status"] is EpisodeStatus.ENV_ERROR and info["end_reason"] == "grader_down"
    assert info["res_reward"] == answered and reward == info["toolcall_reward"] + answered  # the grade adds nothing
    assert not env.episode_running
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("more")


def test_an_infra_failure_reaches_the_trajectory_as_env_error():
    from agent_gym.wrappers import TrajectoryWrapper

    env = TrajectoryWrapper(GradedBy(Grade.infra_failure("grader_down")))
    env.reset(seed=0)
    *_, info = env.step("<answer>2</answer>")
    assert info["trajectory"].status == EpisodeStatus.ENV_ERROR and info["end_reason"] == "grader_down"
    env.close()


@pytest.mark.parametrize(
    ("grade", "res_reward"),
    [(Grade.scored(0.5), 0.5), (0.5, 0.5), (Grade.scored(7.0), 1.0), (Grade.ungraded(), 0.0), (None, 0.0)],
)
def test_a_scored_or_ungraded_grade_keeps_the_status(grade, res_reward):
    env = GradedBy(grade, max_steps=1)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("hm")
    assert truncated and not terminated and (info["status"], info["end_reason"]) == ("MAX_STEPS", "max_steps")
    assert info["res_reward"] == res_reward


def test_a_grade_may_end_the_episode_with_another_status():
    env = GradedBy(Grade(status=EpisodeStatus.ENV_DONE), max_steps=1)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("hm")
    assert terminated and not truncated and (info["status"], info["end_reason"]) == ("ENV_DONE", "max_steps")


def test_a_grade_of_another_type_raises():
    env = GradedBy("0.5", max_steps=1)  # type: ignore[arg-type]
    env.reset(seed=0)
    with pytest.raises(TypeError, match="grade_episode: expected a Grade, a float or None, got str"):
        env.step("hm")
