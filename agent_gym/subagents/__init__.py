"""Subagents and multi-agent episodes: other agents' turns as segments of one rollout.

:class:`DelegateWrapper` gives any :class:`~agent_gym.env.core.AgentEnv` an opt-in
``delegate(task)`` tool that runs a sub-episode (:func:`run_subagent`) with its own
system prompt, tools and policy; the sub-episode's segments join the parent's
trajectory with their lineage (``role``, ``parent_segment``, ``spawn_step``) under the
parent's ``rollout_id``. :class:`SolverJudgeEnv` is a multi-agent episode: solvers
answer a ToolUse-v0 task, a judge picks one. See ``docs/subagents.md``.
"""

from agent_gym.subagents.delegate import DelegateTool, DelegateWrapper
from agent_gym.subagents.runner import SubagentEnv, SubagentRun, SubagentRunner, SubagentSpec, run_subagent
from agent_gym.subagents.solver_judge import SolverJudgeEnv

__all__ = [
    "DelegateTool",
    "DelegateWrapper",
    "SolverJudgeEnv",
    "SubagentEnv",
    "SubagentRun",
    "SubagentRunner",
    "SubagentSpec",
    "run_subagent",
]
