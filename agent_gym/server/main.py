"""Former path of :mod:`agent_gym.reference_server.main`."""

from __future__ import annotations

from agent_gym.reference_server.main import add_server_arguments, build_app, main, serve

__all__ = ["add_server_arguments", "build_app", "main", "serve"]
