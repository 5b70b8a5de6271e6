"""Fixtures of the training-contract tests: one batch of episodes with every kind of infrastructure failure."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from training_faults import Episode, build_batch

from agent_gym.models import default_model_path


@pytest.fixture(scope="session")
def tiny_agent_tokenizer() -> Any:
    """The embedded tiny agent's tokenizer (its vocabulary is small: trainer steps on CPU are quick)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.fixture(scope="session")
def fault_groups(tiny_agent_tokenizer) -> list[list[Episode]]:
    """:func:`training_faults.build_batch`: one group of three episodes of one task per failure kind."""
    env = gym.make("agent_gym/ToolUse-v0")
    tasks = env.unwrapped.tasks
    lookup = [t for t in tasks if t["family"] == "lookup"]
    arithmetic = [t for t in tasks if t["family"] == "arithmetic"]
    # the tool runner fails on a second call turn and the fan-out spans three turns: two-call tasks there
    groups = build_batch(tiny_agent_tokenizer, lookup[:3] + arithmetic[1:2] + lookup[3:7] + arithmetic[:1])
    statuses = {g[0].kind: g[0].trajectory.status for g in groups}
    assert statuses == {"server_down": "POLICY_ERROR", "server_lost": "POLICY_ERROR", "env_error": "ENV_ERROR",
                        "tool_runner": "ENV_ERROR", "timeout": "TIMEOUT", "grader": "ENV_ERROR",
                        "server_abort": "POLICY_ERROR", "judge": "JUDGE_ERROR", "lost_after_fanout": "POLICY_ERROR"}
    assert all(e.trajectory.status == "ENV_DONE" for g in groups for e in g if not e.failed)
    return groups


@pytest.fixture(scope="session")
def fault_episodes(fault_groups) -> list[Episode]:
    """The batch, flat."""
    return [e for g in fault_groups for e in g]
