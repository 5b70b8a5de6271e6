"""RubricGrading: an env's episodes scored by a rubric with an LLM judge as they end, through collect."""

from __future__ import annotations

import gymnasium as gym
import pytest
from judge_faults import ScriptedJudge, number_rule

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.integrations.contract import training_segments
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric, RuleCriterion
from agent_gym.judges.env_grading import RubricGrading
from agent_gym.rollout import collect


class _Answering:
    """Answers each question at once: the truth, except "-1" for the questions in ``wrong``."""

    def __init__(self, tasks, wrong):
        self.answers = {t["question"]: "-1" if t["question"] in wrong else str(t["ground_truth"]) for t in tasks}

    def act(self, messages, *, session_id, tools=None):
        question = next(m["content"] for m in messages if m["role"] == "user")
        return f"<answer>{self.answers[question]}</answer>"

    def close_session(self, session_id):
        """Nothing kept."""


def test_collected_episodes_are_judged_and_a_failed_judge_is_a_masked_judge_error():
    tasks = [t for t in gym.make("agent_gym/ToolUse-v0").unwrapped.tasks if t["family"] == "arithmetic"][:4]
    failing = str(tasks[2]["ground_truth"])  # the judge fails on this answer
    judge = LLMJudge(ScriptedJudge(number_rule, fail_answers=[failing]))
    rubric = Rubric([JudgeCriterion("judge", judge), RuleCriterion("short", lambda e: len(e.answer) < 12, 0.1,
                                                                   outcome=False)])
    policy = _Answering(tasks, wrong={tasks[3]["question"]})
    episodes = collect(lambda: RubricGrading(gym.make("agent_gym/ToolUse-v0"), rubric), policy, tasks=tasks,
                       progress=False)
    assert [e.status for e in episodes] == ["ENV_DONE", "ENV_DONE", "JUDGE_ERROR", "ENV_DONE"]
    assert [e.metrics["res_reward"] for e in episodes[:2]] == [1.0, 1.0] and episodes[3].metrics["res_reward"] == 0.0
    assert episodes[0].trajectory_reward == pytest.approx(1.1)  # outcome + 0.1 shaping
    assert episodes[0].steps[-1].info["rubric"]["scores"] == {"judge": 1.0, "short": 1.0}
    failed = episodes[2]
    assert failed.steps[-1].info["end_reason"] == "judge_error" and "unparseable" in failed.steps[-1].info["error"]
    assert all(s.masked for s in training_segments(failed))
    with pytest.raises(TypeError, match="Rubric"):
        RubricGrading(gym.make("agent_gym/ToolUse-v0"), object())  # type: ignore[arg-type]
