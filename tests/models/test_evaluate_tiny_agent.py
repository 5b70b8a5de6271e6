"""The held-out evaluation: task choice, well-formed turns, a small real run and its table."""

from __future__ import annotations

import pytest

from agent_gym.envs.tool_use.tasks import TASK_FAMILIES
from agent_gym.models.evaluate_tiny_agent import _well_formed, evaluate, format_table, held_out_tasks, main


def test_held_out_tasks_are_builtin_and_balanced():
    tasks = held_out_tasks(3)
    assert [t["family"] for t in tasks] == [f for f in TASK_FAMILIES for _ in range(3)]
    assert all(not t["id"].startswith("s") for t in tasks)
    with pytest.raises(ValueError, match="per_family"):
        held_out_tasks(0)


@pytest.mark.parametrize(
    "info, expected",
    [
        ({"tool_calls": [{"kind": None}]}, True),
        ({"tool_calls": [{"kind": "tool_error"}], "error": "no item named 'x'"}, True),
        ({"tool_calls": [{"kind": "bad_arguments"}], "error": "invalid arguments"}, False),
        ({"tool_calls": [{"kind": "unknown_tool"}], "error": "unknown tool"}, False),
        ({"tool_calls": [], "parse_errors": ["bad JSON"], "error": "bad JSON"}, False),
        ({"tool_calls": [], "error": "the message has no <tool_call> and no <answer>"}, False),
        ({"tool_calls": []}, True),  # an answer
    ],
)
def test_well_formed_turns(info, expected):
    assert _well_formed(info) is expected


def test_a_small_evaluation_through_collect(capsys):
    report = evaluate(per_family=1, temperatures=(0.0,), n_parallel=4, max_tokens=64)
    table = report["results"]["0.0"]
    assert set(table) == {*TASK_FAMILIES, "all"} and table["all"]["episodes"] == 4
    assert 0.0 <= table["all"]["success"] <= 1.0 and table["all"]["steps"] >= 1
    text = format_table(report)
    assert text.count("\n") == 2 + len(TASK_FAMILIES) and "**all** (4)" in text
    assert main(["--per-family", "1", "--temperatures", "0"]) == 0
    assert "held-out tasks" in capsys.readouterr().out
