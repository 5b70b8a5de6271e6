from pathlib import Path


def test_rendered():
    assert Path("/app/rendered.txt").read_text().strip() == "db=postgres port=5433 mode=prod"
