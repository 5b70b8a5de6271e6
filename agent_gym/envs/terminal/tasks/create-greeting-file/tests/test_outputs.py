from pathlib import Path


def test_file_content():
    assert Path("/app/greeting.txt").read_text() == "Hello, sandbox!\n"
