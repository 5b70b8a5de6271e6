from pathlib import Path


def test_largest():
    assert Path("/app/largest.txt").read_text().strip() == "deep/er/big.dat"
