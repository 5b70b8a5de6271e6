from pathlib import Path


def test_top():
    assert Path("/app/top_item.txt").read_text().strip() == "lamp"
