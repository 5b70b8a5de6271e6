"""``agent-gym serve-env ID --mcp``: an env's tools over MCP, one episode per MCP session (a real server process)."""

from __future__ import annotations

import json
import sys

import pytest
from mcp_http_process import mcp_http_process

from agent_gym.tools.mcp import MCPTools
from agent_gym.tools.mcp.connection import MCPConnection, ServerSpec
from agent_gym.tools.mcp.runtime import LoopThread

pytestmark = pytest.mark.timeout(300)

TASKS = [{"id": "six-times-seven", "question": "What is 6 * 7?", "ground_truth": "42"}]


@pytest.fixture(scope="module")
def mcp_env_url():
    command = lambda port: [  # noqa: E731
        sys.executable, "-m", "agent_gym", "serve-env", "agent_gym/ToolUse-v0", "--mcp", "--port", str(port),
        "--env-kwargs", json.dumps({"tasks": TASKS, "max_steps": 3})]
    with mcp_http_process(command, "serve-env --mcp", timeout=120) as url:
        yield url


def test_each_mcp_session_is_an_episode_with_its_reward_on_submit(mcp_env_url):
    loop = LoopThread()
    spec = ServerSpec(url=mcp_env_url)

    async def play(answer):
        connection = await MCPConnection.open(spec)
        try:
            names = [t["name"] for t in await connection.list_tools()]
            task = await connection.call_tool("episode_task", {}, 30)
            step = await connection.call_tool("calculator", {"expression": "6 * 7"}, 30)
            bad = await connection.call_tool("calculator", {"expression": "6 *"}, 30)
            submitted = await connection.call_tool("episode_submit", {"answer": answer}, 30)
            after = await connection.call_tool("calculator", {"expression": "1 + 1"}, 30)
            return names, task, step, bad, submitted, after
        finally:
            await connection.close()

    async def both():
        import asyncio

        return await asyncio.gather(play("42"), play("41"))

    right, wrong = loop.run(both(), 120)
    names, task, step, bad, submitted, after = right
    assert "calculator" in names and names[-2:] == ["episode_task", "episode_submit"]
    assert task["structuredContent"]["task_id"] == "six-times-seven"
    assert "What is 6 * 7?" in task["content"][0]["text"]
    assert step["content"][0]["text"] == "42" and not step["isError"]
    assert step["structuredContent"]["terminated"] is False
    assert bad["isError"] and bad["content"][0]["text"].startswith("Error:")
    assert submitted["structuredContent"]["status"] == "ENV_DONE"
    assert submitted["structuredContent"]["res_reward"] == 1.0
    assert after["isError"] and "episode ended" in after["content"][0]["text"]
    assert wrong[4]["structuredContent"]["status"] == "ENV_DONE"
    assert wrong[4]["structuredContent"]["res_reward"] == 0.0  # the other session's episode, scored on its own


def test_the_served_tools_work_as_mcp_tools_of_another_env(mcp_env_url):
    from agent_gym.env.core import AgentEnv

    tools = MCPTools(url=mcp_env_url, include=["calculator"], warm=1)
    env = AgentEnv(tasks=TASKS, tools=tools)
    try:
        _, info = env.reset(seed=0)
        assert [s["function"]["name"] for s in info["tools"]] == ["calculator"]
        obs, *_ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2 ** 10"}}</tool_call>')
        assert obs[-1]["content"] == "1024"
    finally:
        env.close()
        tools.pool.close()


def test_gateway_arguments_are_checked(monkeypatch):
    from agent_gym.cli import build_parser
    from agent_gym.cli.serve_env import GATEWAY_TOKEN_ENV, build_app
    from agent_gym.errors import ConfigError

    def args(*extra):
        return build_parser().parse_args(["serve-env", "agent_gym/ToolUse-v0", *extra])

    monkeypatch.delenv(GATEWAY_TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match="only with --mcp"):
        build_app(args("--gateway", "http://127.0.0.1:8100"))
    with pytest.raises(ConfigError, match="trainer token"):
        build_app(args("--mcp", "--gateway", "http://127.0.0.1:8100"))
    with pytest.raises(ValueError, match="http"):
        build_app(args("--mcp", "--gateway", "127.0.0.1:8100", "--gateway-token", "t"))
    monkeypatch.setenv(GATEWAY_TOKEN_ENV, "from-the-environment")
    app, _ = build_app(args("--mcp", "--gateway", "http://127.0.0.1:8100"))
    assert app is not None
