
import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout
def test_commit():
    assert git("log", "-1", "--format=%s").strip() == "Add feature"
    assert git("status", "--porcelain") == ""
    assert int(git("rev-list", "--count", "HEAD")) == 2
    assert "feature.py" in git("show", "--name-only", "--format=")
