"""``agent_gym/ToolUse-v0``: tasks that need a calculator, unit conversion, dates or a table lookup."""

from __future__ import annotations

from agent_gym.envs.tool_use.builtin_tools import (
    BUILTIN_TOOLS,
    calculator,
    convert_units,
    date_add,
    date_diff,
    lookup_item,
    weekday,
)
from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.envs.tool_use.tasks import builtin_tasks, generate_tasks

__all__ = [
    "BUILTIN_TOOLS",
    "ToolUseEnv",
    "builtin_tasks",
    "calculator",
    "convert_units",
    "date_add",
    "date_diff",
    "generate_tasks",
    "lookup_item",
    "weekday",
]
