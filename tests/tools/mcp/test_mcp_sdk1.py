"""The client and the notes server under the ``mcp`` SDK 1.x (an interpreter named by ``AGENT_GYM_MCP1_PYTHON``).

The project's environment holds 2.x (through ``.[dev]``). To check 1.x, make an environment with it, e.g.
``python -m venv VENV && VENV/bin/pip install 'mcp<2'``, and run these tests with
``AGENT_GYM_MCP1_PYTHON=VENV/bin/python`` (``.ci/run`` does). The client module
(:mod:`agent_gym.tools.mcp.connection`) and the notes server import nothing from agent_gym, so
the 1.x interpreter runs them from their files.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

import agent_gym.tools.mcp.connection as connection_module
import agent_gym.tools.mcp.servers.notes as notes_module
import agent_gym.tools.mcp.zygote as zygote_module
from agent_gym.env.core import AgentEnv
from agent_gym.tools.mcp import MCPTools, ServerPool, ServerSpec

pytestmark = pytest.mark.timeout(300)

MCP1_PYTHON = os.environ.get("AGENT_GYM_MCP1_PYTHON")
needs_mcp1 = pytest.mark.skipif(not MCP1_PYTHON, reason="set AGENT_GYM_MCP1_PYTHON to an interpreter with mcp<2")

CLIENT_SCRIPT = textwrap.dedent('''
    import asyncio, importlib.util, json, sys
    from importlib.metadata import version
    spec = importlib.util.spec_from_file_location("mcp_connection", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mcp_connection"] = module
    spec.loader.exec_module(module)

    async def main():
        server = module.ServerSpec(command=(sys.executable, sys.argv[2]))
        connection = await module.MCPConnection.open(server)
        try:
            tools = [t["name"] for t in await connection.list_tools()]
            put = await connection.call_tool("put_note", {"key": "k", "text": "v"}, 30)
            got = await connection.call_tool("get_note", {"key": "k"}, 30)
            missing = await connection.call_tool("get_note", {"key": "nope"}, 30)
            card = await connection.call_tool("note_card", {"key": "k"}, 30)
        finally:
            await connection.close()
        print(json.dumps({"sdk": version("mcp"), "server": [connection.server_name, connection.server_version],
                          "tools": tools, "put": put, "got": got, "missing": missing, "card": card}))

    asyncio.run(main())
''')


@needs_mcp1
def test_client_and_server_under_sdk_1x():
    done = subprocess.run([MCP1_PYTHON, "-c", CLIENT_SCRIPT, connection_module.__file__, notes_module.__file__],
                          capture_output=True, text=True, timeout=240, cwd=str(Path(notes_module.__file__).parent))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["sdk"].startswith("1.")
    assert report["server"][0] == "agent-gym-notes"
    assert {"put_note", "get_note", "note_card"} <= set(report["tools"])
    assert report["got"]["content"][0]["text"] == "v" and not report["got"].get("isError")
    assert report["missing"]["isError"] and "no note named 'nope'" in report["missing"]["content"][0]["text"]
    assert report["card"]["content"][0]["type"] == "image"


@needs_mcp1
def test_this_client_against_a_server_on_sdk_1x():
    tools = MCPTools([MCP1_PYTHON, notes_module.__file__], warm=1)
    env = AgentEnv(tasks=[{"id": "t", "question": "q", "ground_truth": "a"}], tools=tools)
    try:
        env.reset(seed=0)
        obs, *_ = env.step('<tool_call>{"name": "put_note", "arguments": {"key": "k", "text": "v"}}</tool_call>'
                           '<tool_call>{"name": "get_note", "arguments": {"key": "k"}}</tool_call>')
        assert obs[-1]["content"] == "v"
    finally:
        env.close()
        tools.pool.close()


@needs_mcp1
def test_a_fork_server_under_sdk_1x():
    pool = ServerPool(ServerSpec.make([MCP1_PYTHON, notes_module.__file__], fork_server=True), warm=1)
    try:
        pids = set()
        for text in ("a", "b"):  # the second server is forked after the first was released: it starts empty
            lease = pool.acquire()
            assert lease.call("list_notes", {}, timeout=60)["structuredContent"] == {"result": []}
            lease.call("put_note", {"key": "k", "text": text}, timeout=60)
            pids.add(lease.call("note_stats", {}, timeout=60)["structuredContent"]["pid"])
            lease.release()
        assert len(pids) == 2 and pool.fork_server.stats["plain_starts"] == 0
    finally:
        pool.close()


@needs_mcp1
def test_this_client_against_an_http_server_on_sdk_1x_one_store_per_session():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([MCP1_PYTHON, notes_module.__file__, "--http", "--port", str(port)],
                              cwd=str(Path(notes_module.__file__).parent), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    tools = MCPTools(url=f"http://127.0.0.1:{port}/mcp", warm=2, startup_timeout=120.0)
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
                break
            assert server.poll() is None and time.monotonic() < deadline, "the 1.x notes server did not start"
            time.sleep(0.1)
        first, second = (AgentEnv(tasks=[{"id": "t", "question": "q", "ground_truth": "a"}], tools=tools)
                         for _ in range(2))
        first.reset(seed=0)
        second.reset(seed=0)
        first.step('<tool_call>{"name": "put_note", "arguments": {"key": "k", "text": "first"}}</tool_call>')
        obs, *_ = second.step('<tool_call>{"name": "list_notes", "arguments": {}}</tool_call>')
        assert json.loads(obs[-1]["content"]) == {"result": []}  # another session: another store
        obs, *_ = first.step('<tool_call>{"name": "get_note", "arguments": {"key": "k"}}</tool_call>')
        assert obs[-1]["content"] == "first"
        first.close()
        second.close()
    finally:
        tools.pool.close()
        server.terminate()
        server.wait(15)


def test_the_module_files_run_without_agent_gym():
    for module in (connection_module, notes_module, zygote_module):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.split(".")[0] == "agent_gym"}, module.__name__
