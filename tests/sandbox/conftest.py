import pytest
from sandbox_helpers import SMALL, require_docker_engine, sandbox_processes

from agent_gym.sandbox import LocalSandbox


@pytest.fixture
def box():
    sandbox = LocalSandbox(SMALL, timeout=10)
    yield sandbox
    sandbox.close()
    assert sandbox_processes(sandbox) == [], "processes of the sandbox survived close()"


@pytest.fixture(scope="session")
def docker_host():
    """A Docker engine started for the test session (see sandbox_helpers.docker_engine), or a skip."""
    return require_docker_engine()
