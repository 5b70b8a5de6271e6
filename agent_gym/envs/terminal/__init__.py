"""``agent_gym/Terminal-v0``: tasks done in a sandboxed shell and graded by their tests.

The shipped tasks live in ``tasks/`` in the Terminal-Bench layout; :func:`load_task`
also reads the Harbor layout. See :class:`TerminalEnv`.
"""

from agent_gym.envs.terminal.env import TerminalEnv
from agent_gym.envs.terminal.loader import BUILTIN_TASK_DIR, builtin_tasks, find_task_dirs, load_task
from agent_gym.envs.terminal.sandboxes import BACKENDS, select_backend

__all__ = [
    "BACKENDS",
    "BUILTIN_TASK_DIR",
    "TerminalEnv",
    "builtin_tasks",
    "find_task_dirs",
    "load_task",
    "select_backend",
]
