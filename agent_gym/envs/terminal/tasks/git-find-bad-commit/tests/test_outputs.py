import subprocess
from pathlib import Path


def test_hash():
    expected = subprocess.run(["git", "-C", "/app/repo", "log", "--format=%H", "--grep", "tune logging"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert len(expected) == 40
    assert Path("/app/bad_commit.txt").read_text().strip() == expected
