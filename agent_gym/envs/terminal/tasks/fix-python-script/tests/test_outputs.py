
import subprocess


def test_output():
    out = subprocess.run(["python3", "/app/stats.py", "/app/numbers.txt"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "mean=4.25"
