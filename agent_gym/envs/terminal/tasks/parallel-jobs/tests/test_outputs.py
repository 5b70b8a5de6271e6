from pathlib import Path


def test_codes():
    assert Path("/app/codes.txt").read_text().strip() == "a=3 b=0"
    assert Path("/app/jobs/a.done").exists() and Path("/app/jobs/b.done").exists()
