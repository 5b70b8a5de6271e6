from pathlib import Path


def test_top():
    assert Path("/app/top.txt").read_text().split() == ["the", "cat", "sat"]
