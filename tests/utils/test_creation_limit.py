"""The host-wide creation-rate limit: one token bucket shared by separate processes, used by the sandboxes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_gym.errors import ConfigError
from agent_gym.utils.creation_limit import CreationLimiter, creation_limiter, wait_for_creation

# Each process takes tokens from the same bucket and prints when it got each one (CLOCK_MONOTONIC,
# which all processes of the host share).
_TAKER = """
import json, sys, time
from agent_gym.utils.creation_limit import CreationLimiter
limiter = CreationLimiter("sandbox", rate=float(sys.argv[1]), burst=1, directory=sys.argv[2])
stamps = []
for _ in range(int(sys.argv[3])):
    limiter.acquire(timeout=120)
    stamps.append(time.monotonic())
print(json.dumps(stamps))
"""


def test_processes_share_one_bucket(tmp_path: Path):
    rate, processes, each = 10.0, 3, 4
    takers = [subprocess.Popen([sys.executable, "-c", _TAKER, str(rate), str(tmp_path), str(each)],
                               stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    stamps = sorted(t for p in takers for t in json.loads(p.communicate(timeout=300)[0]))
    assert len(stamps) == processes * each
    # burst 1, then `rate` per second over the whole host: the n-th token comes no sooner than
    # (n - 1) / rate after the first, however the processes interleave (a loaded machine only delays them)
    for n, stamp in enumerate(stamps):
        assert stamp - stamps[0] >= n / rate - 1e-3, (n, stamp - stamps[0])
    assert len(list(tmp_path.glob("agent_gym-sandbox-creations-*.bucket"))) == 1


def test_burst_then_rate_and_timeout(tmp_path: Path):
    limiter = CreationLimiter("browser", rate=2.0, burst=3, directory=tmp_path)
    started = time.monotonic()
    for _ in range(3):
        limiter.acquire()  # the burst
    with pytest.raises(TimeoutError, match="no browser creation token within 0.01s"):
        limiter.acquire(timeout=0.01)  # the next token is up to 0.5 s away
    limiter.acquire()
    assert time.monotonic() - started >= 1 / 2.0 - 1e-3  # the fourth waited for the refill


def test_configured_by_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("AGENT_GYM_SANDBOX_CREATION_RATE", raising=False)
    assert creation_limiter("sandbox") is None
    assert wait_for_creation("sandbox") == 0.0
    monkeypatch.setenv("AGENT_GYM_CREATION_LIMIT_DIR", str(tmp_path))
    monkeypatch.setenv("AGENT_GYM_SANDBOX_CREATION_RATE", "4")
    monkeypatch.setenv("AGENT_GYM_SANDBOX_CREATION_BURST", "2")
    limiter = creation_limiter("sandbox")
    assert limiter is not None and (limiter.rate, limiter.burst) == (4.0, 2.0)
    assert limiter.path.parent == tmp_path
    monkeypatch.setenv("AGENT_GYM_SANDBOX_CREATION_RATE", "fast")
    with pytest.raises(ConfigError, match="expected numbers"):
        creation_limiter("sandbox")
    with pytest.raises(ConfigError, match="kind"):
        CreationLimiter("../etc", rate=1)
    with pytest.raises(ConfigError, match="rate"):
        CreationLimiter("sandbox", rate=0)


@pytest.mark.skipif(sys.platform != "linux", reason="the local sandbox runs on Linux")
def test_local_sandboxes_wait_for_the_host_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from agent_gym.sandbox import LocalSandbox, bwrap_available

    if bwrap_available() is None:
        pytest.skip("bubblewrap is not installed")
    monkeypatch.setenv("AGENT_GYM_CREATION_LIMIT_DIR", str(tmp_path))
    monkeypatch.setenv("AGENT_GYM_SANDBOX_CREATION_RATE", "4")
    started = time.monotonic()
    boxes = [LocalSandbox(timeout=10) for _ in range(3)]
    try:
        assert all(box.run("echo ok").output.strip() == "ok" for box in boxes)
    finally:
        for box in boxes:
            box.close()
    assert time.monotonic() - started >= 2 / 4 - 1e-3  # burst 1, then 4 per second
    assert len(list(tmp_path.glob("agent_gym-sandbox-creations-*.bucket"))) == 1
