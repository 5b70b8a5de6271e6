import pytest
from sandbox_helpers import require_docker_engine


@pytest.fixture(scope="session")
def docker_host():
    """A Docker engine started for the test session (see sandbox_helpers.docker_engine), or a skip."""
    return require_docker_engine()
