from pathlib import Path


def test_state():
    assert Path("/app/work/stage/marker.txt").read_text().strip() == "run 42"
    assert Path("/app/work/where.txt").read_text().strip() == "/app/work/stage"
