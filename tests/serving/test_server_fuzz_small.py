"""A small run of ``scripts/server_fuzz.py``: the four servers, started as commands, take malformed requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="serve-env needs openenv-core (pip install 'agent-gym[openenv]')")

ROOT = Path(__file__).resolve().parents[2]


def test_malformed_requests_leave_every_server_alive_healthy_and_quick_to_stop(tmp_path):
    out = tmp_path / "fuzz.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "server_fuzz.py"), "--requests", "20",
                           "--max-body-mb", "16", "--fake-serve", "--light-stop", "--seed", "7", "--json", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert out.exists(), done.stdout + done.stderr
    results = {r["server"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"serve", "gateway", "serve-env", "serve-retriever"}
    for name, r in results.items():
        assert r["deaths"] == 0 and r["5xx"] == 0, (name, r["5xx_examples"], done.stdout[-2000:])
        assert r["health_p99_ms"] < 1000, (name, r)
        assert "http://127.0.0.1:" in r["start_line"] and "loopback only" in r["start_line"], r["start_line"]
        # stopped with SIGTERM while a request was in flight: out within seconds, with the signal's code
        assert r["stop_exit_code"] == 143 and r["stop_s"] < 6, (name, r)
    assert done.returncode == 0, done.stdout[-2000:]
