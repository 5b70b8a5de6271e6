import subprocess
from pathlib import Path


def test_build():
    assert Path("/app/project/build/app.txt").read_text() == "HEADER\nBODY\n"
def test_make_is_clean():
    Path("/app/project/build/app.txt").unlink()
    assert subprocess.run(["make", "-C", "/app/project"], capture_output=True).returncode == 0
    assert Path("/app/project/build/app.txt").read_text() == "HEADER\nBODY\n"
