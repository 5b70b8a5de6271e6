"""``agent_gym/Terminal-v0``: tasks done in a sandboxed shell and graded by their tests.

The shipped tasks live in ``tasks/`` in the Terminal-Bench layout; :func:`load_task`
also reads the Harbor layout. See :class:`TerminalEnv`.
"""

from agent_gym.envs.terminal.env import BACKENDS, TEST_ENV, TerminalEnv, parse_pytest_summary, select_backend
from agent_gym.envs.terminal.loader import BUILTIN_TASK_DIR, builtin_tasks, find_task_dirs, load_task, parse_dockerfile

__all__ = [
    "BACKENDS",
    "BUILTIN_TASK_DIR",
    "TEST_ENV",
    "TerminalEnv",
    "builtin_tasks",
    "find_task_dirs",
    "load_task",
    "parse_dockerfile",
    "parse_pytest_summary",
    "select_backend",
]
