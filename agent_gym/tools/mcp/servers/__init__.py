"""MCP servers shipped with agent_gym (they run offline, as subprocesses or over HTTP).

* :mod:`agent_gym.tools.mcp.servers.notes`: a key-value notes store, the server of the MCP
  examples, tests and benchmark (``python -m agent_gym.tools.mcp.servers.notes``).
"""

from __future__ import annotations

__all__: list[str] = []
