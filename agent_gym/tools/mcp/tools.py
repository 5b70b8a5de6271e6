"""``MCPTools``: the tools of an MCP server as tools of any ``AgentEnv``, with a server per episode.

``MCPTools(command=[...])`` or ``MCPTools(url=...)`` is a sequence of tools, one per tool the
server lists (listed once per server version, from a warm connection), so it goes wherever an env
takes tools::

    env = ToolUseEnv(tools=MCPTools(command=[sys.executable, "-m", "agent_gym.tools.mcp.servers.notes"]))
    env = AgentEnv(tasks, tools=[*MCPTools(url="http://127.0.0.1:8765/mcp"), my_function])

Each tool carries the ``MCPTools`` object as its ``episode_scope``: at every ``reset`` the env
opens an :class:`MCPEpisode` (a lease on a connection of the server's pool, see
:mod:`agent_gym.tools.mcp.pool`) and runs the episode's calls through tools bound to it; the
next ``reset`` or ``close()`` releases it, and the pool recycles that server in the background.

Results become observations through the env's usual path (:mod:`agent_gym.tools.mcp.results`):
``isError`` and JSON-RPC errors are error observations the model sees; a call past
``call_timeout`` is a ``TIMEOUT`` observation. A server that dies, or a connection that is lost
(after ``retries`` retried transport failures), is no fault of the model: the call's observation
says so and the episode ends ``ENV_ERROR`` (truncated) at the end of the step, so trainers mask
it instead of learning from it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import orjson

from agent_gym.errors import ToolErrorKind
from agent_gym.tools import DEFAULT_MAX_OUTPUT_CHARS, ToolResult
from agent_gym.tools.mcp.connection import ConnectionLost, ServerReplyError, ServerSpec, TransportDrop
from agent_gym.tools.mcp.pool import SCOPES, Lease, ServerPool, server_pool
from agent_gym.tools.mcp.results import function_schema_of, result_of
from agent_gym.types import EpisodeStatus

__all__ = ["MCPEpisode", "MCPTool", "MCPTools", "SERVER_LOST_REASON"]

logger = logging.getLogger(__name__)

SERVER_LOST_REASON = "mcp_server_lost"
"""``info["end_reason"]`` of an episode ended ``ENV_ERROR`` because its MCP server failed."""

_INVALID_PARAMS = -32602

EndEpisode = Callable[[EpisodeStatus, str], None]


class MCPTool:
    """One tool of an MCP server; calls run in the episode whose tools are bound (see :class:`MCPEpisode`).

    A tool not bound to an episode (the env's own copy, before ``reset`` or in a pickled copy)
    answers every call with an error observation.

    Attributes:
        episode_scope: The :class:`MCPTools` it belongs to (the env opens an episode on it).
    """

    def __init__(self, source: MCPTools, schema: dict[str, Any], episode: MCPEpisode | None = None) -> None:
        self.episode_scope = source
        self._schema = schema
        self._schema_json = orjson.dumps(schema)
        self._episode = episode

    @property
    def name(self) -> str:
        """The name the model uses to call the tool."""
        return str(self._schema["function"]["name"])

    @property
    def schema(self) -> dict[str, Any]:
        """A fresh copy of the OpenAI function schema."""
        return orjson.loads(self._schema_json)

    def bound(self, episode: MCPEpisode) -> MCPTool:
        """This tool with its calls going to ``episode``'s connection."""
        return MCPTool(self.episode_scope, self._schema, episode)

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the tool on the episode's server; never raises (see the module docs)."""
        if self._episode is None:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"tool {self.name!r} has no MCP server: it runs in "
                                                                "an episode (call env.reset() first)")
        return self._episode.call(self.name, arguments)

    def __getstate__(self) -> dict[str, Any]:
        return {"episode_scope": self.episode_scope, "_schema": self._schema}  # a copy is bound to no episode

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["episode_scope"], state["_schema"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, {self.episode_scope.spec.describe()}, scope={self.episode_scope.scope!r})"


class MCPEpisode:
    """One episode's use of an MCP server: its lease, the tools bound to it, and what a failure does.

    Args:
        source: The :class:`MCPTools`.
        lease: The episode's lease on a connection.
        end_episode: Ends the env's episode (called with ``ENV_ERROR`` when the server fails).
    """

    def __init__(self, source: MCPTools, lease: Lease, end_episode: EndEpisode) -> None:
        self.source = source
        self.lease = lease
        self.end_episode = end_episode
        self.lost: str | None = None
        """Why the server failed (None while it works)."""
        self.calls = 0
        self.tools: dict[str, MCPTool] = {tool.name: tool.bound(self) for tool in source}

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Run one call and turn its outcome into a ``ToolResult`` (never raises)."""
        if self.lost is not None:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"tool {name!r} not run: the MCP server of this "
                                                                f"episode failed ({self.lost})")
        if not isinstance(arguments, Mapping):
            return ToolResult.failure(ToolErrorKind.BAD_ARGUMENTS,
                                      f"invalid arguments: expected an object, got {type(arguments).__name__}")
        try:
            arguments = orjson.loads(orjson.dumps(arguments))
        except (TypeError, orjson.JSONEncodeError) as exc:
            return ToolResult.failure(ToolErrorKind.BAD_ARGUMENTS, f"invalid arguments: {exc}")
        self.calls += 1
        source = self.source
        try:
            result = self.lease.call(name, arguments, timeout=source.call_timeout, retries=source.retries)
        except TimeoutError:
            return ToolResult.failure(ToolErrorKind.TIMEOUT,
                                      f"tool {name!r} did not finish within its {source.call_timeout:g} s time limit")
        except ServerReplyError as exc:
            kind = ToolErrorKind.BAD_ARGUMENTS if exc.code == _INVALID_PARAMS else ToolErrorKind.TOOL_ERROR
            return ToolResult.failure(kind, f"tool {name!r} failed: {exc}")
        except (ConnectionLost, TransportDrop) as exc:
            self.lost = str(exc)
            logger.warning("episode's MCP server failed: %s", exc)
            self.end_episode(EpisodeStatus.ENV_ERROR, SERVER_LOST_REASON)
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"tool {name!r} not run: the tool server failed")
        except Exception as exc:  # noqa: BLE001 - a call never raises into the env
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"tool {name!r} failed: {type(exc).__name__}: {exc}")
        return result_of(name, result, source.max_output_chars)

    def close(self) -> None:
        """Give the connection back to the pool (recycled in the background); safe twice."""
        self.lease.release()


class MCPTools(Sequence[MCPTool]):
    """The tools of one MCP server, for any ``AgentEnv`` (see the module docs).

    Args:
        command: The stdio server's program and arguments (e.g. ``[sys.executable, "-m", "pkg.server"]``).
        url: A streamable HTTP endpoint instead (e.g. ``"http://127.0.0.1:8765/mcp"``).
        scope: ``"episode"`` (default): every episode gets a server (stdio: a process; HTTP: an MCP
            session) no other episode touches, from a warm pool. ``"shared"``: one connection for every
            episode of the process. **Warning**: with ``"shared"`` whatever one episode writes, every
            other episode sees (and concurrent episodes race); use it only for servers without state.
        warm: Connections the episode pool keeps started ahead of demand (about the number of episodes
            run at once; more costs memory, fewer makes episodes wait for a start).
        include: Names of the server's tools to offer (default: all).
        env: Environment variables of the stdio server (merged over the SDK's safe defaults).
        cwd: Working directory of the stdio server.
        headers: HTTP headers of every request to ``url``.
        call_timeout: Seconds a call may take before its observation is a timeout.
        retries: Retries of a call whose request failed in transit.
        max_output_chars: Characters of a result kept (more is cut, an ``OUTPUT_LIMIT`` error).
        startup_timeout: Seconds to start a server and finish the handshake.
        stderr: ``"discard"`` (default) or ``"inherit"`` a stdio server's stderr.
        fork_server: Start the stdio server's processes by forking one that imported the ``mcp`` SDK and
            the server's code once (a fresh process per episode in milliseconds instead of an interpreter
            start; see :mod:`agent_gym.tools.mcp.fork_server`). The command must be
            ``python [options] script.py ...`` or ``python [options] -m module ...``, and the script must
            start serving only under ``if __name__ == "__main__":``.
        preload: With ``fork_server``: more modules to import once before forking (e.g. what the server
            imports inside its functions).

    Raises:
        ValueError: For a bad argument, or ``include`` naming a tool the server does not list (when listed).
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        url: str | None = None,
        *,
        scope: str = "episode",
        warm: int = 4,
        include: Iterable[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        headers: Mapping[str, str] | None = None,
        call_timeout: float = 30.0,
        retries: int = 2,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        startup_timeout: float = 60.0,
        stderr: str = "discard",
        fork_server: bool = False,
        preload: Iterable[str] = (),
    ) -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope: expected one of {SCOPES}, got {scope!r}")
        if not (isinstance(call_timeout, (int, float)) and call_timeout > 0):
            raise ValueError(f"call_timeout: expected seconds > 0, got {call_timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries: expected an int >= 0, got {retries!r}")
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or max_output_chars < 1:
            raise ValueError(f"max_output_chars: expected an int >= 1, got {max_output_chars!r}")
        self.spec = ServerSpec.make(command, url, env=env, headers=headers, cwd=cwd,
                                    startup_timeout=startup_timeout, stderr=stderr, fork_server=fork_server,
                                    preload=preload)
        self.scope = scope
        self.warm = warm
        self.include = None if include is None else tuple(include)
        self.call_timeout = float(call_timeout)
        self.retries = retries
        self.max_output_chars = max_output_chars
        self._tools: list[MCPTool] | None = None
        self._lock = threading.Lock()
        server_pool(self.spec, scope, warm=warm)  # validates warm and the fork server's command; starts on first use

    @property
    def pool(self) -> ServerPool:
        """This server's pool in this process (shared by every ``MCPTools`` with the same server and scope)."""
        return server_pool(self.spec, self.scope, warm=self.warm)

    def _listed(self) -> list[MCPTool]:
        with self._lock:
            if self._tools is None:
                schemas = [function_schema_of(t) for t in self.pool.tools()]
                if self.include is not None:
                    names = {s["function"]["name"] for s in schemas}
                    missing = sorted(set(self.include) - names)
                    if missing:
                        raise ValueError(f"include: {missing} not among the tools of {self.spec.describe()}: "
                                         f"{sorted(names)}")
                    schemas = [s for s in schemas if s["function"]["name"] in self.include]
                self._tools = [MCPTool(self, schema) for schema in schemas]
            return self._tools

    @overload
    def __getitem__(self, index: int) -> MCPTool: ...

    @overload
    def __getitem__(self, index: slice) -> list[MCPTool]: ...

    def __getitem__(self, index: int | slice) -> MCPTool | list[MCPTool]:
        return self._listed()[index]

    def __len__(self) -> int:
        return len(self._listed())

    def __iter__(self) -> Iterator[MCPTool]:
        return iter(self._listed())

    def open_episode(self, end_episode: EndEpisode) -> MCPEpisode:
        """Lease a connection for a new episode; its tools are bound to it (called by the env's ``reset``).

        Raises:
            ConnectionLost: The server could not be started or reached (``reset`` raises, so a rollout
                records the episode ``ENV_ERROR``).
        """
        return MCPEpisode(self, self.pool.acquire(), end_episode)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MCPTools({self.spec.describe()}, scope={self.scope!r})"
