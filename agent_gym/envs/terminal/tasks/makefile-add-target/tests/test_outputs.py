import subprocess
from pathlib import Path


def make(target):
    return subprocess.run(["make", "-C", "/app/proj", target], capture_output=True, text=True)
def test_targets():
    assert make("all").returncode == 0 and Path("/app/proj/out/done").exists()
    assert make("clean").returncode == 0 and not Path("/app/proj/out").exists()
    result = make("test")
    assert result.returncode == 0 and "check ok" in result.stdout
