"""An example env whose tools come from a third-party MCP server package: ``mcp-server-time``.

``mcp-server-time`` (``pip install mcp-server-time``; in the ``dev`` extra, not the ``mcp`` one,
as it needs ``mcp`` 2.3 or later) is the reference time server of the MCP
project, a Python stdio server that needs no network: ``get_current_time(timezone)`` and
``convert_time(source_timezone, time, target_timezone)``, answered with structured content. The
env's tasks ask for a wall-clock time converted between two time zones without daylight saving
time, so every task's answer is fixed (it does not depend on the date the episode runs)::

    from agent_gym.tools.mcp.time_env import time_conversion_env

    env = time_conversion_env()                      # 12 tasks; the server shared by every episode
    obs, info = env.reset(seed=0)                    # info["tools"]: get_current_time, convert_time

The server keeps no state, so its tools are ``scope="shared"`` by default (one server process for
every episode of the process); pass ``scope="episode", fork_server=True`` to give each episode its
own server process forked from a preloaded one (the server runs as ``python -m mcp_server_time``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from agent_gym.env.core import AgentEnv
from agent_gym.errors import AgentGymError
from agent_gym.tools.mcp.tools import MCPTools

__all__ = ["FIXED_OFFSET_ZONES", "time_conversion_env", "time_conversion_tasks", "time_server_command"]

FIXED_OFFSET_ZONES: dict[str, timedelta] = {
    "UTC": timedelta(0),
    "Asia/Tokyo": timedelta(hours=9),
    "Asia/Kolkata": timedelta(hours=5, minutes=30),
    "Asia/Kathmandu": timedelta(hours=5, minutes=45),
    "Asia/Shanghai": timedelta(hours=8),
    "Africa/Nairobi": timedelta(hours=3),
    "America/Bogota": timedelta(hours=-5),
    "Pacific/Honolulu": timedelta(hours=-10),
}
"""Time zones without daylight saving time, and their UTC offsets (a task's answer never changes)."""

_SYSTEM = ("You convert times between time zones with the tools you are given. Call convert_time, then answer "
           "with the converted time as HH:MM (24-hour clock) inside <answer></answer>.")


def time_server_command(local_timezone: str = "UTC") -> list[str]:
    """The stdio command of ``mcp-server-time`` under this interpreter (``python -m mcp_server_time``).

    Raises:
        AgentGymError: ``mcp-server-time`` is not installed (``pip install mcp-server-time``).
    """
    if importlib.util.find_spec("mcp_server_time") is None:
        raise AgentGymError("the example time env needs the MCP server package mcp-server-time: "
                            "pip install mcp-server-time (it requires mcp 2.3 or later)")
    return [sys.executable, "-m", "mcp_server_time", "--local-timezone", local_timezone]


def time_conversion_tasks(n: int = 12, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` tasks: a time in one fixed-offset zone to convert into another, with the answer as ``HH:MM``."""
    zones = sorted(FIXED_OFFSET_ZONES)
    tasks = []
    for i in range(n):
        source = zones[(seed + i) % len(zones)]
        target = zones[(seed + 3 * i + 1) % len(zones)]
        if target == source:
            target = zones[(zones.index(source) + 1) % len(zones)]
        hour, minute = (7 * i + seed) % 24, (15 * i + 5 * seed) % 60
        when = datetime(2000, 1, 1, hour, minute, tzinfo=timezone(FIXED_OFFSET_ZONES[source]))
        answer = when.astimezone(timezone(FIXED_OFFSET_ZONES[target])).strftime("%H:%M")
        tasks.append({"id": f"time-{seed}-{i}", "source_timezone": source, "time": f"{hour:02d}:{minute:02d}",
                      "target_timezone": target, "ground_truth": answer,
                      "question": f"It is {hour:02d}:{minute:02d} in {source}. What time is it in {target}?"})
    return tasks


def time_conversion_env(tasks: Sequence[dict[str, Any]] | None = None, *, max_steps: int = 4,
                        **mcp_options: Any) -> AgentEnv:
    """An ``AgentEnv`` over :func:`time_conversion_tasks` with the time server's tools.

    Args:
        tasks: The tasks (default: ``time_conversion_tasks()``).
        max_steps: Steps per episode.
        **mcp_options: Passed to :class:`~agent_gym.tools.mcp.MCPTools` (default ``scope="shared"``).
    """
    mcp_options.setdefault("scope", "shared")
    tools = MCPTools(time_server_command(), **mcp_options)
    return AgentEnv(tasks=list(tasks) if tasks is not None else time_conversion_tasks(), tools=tools,
                    max_steps=max_steps, system_prompt=_SYSTEM)
