"""Former name of :mod:`agent_gym.reference_server` (the reference vLLM-compatible server).

``python -m agent_gym.server`` and imports from here keep working; new code uses
:mod:`agent_gym.reference_server`. ``TransformersEngine`` and ``FakeEngine`` are the former
names of :class:`~agent_gym.reference_server.TransformersBackend` and
:class:`~agent_gym.reference_server.FakeBackend`.
"""

from __future__ import annotations

from agent_gym.reference_server import (
    FakeBackend,
    Faults,
    GenRequest,
    SeqResult,
    TransformersBackend,
    add_server_arguments,
    build_app,
    create_app,
    main,
    serve,
)
from agent_gym.reference_server.backends import FakeEngine, TransformersEngine

__all__ = [
    "FakeBackend",
    "FakeEngine",
    "Faults",
    "GenRequest",
    "SeqResult",
    "TransformersBackend",
    "TransformersEngine",
    "add_server_arguments",
    "build_app",
    "create_app",
    "main",
    "serve",
]
