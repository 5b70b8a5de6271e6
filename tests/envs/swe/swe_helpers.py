"""Helpers of the SWE-v0 tests: a small task on a shipped library with a hidden test file."""

from agent_gym.envs.swe.generate import file_diff
from agent_gym.envs.swe.repo import library_path

TEXT = "textkit/text.py"
CORRECT = "    if len(text) <= width:\n        return text\n"
BUGGY = "    if len(text) < width:\n        return text\n"
HIDDEN = "tests/test_hidden.py"
HIDDEN_TESTS = """from textkit import truncate


def test_exact_width():
    assert truncate("exact", 5) == "exact"


def test_shorter():
    assert truncate("abc", 10) == "abc"
"""


def hidden_task() -> dict:
    """A SWE-bench-like task on textkit: a bug in truncate, a hidden test file added by the test patch."""
    clean = (library_path("textkit") / TEXT).read_text()
    assert CORRECT in clean
    buggy = clean.replace(CORRECT, BUGGY)
    return {
        "id": "textkit-truncate-exact",
        "problem_statement": "truncate() cuts a text whose length equals the width.",
        "library": "textkit",
        "bug_patch": file_diff(TEXT, clean, buggy),
        "test_patch": file_diff(HIDDEN, None, HIDDEN_TESTS),
        "FAIL_TO_PASS": [f"{HIDDEN}::test_exact_width"],
        "PASS_TO_PASS": f'["{HIDDEN}::test_shorter"]',  # SWE-bench's JSON text
    }

