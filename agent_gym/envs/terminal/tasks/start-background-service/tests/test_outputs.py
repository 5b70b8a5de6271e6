from pathlib import Path


def test_pid_recorded():
    pid = Path("/app/pid.txt").read_text().strip()
    assert pid.isdigit() and pid == Path("/app/service.pid").read_text().strip()
    assert Path("/app/heartbeat.txt").read_text().startswith("beat")
