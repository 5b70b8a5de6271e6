"""MCPTools with ``fork_server=True``: episode servers forked from a preloaded zygote: isolation, faults, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_helpers import NotesPolicy, notes_env, word_tasks

import agent_gym
from agent_gym.rollout import collect
from agent_gym.tools.mcp import SERVER_LOST_REASON, MCPTools, ServerPool, ServerSpec, notes_server_command
from agent_gym.tools.mcp import fork_server as fork_server_module
from agent_gym.tools.mcp.zygote import split_python_command
from agent_gym.types import EpisodeStatus

pytestmark = pytest.mark.timeout(300)


def _running(pid: int) -> bool:
    """True while ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _wait_gone(pids: list[int], timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if _running(p)]


@pytest.fixture(scope="module")
def forked_notes():
    tools = MCPTools(notes_server_command(), fork_server=True, warm=3)
    yield tools
    tools.pool.close()


def test_concurrent_episodes_are_isolated_also_after_recycling_and_a_killed_child_ends_only_its_episode(
        forked_notes):
    policy = NotesPolicy(kill_words=["w3"])
    tasks = word_tasks(8)
    result = collect(lambda: notes_env(forked_notes, tasks), policy, tasks=tasks, n_parallel=4, progress=False)
    by_word = {t.task["ground_truth"]: t for t in result}
    victim = by_word.pop("w3")
    assert victim.status == EpisodeStatus.ENV_ERROR
    assert victim.steps[-1].info["end_reason"] == SERVER_LOST_REASON
    assert "the tool server failed" in victim.steps[-1].info["tool_calls"][0]["output"]
    # every other episode wrote the same key and read back its own word: a forked process each, and the
    # episodes after the first four ran on servers forked after earlier ones were released, which started empty
    assert all(t.status == EpisodeStatus.ENV_DONE and t.steps[-1].info["res_reward"] > 0 for t in by_word.values())
    assert len(set(policy.pids.values())) == 8
    assert all(json.loads(listed) == {"result": []} for listed in policy.first_lists)
    stats = forked_notes.pool.fork_server.stats
    assert stats["forks"] >= 8 and stats["plain_starts"] == 0 and stats["zygote_starts"] == 1
    assert forked_notes.pool.stats["recycled"] >= 8


def test_servers_are_children_of_the_zygote_and_a_killed_zygote_is_replaced_without_orphans():
    pool = ServerPool(ServerSpec.make(notes_server_command(), fork_server=True), warm=1)
    leases, pids = [], []
    try:
        first = pool.acquire()
        leases.append(first)
        pids.append(first.call("note_stats", {}, timeout=60)["structuredContent"]["pid"])
        zygote = pool.fork_server.pid
        assert _parent(pids[0]) == zygote and zygote != os.getpid()
        os.kill(zygote, signal.SIGKILL)  # the zygote dies; the server it forked keeps serving its episode
        first.call("put_note", {"key": "k", "text": "still here"}, timeout=60)
        assert first.call("get_note", {"key": "k"}, timeout=60)["content"][0]["text"] == "still here"
        for _ in range(3):  # at least two of these servers are forked after the kill: by a new zygote
            lease = pool.acquire()
            leases.append(lease)
            pids.append(lease.call("note_stats", {}, timeout=60)["structuredContent"]["pid"])
            assert lease.call("list_notes", {}, timeout=60)["structuredContent"] == {"result": []}
        stats = pool.fork_server.stats
        assert stats["zygote_starts"] == 2 and stats["zygote_lost"] == 1 and stats["plain_starts"] == 0
        new_zygote = pool.fork_server.pid
        assert _parent(pids[-1]) == new_zygote != zygote
        assert len(set(pids)) == 4
    finally:
        for lease in leases:
            lease.release()
        pool.close()
    assert _wait_gone([zygote, new_zygote, *pids]) == []  # every zygote and server exited: no orphans


_DYING_CLIENT = """
import os, signal
from agent_gym.tools.mcp import ServerPool, ServerSpec, notes_server_command
pool = ServerPool(ServerSpec.make(notes_server_command(), fork_server=True), warm=2)
lease = pool.acquire()
pid = lease.call("note_stats", {}, timeout=60)["structuredContent"]["pid"]
print(pool.fork_server.pid, pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no clean-up at all
"""


def test_a_client_process_that_dies_leaves_no_zygote_and_no_server_behind():
    repo = Path(agent_gym.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _DYING_CLIENT], cwd=repo, capture_output=True, text=True, timeout=240)
    assert done.returncode == -signal.SIGKILL, done.stderr
    zygote, server = (int(word) for word in done.stdout.split())
    assert _wait_gone([zygote, server]) == []


def test_a_zygote_that_cannot_start_falls_back_to_plain_starts(monkeypatch):
    monkeypatch.setattr(fork_server_module, "ZYGOTE_PATH", os.devnull + ".missing")
    pool = ServerPool(ServerSpec.make(notes_server_command(), fork_server=True, startup_timeout=120), warm=0)
    pool.fork_server.max_start_failures = 2
    try:
        for _ in range(2):  # each start tries the zygote, fails, starts the server the plain way
            lease = pool.acquire()
            assert lease.call("list_notes", {}, timeout=60)["structuredContent"] == {"result": []}
            lease.release()
        stats = pool.fork_server.stats
        assert stats["plain_starts"] == 2 and stats["forks"] == 0 and stats["zygote_starts"] == 0
        assert pool.fork_server.fallback_reason is not None and "2 times in a row" in pool.fork_server.fallback_reason
    finally:
        pool.close()


def test_fork_server_commands_are_checked():
    assert split_python_command([sys.executable, "-u", "-X", "dev", "server.py", "--flag"]).args == ("--flag",)
    module = split_python_command(["python3", "-m", "pkg.server", "a"])
    assert (module.mode, module.target, module.args) == ("module", "pkg.server", ("a",))
    with pytest.raises(ValueError, match="fork_server"):
        MCPTools([sys.executable, "-c", "print(1)"], fork_server=True)
    with pytest.raises(ValueError, match="fork_server"):
        MCPTools(url="http://127.0.0.1:1/mcp", fork_server=True)
    with pytest.raises(TypeError, match="preload"):
        ServerSpec.make(notes_server_command(), fork_server=True, preload="numpy")
