"""MCPTools over streamable HTTP: an MCP session per episode on one notes server, 32 episodes at once."""

from __future__ import annotations

import json

import pytest
from mcp_helpers import NotesPolicy, http_notes_server, notes_env, word_tasks

from agent_gym.rollout import collect
from agent_gym.tools.mcp import MCPTools
from agent_gym.types import EpisodeStatus

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def notes_url():
    with http_notes_server() as url:
        yield url


def test_32_concurrent_episodes_over_http_each_in_its_own_session(notes_url):
    tools = MCPTools(url=notes_url, warm=8)
    policy = NotesPolicy()
    tasks = word_tasks(32)
    try:
        result = collect(lambda: notes_env(tools, tasks), policy, tasks=tasks, n_parallel=32, progress=False)
    finally:
        tools.pool.close()
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 32
    assert all(t.steps[-1].info["res_reward"] > 0 for t in result)  # the same key, 32 sessions: each its own word
    assert all(json.loads(listed) == {"result": []} for listed in policy.first_lists)
    stats = tools.pool.stats
    assert stats["start_failures"] == 0 and stats["retries"] == 0  # no transport-caused failure


def test_shared_scope_over_http_shares_one_session(notes_url):
    tools = MCPTools(url=notes_url, scope="shared", include=["put_note", "get_note"])
    first, second = notes_env(tools, word_tasks(1)), notes_env(tools, word_tasks(1))
    try:
        _, info = first.reset(seed=0)
        assert [s["function"]["name"] for s in info["tools"]] == ["put_note", "get_note"]
        second.reset(seed=0)
        first.step('<tool_call>{"name": "put_note", "arguments": {"key": "k", "text": "v"}}</tool_call>')
        obs, *_ = second.step('<tool_call>{"name": "get_note", "arguments": {"key": "k"}}</tool_call>')
        assert obs[-1]["content"] == "v"
    finally:
        first.close()
        second.close()
        tools.pool.close()
