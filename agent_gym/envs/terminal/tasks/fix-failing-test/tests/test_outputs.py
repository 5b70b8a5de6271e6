import subprocess
from pathlib import Path


def test_project_tests_pass():
    result = subprocess.run(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd="/app/calc",
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
def test_test_file_unchanged():
    assert "assert add(2, 3) == 5" in Path("/app/calc/test_calc.py").read_text()
