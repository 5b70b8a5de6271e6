from pathlib import Path


def test_sorted():
    assert sorted(p.name for p in Path("/app/sorted/txt").iterdir()) == ["a.txt", "notes.txt"]
    assert sorted(p.name for p in Path("/app/sorted/csv").iterdir()) == ["data.csv"]
    assert sorted(p.name for p in Path("/app/sorted/log").iterdir()) == ["x.log", "y.log"]
    assert list(Path("/app/inbox").iterdir()) == []
