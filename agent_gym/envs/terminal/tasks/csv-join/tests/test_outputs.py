from pathlib import Path


def test_report():
    assert Path("/app/report.csv").read_text().split() == ["name,total", "ana,35", "ben,0", "cho,7"]
