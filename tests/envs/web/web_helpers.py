"""Shared pieces of the Web-v0 tests: the skip reason, a pool per module, episode drivers, process counts."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agent_gym.envs.web.browser import browser_unavailable_reason

UNAVAILABLE = browser_unavailable_reason()
requires_browser = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"Web-v0 needs a browser: {UNAVAILABLE}")


def task(page: str, seed: int = 0) -> dict[str, Any]:
    """The MiniWoB++ task of ``page`` with instance ``seed``."""
    return {"id": f"{page}/{seed}", "question": f"MiniWoB++ task {page}", "ground_truth": "", "source": "miniwob",
            "page": page, "seed": seed}


def play_oracle(env: Any, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Play the oracle to the end of an episode; returns the last observation and info."""
    env.reset(options=options)
    while True:
        obs, _, terminated, truncated, info = env.step(env.oracle_action())
        if terminated or truncated:
            return obs, info


def browser_processes() -> list[Any]:
    """The Chromium and Playwright-driver processes under this test process."""
    import psutil

    found = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "chrom" in line or "run-driver" in line:
            found.append(proc)
    return found
