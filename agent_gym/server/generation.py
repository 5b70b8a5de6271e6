"""Former path of :mod:`agent_gym.reference_server.backends` (the engines are now named backends)."""

from __future__ import annotations

from agent_gym.reference_server.backends import (
    FakeBackend,
    FakeEngine,
    GenRequest,
    SeqResult,
    TransformersBackend,
    TransformersEngine,
)

__all__ = ["FakeBackend", "FakeEngine", "GenRequest", "SeqResult", "TransformersBackend", "TransformersEngine"]
