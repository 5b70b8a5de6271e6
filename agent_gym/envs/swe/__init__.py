"""``agent_gym/SWE-v0``: repository repair tasks graded by hidden tests in a clean sandbox.

* :mod:`~agent_gym.envs.swe.env`: :class:`SWEEnv`, the environment.
* :mod:`~agent_gym.envs.swe.grading`: the patch applied to a clean base, the tests run, SWE-bench's rule.
* :mod:`~agent_gym.envs.swe.baseline`: the tests on the unpatched base, once per task (cannot grade vs wrong).
* :mod:`~agent_gym.envs.swe.policy`: what a patch may change (dropped, rejected, shadowing).
* :mod:`~agent_gym.envs.swe.runs` and :mod:`~agent_gym.envs.swe.scripts`: the work in the grading sandbox,
  pytest in a guarded process whose verdict the patch's code cannot write.
* :mod:`~agent_gym.envs.swe.editor`: the ``str_replace_editor`` tool.
* :mod:`~agent_gym.envs.swe.repo`: base repositories with one commit, packed for episodes.
* :mod:`~agent_gym.envs.swe.tasks`: SWE-bench / SWE-smith instances and the shipped tasks.
* :mod:`~agent_gym.envs.swe.mutate` and :mod:`~agent_gym.envs.swe.generate`: the bug generator.
"""

from __future__ import annotations

from agent_gym.envs.swe.env import SWEEnv

__all__ = ["SWEEnv"]
