import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

REFERENCE = Path(__file__).with_name("reference")  # the project's tests as the task shipped them


def _isolated_copy():
    """The agent's calc.py beside the shipped tests in a fresh directory: no file of the agent's but the module."""
    work = Path(tempfile.mkdtemp(prefix="calc-"))
    shutil.copyfile("/app/calc/calc.py", work / "calc.py")
    shutil.copyfile(REFERENCE / "test_calc.py", work / "test_calc.py")
    (work / "pytest.ini").write_text("[pytest]\n")
    return work


def _clean_env():
    return {"PATH": os.environ["PATH"], "HOME": str(tempfile.gettempdir()), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_project_tests_pass():
    # -I: no start directory or PYTHON* variable on the path; -c/--rootdir/--noconftest: only our configuration
    work = _isolated_copy()
    result = subprocess.run(["python3", "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
                             "-c", str(work / "pytest.ini"), "--rootdir", str(work), str(work / "test_calc.py")],
                            cwd=work, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]


def test_add_is_fixed():
    # add itself, in a fresh interpreter, on numbers it has not seen: a plain int sum
    work = _isolated_copy()
    pairs = [(random.randint(-10**9, 10**9), random.randint(-10**9, 10**9)) for _ in range(5)]
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); from calc import add; "
            "print(json.dumps([[type(r).__name__, r] for r in (add(*p) for p in json.loads(sys.stdin.read()))]))")
    result = subprocess.run(["python3", "-I", "-c", code, str(work)], input=json.dumps(pairs), cwd=work,
                            env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [["int", a + b] for a, b in pairs]


def test_test_file_unchanged():
    assert Path("/app/calc/test_calc.py").read_bytes() == (REFERENCE / "test_calc.py").read_bytes()
