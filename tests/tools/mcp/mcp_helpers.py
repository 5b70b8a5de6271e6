"""The notes env and scripted policies of the MCP tests, and a notes server over streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_http_process import mcp_http_process

from agent_gym.env.core import AgentEnv

__all__ = ["NotesPolicy", "http_notes_server", "notes_env", "word_tasks"]

_WORD = re.compile(r"Remember the word (\w+)")


def word_tasks(n: int, prefix: str = "w") -> list[dict[str, Any]]:
    """Tasks whose answer is a word the episode stores under the same key as every other episode."""
    return [{"id": f"{prefix}{i}", "question": f"Remember the word {prefix}{i}, then tell it.",
             "ground_truth": f"{prefix}{i}"} for i in range(n)]


def notes_env(tools: Any, tasks: Sequence[dict[str, Any]], max_steps: int = 6) -> AgentEnv:
    """An env whose tools are ``tools`` (e.g. an ``MCPTools``)."""
    return AgentEnv(tasks=tasks, tools=tools, max_steps=max_steps)


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class NotesPolicy:
    """Store the task's word under the key ``shared``, check the server, read the key back, answer with it.

    Turn 1 ``put_note``, turn 2 ``note_stats`` (recording the server's pid), turn 3 ``get_note``,
    turn 4 the answer: the note read back, which is the task's word only if no other episode's
    write reached this episode's server.

    Args:
        kill_words: Words whose episode's server is killed (SIGKILL) before its ``get_note``.
    """

    def __init__(self, kill_words: Sequence[str] = ()) -> None:
        self.kill_words = set(kill_words)
        self.pids: dict[str, int] = {}
        self.first_lists: list[str] = []

    def _turn(self, messages: Sequence[Mapping[str, str]]) -> str:
        word = _WORD.search(messages[1]["content"]).group(1)  # type: ignore[union-attr]
        assistant_turns = sum(m["role"] == "assistant" for m in messages)
        if assistant_turns == 0:
            return _call("list_notes")
        if assistant_turns == 1:
            self.first_lists.append(messages[-1]["content"])
            return _call("put_note", key="shared", text=word)
        if assistant_turns == 2:
            return _call("note_stats")
        if assistant_turns == 3:
            self.pids[word] = json.loads(messages[-1]["content"])["pid"]
            if word in self.kill_words:
                os.kill(self.pids[word], signal.SIGKILL)
                time.sleep(0.3)
            return _call("get_note", key="shared")
        return f"<answer>{messages[-1]['content'].strip()}</answer>"

    def act(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        return self._turn(messages)

    async def aact(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        import asyncio

        return await asyncio.to_thread(self._turn, messages)  # os.kill and sleep stay off the runner's loop

    def close_session(self, session_id: str) -> None:
        pass


def http_notes_server(timeout: float = 60.0) -> contextlib.AbstractContextManager[str]:
    """A notes server over streamable HTTP in a subprocess; yields its ``/mcp`` URL, stops it after."""
    return mcp_http_process(
        lambda port: [sys.executable, "-m", "agent_gym.tools.mcp.servers.notes", "--http", "--port", str(port)],
        "the notes server", timeout)
