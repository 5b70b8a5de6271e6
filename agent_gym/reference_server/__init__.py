"""Reference OpenAI-compatible server on transformers that speaks vLLM's dialect.

Run it with ``python -m agent_gym.reference_server --model PATH --port 8000`` or ``agent-gym serve``.
It exists for CPU development and tests of clients (token-in completions with ``return_token_ids``,
raw or processed logprobs as vLLM's ``--logprobs-mode``, raw by default, vLLM error bodies); it is not
a production server.
Concurrent requests are decoded together by the :class:`TransformersBackend` with the continuous
batching engine ``TransformersPolicy`` uses (:class:`~agent_gym.inference.BatchEngine`); a
request's ``seed`` gives the same ids alone or in a batch (ids drawn by inverse CDF, not the ids
of versions that drew with ``torch.multinomial``).

Testing aids (never enable them in real use): ``--fake-tokens N [--fake-latency-ms M]`` answers
without a model; ``--fail-first N --fail-status S``, ``--hang``/``--hang-after N``,
``--malformed-json`` and ``--die-after N`` inject faults into the generation endpoints.
"""

from __future__ import annotations

from agent_gym.reference_server.app import Faults, create_app
from agent_gym.reference_server.backends import FakeBackend, GenRequest, SeqResult, TransformersBackend
from agent_gym.reference_server.main import add_server_arguments, build_app, main, serve

__all__ = [
    "FakeBackend",
    "Faults",
    "GenRequest",
    "SeqResult",
    "TransformersBackend",
    "add_server_arguments",
    "build_app",
    "create_app",
    "main",
    "serve",
]
