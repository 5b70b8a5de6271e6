from pathlib import Path


def test_total():
    assert Path("/app/paid_total.txt").read_text().strip() == "60.75"
