"""``agent-gym report`` end to end on files written by ``agent-gym rollout`` and ``agent_gym.export``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agent_gym.cli import main
from agent_gym.cli.rollout import format_summary, summarize
from agent_gym.export import read_trajectories, write_jsonl, write_parquet


def _value(text, label):
    match = re.search(rf"^{re.escape(label)}\s+\|?\s*(.+?)\s*$", text, re.M)
    assert match, f"{label!r} not in\n{text}"
    return match.group(1)


@pytest.fixture(scope="module")
def batches():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
    try:
        from report_fakes import make_batch
    finally:
        sys.path.pop(0)
    return make_batch(), make_batch(num_tasks=4, samples_per_task=3, start=10, kinds=("oracle", "oracle", "wrong"))


def test_report_of_a_rollout_file_matches_its_summary(start_server, tiny_model_dir, tmp_path, capsys):
    server = start_server(fake_tokens=4)
    out = tmp_path / "rollouts.jsonl"
    assert main(["rollout", "agent_gym/ToolUse-v0", "--server", str(server), "--model", str(tiny_model_dir),
                 "--episodes", "4", "--samples-per-task", "2", "--max-steps", "2", "--max-tokens", "8",
                 "--out", str(out), "--no-progress"]) == 0
    rollout_text = capsys.readouterr().out
    html = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(html)]) == 0
    report_text = capsys.readouterr().out
    expected = format_summary(summarize(read_trajectories(out), 1.0))
    for label in ("episodes", "mean reward", "success rate", "mean steps", "tokens sampled", "statuses"):
        assert _value(report_text, label) == _value(expected, label) == _value(rollout_text, label), label
    assert f"wrote {html}" in report_text
    page = html.read_text()
    assert not re.search(r"(?:src|href)\s*=\s*\"https?:", page) and "data:image/png;base64," in page


def test_several_files_side_by_side_and_by_field(batches, tmp_path, capsys):
    before, after = batches
    write_jsonl(before, tmp_path / "before.jsonl")
    write_parquet(after, tmp_path / "after.parquet")
    code = main(["report", str(tmp_path / "before.jsonl"), str(tmp_path / "after.parquet"), "--by", "answer_type",
                 "--out", str(tmp_path / "cmp.html"), "--dpi", "40"])
    assert code == 0
    text = capsys.readouterr().out
    assert re.search(r"^\s+before\.jsonl\s+after\.parquet$", text, re.M)
    assert re.search(rf"^episodes\s+{len(before)}\s+{len(after)}$", text, re.M)
    assert "By env and answer_type" in text
    assert "before.jsonl" in (tmp_path / "cmp.html").read_text()


def test_an_interrupted_file_reports_with_a_note(batches, tmp_path, capsys):
    path = tmp_path / "cut.jsonl"
    write_jsonl(batches[0], path)
    path.write_bytes(path.read_bytes()[:-100])
    assert main(["report", str(path), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "skipped 1 incomplete last line" in text
    assert re.search(rf"^episodes\s+{len(batches[0]) - 1}$", text, re.M)


@pytest.mark.parametrize("content, message", [
    ("", "holds no trajectories"),
    ('{"hello": 1}\n', "expected a trajectory record"),
])
def test_bad_files_exit_2_naming_the_file(tmp_path, capsys, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert main(["report", str(path), "--no-html"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err


def test_bad_arguments(batches, tmp_path, capsys):
    write_jsonl(batches[0][:2], tmp_path / "r.jsonl")
    assert main(["report", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "r.pdf")]) == 2
    assert "--out" in capsys.readouterr().err


def test_missing_matplotlib(batches, tmp_path, capsys, monkeypatch):
    write_jsonl(batches[0], tmp_path / "r.jsonl")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "r.html")]) == 1
    captured = capsys.readouterr()
    assert "mean reward" in captured.out  # the tables are printed first
    assert "agent-gym[report]" in captured.err
    assert not (tmp_path / "r.html").exists()
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(tmp_path / "r.jsonl")]) == 0  # no --out: tables and a hint
    assert "agent-gym[report]" in capsys.readouterr().err
