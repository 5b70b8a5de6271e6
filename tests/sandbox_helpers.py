"""Shared helpers of the sandbox and Terminal-v0 tests (importable by name from any test module)."""

import os

import pytest

from agent_gym.sandbox import SandboxLimits, bwrap_available

needs_bwrap = pytest.mark.skipif(
    bwrap_available() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

SMALL = SandboxLimits(memory_mb=512, processes=64, file_size_mb=32, workspace_mb=64, tmp_mb=32, output_bytes=4096)


def sandbox_processes(box):
    """Host PIDs of processes that belong to ``box`` (its user id as root, else its namespace's first process)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid = int(status.split("\nUid:\t", 1)[1].split()[0])
        if (os.geteuid() == 0 and uid == box.uid) or int(name) == box.host_pid:
            found.append(int(name))
    return found
