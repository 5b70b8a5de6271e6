"""``SolverJudgeEnv``: a multi-agent episode on ToolUse-v0 tasks, solvers answer and a judge picks.

At ``reset`` each of ``n_solvers`` solver agents runs a ToolUse-v0 episode on the task
(:func:`~agent_gym.subagents.runner.run_subagent`, role ``"solver"``, its reward whether
its answer is correct). The judge (the agent the rollout drives, role ``"judge"``) then
sees the question and the candidates and answers with a candidate's number; it is
rewarded when the candidate it picks is correct. Every role's turns are its own
segments of the one rollout, with the role's reward on them (``role_reward``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_gym.checks import check_int
from agent_gym.env.grade import Grade
from agent_gym.envs.tool_use.builtin_tools import BUILTIN_TOOLS
from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.subagents.runner import SubagentSpec, run_subagent
from agent_gym.types import EpisodeStatus, Segment

__all__ = ["SolverJudgeEnv"]

JUDGE_PROMPT = (
    "You are a judge. Several solvers answered the question below. Decide which candidate answer is correct "
    "and reply with its number only, inside <answer>...</answer>."
)


class SolverJudgeEnv(ToolUseEnv):
    """Solvers answer a ToolUse-v0 task, a judge picks one (see the module docs).

    Args:
        policy: The solvers' policy (the judge's is the one the rollout drives; pass the same
            object for a shared policy).
        n_solvers: Solver agents per episode.
        solver_max_steps: Assistant messages per solver episode.
        solver_timeout: Seconds a solver episode may take.
        **kwargs: :class:`~agent_gym.envs.tool_use.env.ToolUseEnv` arguments (``tasks``, ``max_steps``...);
            the judge has no tools.

    Attributes:
        agent_role: ``"judge"`` (the role of the episode's own segments).
        candidates: This episode's solver answers (None for a solver that gave none).
        solver_scores: Whether each candidate is correct (1.0 or 0.0).
    """

    agent_role = "judge"
    default_system_prompt = JUDGE_PROMPT

    def __init__(self, policy: Any, *, n_solvers: int = 2, solver_max_steps: int = 4, solver_timeout: float = 120.0,
                 **kwargs: Any) -> None:
        check_int("n_solvers", n_solvers, low=1)
        kwargs.setdefault("max_steps", 1)
        super().__init__(tools=[], **kwargs)
        self.policy = policy
        self.n_solvers = n_solvers
        self.solver = SubagentSpec(role="solver", system_prompt=ToolUseEnv.default_system_prompt,
                                   tools=list(BUILTIN_TOOLS), max_steps=solver_max_steps, timeout=solver_timeout)
        self.candidates: list[str | None] = []
        self.solver_scores: list[float] = []
        self._solver_segments: list[list[Segment]] = []

    def episode_tools(self, task: dict[str, Any]) -> None:
        """Run the solvers on ``task`` (the judge's own tools stay none)."""
        self.candidates, self.solver_scores, self._solver_segments = [], [], []
        for i in range(self.n_solvers):
            run = run_subagent(self.solver, self.policy, str(task["question"]), f"{self.episode_id}/solver-{i}")
            score = ToolUseEnv.score_answer(self, task, run.answer) if run.answer is not None else 0.0
            self.candidates.append(run.answer)
            self.solver_scores.append(score)
            self._solver_segments.append([dataclasses.replace(s, role_reward=score) for s in run.segments])
        return None

    def format_question(self, task: Mapping[str, Any]) -> str:
        """The question and the numbered candidates."""
        lines = [f"Question: {task['question']}", "", "Candidates:"]
        for i, answer in enumerate(self.candidates, start=1):
            lines.append(f"{i}. {answer if answer is not None else '(no answer)'}")
        return "\n".join(lines)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Run the solvers and pose the judge's question; the solvers' segments go to ``info["agent_segments"]``."""
        obs, info = super().reset(seed=seed, options=options)
        info["agent_segments"] = [{"segments": segments, "spawned": False} for segments in self._solver_segments]
        info["solver_scores"] = list(self.solver_scores)
        return obs, info

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """1.0 when the judge picks a correct candidate, else 0.0."""
        try:
            pick = int(answer.strip().rstrip("."))
        except ValueError:
            return 0.0
        return self.solver_scores[pick - 1] if 1 <= pick <= len(self.solver_scores) else 0.0

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """No end grade; the judge's reward (its pick's score) goes to ``info["role_rewards"]["judge"]``."""
        info["role_rewards"] = {"judge": float(info["res_reward"])}
        return Grade.ungraded()
