"""An MCP-speaking harness: turns sampled through the gateway, tools and reward from ``serve-env --mcp --gateway``.

The harness below is written against the plain ``openai`` client and the MCP client only. It names
its gateway session and the env task on its MCP requests; the env server grades the episode and ends
the gateway session with the reward, so the gateway's record holds the sampled tokens and the env's
reward and status.
"""

from __future__ import annotations

import json
import re
import sys

import openai
import pytest
from mcp_http_process import mcp_http_process

from agent_gym.serving.gateway_rewards import GATEWAY_SESSION_HEADER, TASK_HEADER, GatewayRewards
from agent_gym.tools.mcp.connection import MCPConnection, ServerSpec
from agent_gym.tools.mcp.runtime import LoopThread
from agent_gym.types import EpisodeStatus

pytestmark = pytest.mark.timeout(300)

TASKS = [{"id": "six-times-seven", "question": "What is 6 * 7?", "ground_truth": "42"},
         {"id": "two-plus-two", "question": "What is 2 + 2?", "ground_truth": "4"}]


@pytest.fixture(scope="module")
def gateway(scripted_upstream, qwen_tokenizer):
    from agent_gym.gateway import Gateway

    address, engine = scripted_upstream(qwen_tokenizer)
    gateway = Gateway([address], qwen_tokenizer, sampling={"max_tokens": 128}).start()
    yield gateway, engine
    gateway.stop()


@pytest.fixture(scope="module")
def env_url(gateway):
    gw, _ = gateway
    command = lambda port: [  # noqa: E731
        sys.executable, "-m", "agent_gym", "serve-env", "agent_gym/ToolUse-v0", "--mcp", "--port", str(port),
        "--env-kwargs", json.dumps({"tasks": TASKS, "max_steps": 4}),
        "--gateway", gw.url, "--gateway-token", gw.trainer_token]
    with mcp_http_process(command, "serve-env --mcp --gateway", timeout=120) as url:
        yield url


async def harness(model: openai.AsyncOpenAI, env_url: str, headers: dict[str, str]) -> tuple[list, dict]:
    """Task from the env, turns from the model, tool calls to the env, the final answer submitted."""
    connection = await MCPConnection.open(ServerSpec(url=env_url, headers=headers))
    try:
        listed = await connection.list_tools()
        tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                   "parameters": t["inputSchema"]}}
                 for t in listed if not t["name"].startswith("episode_")]
        task = await connection.call_tool("episode_task", {}, 30)
        messages: list[dict] = [{"role": m["role"], "content": m["content"]}
                                for m in task["structuredContent"]["messages"]]
        for _ in range(4):
            reply = await model.chat.completions.create(model="m", messages=messages, tools=tools)
            message = reply.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                result = await connection.call_tool(call["function"]["name"],
                                                    json.loads(call["function"]["arguments"]), 30)
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": "RESULT=" + result["content"][0]["text"]})
        answer = re.search(r"<answer>(.*?)</answer>", messages[-1].get("content") or "")
        submitted = await connection.call_tool("episode_submit", {"answer": answer.group(1) if answer else ""}, 30)
        return messages, submitted
    finally:
        await connection.close()


def test_the_env_server_pays_the_gateway_session_the_harness_names(gateway, env_url, exact):
    gw, engine = gateway
    engine.records.clear()
    with gw.session(task={"id": "six-times-seven"}) as s:
        model = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key=s.api_key)
        headers = {GATEWAY_SESSION_HEADER: s.session_id, TASK_HEADER: "six-times-seven"}
        messages, submitted = LoopThread().run(harness(model, env_url, headers), 120)
    final = submitted["structuredContent"]
    assert messages[-1]["content"] == "The answer is <answer>42</answer>"
    assert final["status"] == "ENV_DONE" and final["res_reward"] == 1.0
    assert final["gateway"]["ok"] is True and final["gateway"]["session_id"] == s.session_id
    # The gateway's record: the server's sampled ids, the env's reward and status.
    trajectory = s.trajectory
    exact(trajectory, engine.records)
    assert trajectory.status == EpisodeStatus.ENV_DONE
    assert trajectory.trajectory_reward == pytest.approx(final["episode_reward"])
    assert trajectory.task["id"] == "six-times-seven"


def test_a_wrong_answer_is_paid_what_the_env_pays_and_a_bad_task_id_is_an_error(gateway, env_url):
    gw, _ = gateway

    async def wrong(session_id: str) -> tuple[dict, dict]:
        headers = {GATEWAY_SESSION_HEADER: session_id, TASK_HEADER: "two-plus-two"}
        connection = await MCPConnection.open(ServerSpec(url=env_url, headers=headers))
        try:
            task = await connection.call_tool("episode_task", {}, 30)
            return task, await connection.call_tool("episode_submit", {"answer": "5"}, 30)
        finally:
            await connection.close()

    async def unknown_task() -> dict:
        connection = await MCPConnection.open(ServerSpec(url=env_url, headers={TASK_HEADER: "no-such-task"}))
        try:
            return await connection.call_tool("episode_task", {}, 30)
        finally:
            await connection.close()

    loop = LoopThread()
    with gw.session() as s:
        task, submitted = loop.run(wrong(s.session_id), 120)
    assert task["structuredContent"]["task_id"] == "two-plus-two"
    final = submitted["structuredContent"]
    assert final["status"] == "ENV_DONE" and final["res_reward"] == 0.0 and final["gateway"]["ok"] is True
    assert s.trajectory.status == EpisodeStatus.ENV_DONE and s.trajectory.trajectory_reward == final["episode_reward"]
    bad = loop.run(unknown_task(), 120)
    assert bad["isError"] and "no-such-task" in bad["content"][0]["text"]


def test_a_gateway_that_refuses_or_is_down_is_reported_never_raised(gateway):
    gw, _ = gateway
    refused = GatewayRewards(gw.url, gw.trainer_token, retries=0).post("no-such-session", 1.0, "ENV_DONE")
    assert refused["ok"] is False and "404" in refused["error"]
    wrong_token = GatewayRewards(gw.url, "not-the-token", retries=0)
    with gw.session() as s:
        denied = wrong_token.post(s.session_id, 1.0, "ENV_DONE")
        assert denied["ok"] is False and denied["error"].startswith("HTTP 40")
        s.reward(0.5)
    down = GatewayRewards("http://127.0.0.1:9", "t", retries=1, timeout=2).post("x", 1.0, "ENV_DONE")
    assert down["ok"] is False and down["error"]
    with pytest.raises(ValueError):
        GatewayRewards("127.0.0.1:9", "t")
    with pytest.raises(ValueError):
        GatewayRewards("http://127.0.0.1:9", " ")


def test_an_episode_closed_unfinished_ends_its_gateway_session_timeout(gateway):
    from agent_gym.serving.mcp_env_server import EnvSessions

    gw, _ = gateway
    sessions = EnvSessions("agent_gym/ToolUse-v0", {"tasks": TASKS}, max_sessions=1,
                           gateway=GatewayRewards(gw.url, gw.trainer_token))
    with gw.session() as first, gw.session() as second:
        sessions.call("mcp-a", "calculator", {"expression": "1 + 1"}, gateway_session=first.session_id)
        # max_sessions=1: the second session's episode closes the first, unfinished one.
        sessions.call("mcp-b", "calculator", {"expression": "2 + 2"}, gateway_session=second.session_id)
        ended = {row["session_id"]: row["status"] for row in gw.store.list()}
        assert ended[first.session_id] == EpisodeStatus.TIMEOUT and ended[second.session_id] == "open"
        sessions.close()  # the server stopping ends the rest the same way
    assert first.trajectory.status == EpisodeStatus.TIMEOUT and first.trajectory.trajectory_reward == 0.0
    assert second.trajectory.status == EpisodeStatus.TIMEOUT
