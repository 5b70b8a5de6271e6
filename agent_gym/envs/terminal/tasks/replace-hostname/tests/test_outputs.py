from pathlib import Path


def test_replaced():
    for name in ("a.conf", "sub/b.conf"):
        text = Path("/app/config", name).read_text()
        assert "old.example.com" not in text and "new.example.com" in text
    assert "old.example.com" in Path("/app/config/keep.txt").read_text()
