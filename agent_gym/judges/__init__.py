"""Rewards beyond rules: rubrics, LLM judges, and judge failures that never become training signal.

* :class:`Rubric` with :class:`RuleCriterion`, :class:`JudgeCriterion` and :class:`RankingCriterion`:
  weighted criteria, outcome (``res_reward``) and shaping kept apart (:mod:`agent_gym.judges.rubric`).
* :class:`LLMJudge`: pointwise, pairwise and group-ranking verdicts from an OpenAI-compatible server
  through the policy client (retries, timeouts, affinity), read strictly, cached by content, every call
  recorded token-exact (:mod:`agent_gym.judges.llm`, :mod:`agent_gym.judges.verdicts`).
* :class:`RubricGrading`: a wrapper scoring any env's episodes with a rubric as they end.
* :func:`judge_trajectories`: score collected episodes; a judge that fails makes the episode
  ``JUDGE_ERROR`` (masked by every trainer adapter and exporter), never a zero reward.

See ``docs/judges.md``.
"""

from __future__ import annotations

from agent_gym.judges.apply import JudgingReport, ajudge_trajectories, judge_records, judge_trajectories
from agent_gym.judges.cache import VerdictCache, content_key
from agent_gym.judges.env_grading import RubricGrading
from agent_gym.judges.llm import JUDGE_ROLE, JudgeCall, JudgeLog, LLMJudge, PairVerdict, RankVerdict
from agent_gym.judges.rubric import (
    Criterion,
    JudgeCriterion,
    JudgedEpisode,
    RankingCriterion,
    Rubric,
    RubricScore,
    RuleCriterion,
)
from agent_gym.judges.templates import JudgeTemplates
from agent_gym.judges.verdicts import DEFAULT_SCALE, parse_preference, parse_score, parse_scores

__all__ = [
    "DEFAULT_SCALE",
    "JUDGE_ROLE",
    "Criterion",
    "JudgeCall",
    "JudgeCriterion",
    "JudgeLog",
    "JudgeTemplates",
    "JudgedEpisode",
    "JudgingReport",
    "LLMJudge",
    "PairVerdict",
    "RankVerdict",
    "RankingCriterion",
    "Rubric",
    "RubricGrading",
    "RubricScore",
    "RuleCriterion",
    "VerdictCache",
    "ajudge_trajectories",
    "content_key",
    "judge_records",
    "judge_trajectories",
    "parse_preference",
    "parse_score",
    "parse_scores",
]
