"""Former path of :mod:`agent_gym.reference_server.app`."""

from __future__ import annotations

from agent_gym.reference_server.app import Faults, create_app

__all__ = ["Faults", "create_app"]
