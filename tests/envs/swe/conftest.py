import pytest
from swe_helpers import hidden_task

from agent_gym.sandbox import bwrap_available


def pytest_collection_modifyitems(config, items):
    if bwrap_available() is None:  # pragma: no cover - CI installs bubblewrap
        skip = pytest.mark.skip(reason="the SWE env needs bubblewrap (apt-get install bubblewrap)")
        for item in items:
            if "envs/swe" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def task() -> dict:
    return hidden_task()
