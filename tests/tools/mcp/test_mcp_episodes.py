"""MCPTools over stdio: per-episode servers from the warm pool, isolation, a killed server, shared scope."""

from __future__ import annotations

import json
import os
import pickle
import signal
import time

import pytest
from mcp_helpers import NotesPolicy, notes_env, word_tasks

from agent_gym.errors import ToolErrorKind
from agent_gym.rollout import collect
from agent_gym.tools.mcp import SERVER_LOST_REASON, MCPTool, MCPTools, notes_server_command
from agent_gym.tools.mcp.servers.notes import png_bar
from agent_gym.types import EpisodeStatus

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def notes_tools():
    tools = MCPTools(notes_server_command(), warm=3)
    yield tools
    tools.pool.close()


def _call(name, **arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def test_tools_are_listed_into_the_env_schemas(notes_tools):
    env = notes_env(notes_tools, word_tasks(1))
    _, info = env.reset(seed=0)
    names = [s["function"]["name"] for s in info["tools"]]
    assert names == ["put_note", "get_note", "delete_note", "list_notes", "note_stats", "note_card"]
    put = info["tools"][0]["function"]
    assert put["parameters"]["required"] == ["key", "text"] and "title" not in put["parameters"]
    assert "Save a note" in put["description"]
    env.close()


def test_results_become_observations_through_the_error_path(notes_tools):
    env = notes_env(notes_tools, word_tasks(1), max_steps=8)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(_call("put_note", key="k", text="hello") + _call("get_note", key="k"))
    assert [m["content"] for m in obs[-2:]] == ["saved 'k' (5 characters)", "hello"]
    assert "error" not in info
    obs, _, _, _, info = env.step(_call("get_note", key="missing") + _call("put_note", key=3)
                                  + _call("no_such_tool") + _call("note_card", key="k") + _call("note_stats"))
    missing, bad, unknown, card, stats = (m["content"] for m in obs[-5:])
    assert missing.startswith("Error: tool 'get_note' failed") and "no note named 'missing'" in missing
    assert bad.startswith("Error: tool 'put_note' failed") and "validation error" in bad
    assert unknown.startswith("Error: unknown tool 'no_such_tool'")
    assert card == f"[image image/png, {len(png_bar(5))} bytes]"  # the note "hello", drawn
    assert json.loads(stats)["notes"] == 1  # structured content
    assert info["error_kinds"] == [ToolErrorKind.TOOL_ERROR.value, ToolErrorKind.TOOL_ERROR.value,
                                   ToolErrorKind.UNKNOWN_TOOL.value]
    assert env.episode_running
    env.close()


def test_concurrent_episodes_are_isolated_also_after_recycling_and_a_killed_server_ends_only_its_episode(
        notes_tools):
    policy = NotesPolicy(kill_words=["w2"])
    tasks = word_tasks(5)
    result = collect(lambda: notes_env(notes_tools, tasks), policy, tasks=tasks, n_parallel=3, progress=False)
    by_word = {t.task["ground_truth"]: t for t in result}
    victim = by_word.pop("w2")
    assert victim.status == EpisodeStatus.ENV_ERROR
    assert victim.steps[-1].info["end_reason"] == SERVER_LOST_REASON
    assert "the tool server failed" in victim.steps[-1].info["tool_calls"][0]["output"]
    # every other episode wrote the same key and read back its own word (a server process per episode;
    # the episodes after the first three ran on recycled servers, which started empty)
    assert all(t.status == EpisodeStatus.ENV_DONE and t.steps[-1].info["res_reward"] > 0 for t in by_word.values())
    assert len(set(policy.pids.values())) == 5
    assert all(json.loads(listed) == {"result": []} for listed in policy.first_lists)
    assert notes_tools.pool.stats["recycled"] >= 5


def test_stepping_by_hand_and_pickling(notes_tools):
    env = notes_env(notes_tools, word_tasks(2))
    assert all(isinstance(t, MCPTool) for t in notes_tools)
    env.reset(seed=0)
    env.step(_call("put_note", key="a", text="1"))
    copy = pickle.loads(pickle.dumps(env))  # the copy holds no server: its calls say so
    obs, *_ = copy.step(_call("get_note", key="a"))
    assert "call env.reset() first" in obs[-1]["content"]
    obs, *_ = env.step(_call("get_note", key="a"))
    assert obs[-1]["content"] == "1"
    copy.reset(seed=1)
    obs, *_ = copy.step(_call("list_notes"))
    assert json.loads(obs[-1]["content"]) == {"result": []}
    copy.close()
    env.close()


def test_shared_scope_reconnects_after_its_server_died():
    tools = MCPTools(notes_server_command(), scope="shared")
    first, second = notes_env(tools, word_tasks(1)), notes_env(tools, word_tasks(1))
    try:
        first.reset(seed=0)
        second.reset(seed=0)
        first.step(_call("put_note", key="k", text="from the first env"))
        obs, *_ = second.step(_call("get_note", key="k"))
        assert obs[-1]["content"] == "from the first env"  # one server: state is shared (the documented caveat)
        obs, *_ = second.step(_call("note_stats"))
        os.kill(json.loads(obs[-1]["content"])["pid"], signal.SIGKILL)
        time.sleep(0.3)
        obs, _, terminated, truncated, info = first.step(_call("list_notes"))
        assert json.loads(obs[-1]["content"]) == {"result": []}  # a new server answered
        assert not (terminated or truncated) and "error" not in info
        assert tools.pool.stats["reconnects"] == 1
    finally:
        first.close()
        second.close()
        tools.pool.close()
