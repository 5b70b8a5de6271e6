"""The Web-v0 tests' browser pool: one per test module, closed with it, leaving no browser process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_gym.envs.web.pool import BrowserPool


@pytest.fixture(scope="module")
def pool() -> Iterator[BrowserPool]:
    """A pool of at most two idle browsers; every browser process is gone once the module's tests ended."""
    pool = BrowserPool(max_idle=2)
    yield pool
    pool.close()
    assert pool.stats()["processes"] == 0
