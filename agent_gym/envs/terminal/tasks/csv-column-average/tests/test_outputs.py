from pathlib import Path


def test_avg():
    assert Path("/app/blue_avg.txt").read_text().strip() == "80.0"
