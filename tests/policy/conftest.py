"""Server processes used by the policy tests, started together once per session."""

from __future__ import annotations

from typing import Any

import pytest

FLEET: dict[str, dict[str, Any]] = {
    "fake_a": {"fake_tokens": 3, "fake_latency_ms": 5},
    "fake_b": {"fake_tokens": 3, "fake_latency_ms": 5},
    "dies": {"fake_tokens": 3, "die_after": 2},
    "e500": {"fake_tokens": 3, "fail_first": 2, "fail_status": 500},
    "e429": {"fake_tokens": 3, "fail_first": 2, "fail_status": 429},
    "hang": {"fake_tokens": 3, "hang": True},
    "malformed": {"fake_tokens": 3, "malformed_json": True},
}


@pytest.fixture(scope="session")
def policy_fleet(start_servers, tiny_deepseek_model_dir, _server_registry) -> dict[str, Any]:
    """``{name: ServerProcess}``: fake-answer servers (two healthy, five with injected faults) and a
    DeepSeek-vocabulary model server, all real processes started concurrently (kept for the session)."""
    names = [*FLEET, "deepseek"]
    options = [*FLEET.values(), {"model": str(tiny_deepseek_model_dir), "max_model_len": 4096}]
    servers = start_servers(*options)
    _server_registry.keep(*servers)
    return dict(zip(names, servers, strict=False))
