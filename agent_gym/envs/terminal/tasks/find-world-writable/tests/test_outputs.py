import os
import stat
from pathlib import Path


def test_list_and_fix():
    assert Path("/app/world_writable.txt").read_text().split() == ["a/open.txt", "b/c/wide.txt"]
    for p in Path("/app/tree").rglob("*"):
        if p.is_file():
            assert not stat.S_IMODE(os.stat(p).st_mode) & stat.S_IWOTH
