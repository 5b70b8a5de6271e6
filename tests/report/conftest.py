"""Fixtures of the report tests: two batches of real ToolUse-v0 episodes."""

import pytest
from report_fakes import make_batch


@pytest.fixture(scope="session")
def batch():
    return make_batch()


@pytest.fixture(scope="session")
def other_batch():
    return make_batch(num_tasks=4, samples_per_task=3, start=10, kinds=("oracle", "oracle", "wrong"))
