
import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout
def test_branches():
    assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "hotfix"
    assert git("show", "hotfix:version.txt").strip() == "version = 2"
    assert git("show", "main:version.txt").strip() == "version = 1"
