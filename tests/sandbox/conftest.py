import pytest
from sandbox_helpers import SMALL, sandbox_processes

from agent_gym.sandbox import LocalSandbox


@pytest.fixture
def box():
    sandbox = LocalSandbox(SMALL, timeout=10)
    yield sandbox
    sandbox.close()
    assert sandbox_processes(sandbox) == [], "processes of the sandbox survived close()"
