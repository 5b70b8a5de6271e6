"""The example env over the third-party ``mcp-server-time`` package, its server forked per episode."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

pytest.importorskip("mcp_server_time")

from agent_gym.rollout import collect  # noqa: E402
from agent_gym.tools.mcp import MCPTools  # noqa: E402
from agent_gym.tools.mcp.time_env import time_conversion_env, time_conversion_tasks, time_server_command  # noqa: E402
from agent_gym.types import EpisodeStatus  # noqa: E402

pytestmark = pytest.mark.timeout(300)

_QUESTION = re.compile(r"It is (\d\d:\d\d) in (\S+)\. What time is it in (\S+)\?")


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ConvertingPolicy:
    """Ask the server to convert the task's time, then answer with the converted HH:MM it returned."""

    def act(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        if not any(m["role"] == "assistant" for m in messages):
            time, source, target = _QUESTION.search(messages[1]["content"]).groups()  # type: ignore[union-attr]
            return _call("convert_time", source_timezone=source, time=time, target_timezone=target)
        converted = json.loads(messages[-1]["content"])["target"]["datetime"]  # e.g. 2026-01-01T18:30:00+09:00
        return f"<answer>{converted[11:16]}</answer>"

    async def aact(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        return self.act(messages, session_id=session_id, tools=tools)

    def close_session(self, session_id: str) -> None:
        pass


def test_episodes_convert_times_with_the_packaged_server_forked_per_episode_and_its_errors_are_observations():
    tasks = time_conversion_tasks(6)
    options = {"scope": "episode", "fork_server": True, "warm": 3}
    env = time_conversion_env(tasks, **options)
    pool = MCPTools(time_server_command(), **options).pool  # the env's: one pool per server and scope in a process
    try:
        _, info = env.reset(seed=0)
        assert [s["function"]["name"] for s in info["tools"]] == ["get_current_time", "convert_time"]
        obs, _, terminated, _, info = env.step(_call("convert_time", source_timezone="Not/AZone", time="10:00",
                                                     target_timezone="UTC") + _call("convert_time"))
        bad_zone, missing = (m["content"] for m in obs[-2:])
        assert bad_zone.startswith("Error: tool 'convert_time' failed") and "Not/AZone" in bad_zone
        assert missing.startswith("Error: tool 'convert_time' failed")
        assert not terminated and env.episode_running
        result = collect(lambda: time_conversion_env(tasks, **options), ConvertingPolicy(), tasks=tasks,
                         n_parallel=3, progress=False)
        assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 6
        assert all(t.steps[-1].info["res_reward"] == 1.0 for t in result)  # each answer is the server's conversion
        stats = pool.fork_server.stats  # the server ran as `python -m mcp_server_time`, forked from one zygote
        assert stats["zygote_starts"] == 1 and stats["forks"] >= 7 and stats["plain_starts"] == 0
    finally:
        env.close()
        pool.close()
