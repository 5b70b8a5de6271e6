import os
from pathlib import Path


def test_link():
    assert os.readlink("/app/current") == "releases/2024-03-09"
    assert Path("/app/current/VERSION").read_text().strip() == "3"
