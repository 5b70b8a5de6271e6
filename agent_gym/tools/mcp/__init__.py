"""Model Context Protocol (MCP) servers as the tools of agent_gym envs.

* :class:`MCPTools`: the tools of an MCP server (stdio command or streamable HTTP URL) for any
  :class:`~agent_gym.env.core.AgentEnv`; ``scope="episode"`` gives every episode a server of its
  own from a warm pool, ``scope="shared"`` one server for all (stateless servers only).
* :mod:`agent_gym.tools.mcp.pool`: :class:`ServerPool` (warm, recycled connections) and :class:`Lease`.
* :mod:`agent_gym.tools.mcp.fork_server` (``fork_server=True``): a Python stdio server's processes forked
  from a preloaded one (:mod:`agent_gym.tools.mcp.zygote`) instead of started from scratch.
* :mod:`agent_gym.tools.mcp.connection`: :class:`ServerSpec` and one client connection
  (``mcp`` 1.x and 2.x).
* :mod:`agent_gym.tools.mcp.runtime`: the event-loop thread that bridges sync ``step`` calls to the
  async SDK.
* :mod:`agent_gym.tools.mcp.servers.notes`: a key-value notes server shipped with agent_gym.
* :mod:`agent_gym.tools.mcp.time_env`: an example env over the third-party ``mcp-server-time`` server.

The reverse, an env's tools served over MCP, is ``agent-gym serve-env ID --mcp``
(:mod:`agent_gym.serving.mcp_env_server`). Requires the ``mcp`` extra
(``pip install 'agent-gym[mcp]'``); see ``docs/mcp.md``.
"""

from __future__ import annotations

from agent_gym.tools.mcp.connection import (
    ConnectionLost,
    MCPConnectionError,
    ServerReplyError,
    ServerSpec,
    TransportDrop,
)
from agent_gym.tools.mcp.pool import SCOPES, Lease, ServerPool, server_pool, shutdown_pools
from agent_gym.tools.mcp.tools import SERVER_LOST_REASON, MCPEpisode, MCPTool, MCPTools

__all__ = [
    "SCOPES",
    "SERVER_LOST_REASON",
    "ConnectionLost",
    "Lease",
    "MCPConnectionError",
    "MCPEpisode",
    "MCPTool",
    "MCPTools",
    "ServerPool",
    "ServerReplyError",
    "ServerSpec",
    "TransportDrop",
    "notes_server_command",
    "server_pool",
    "shutdown_pools",
]


def notes_server_command() -> list[str]:
    """The command that runs the notes server shipped with agent_gym over stdio (this interpreter).

    The server's file is run as a script (it imports nothing from agent_gym), so it starts the same
    whether agent_gym is installed or only on the caller's ``PYTHONPATH``, which the MCP SDK does not
    pass on to a server's environment.
    """
    import sys
    from pathlib import Path

    return [sys.executable, str(Path(__file__).resolve().parent / "servers" / "notes.py")]
