import pytest
from judge_faults import ScriptedJudge, number_rule

from agent_gym.cli import main
from agent_gym.judges import LLMJudge
from agent_gym.judges.check import MASTER_KEYS, cohen_kappa, format_check, judge_check


def test_cohen_kappa():
    assert cohen_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    assert cohen_kappa([True, True, False, False], [True, False, True, False]) == 0.0
    assert cohen_kappa([], []) is None and cohen_kappa([True], [True]) == 1.0
    assert cohen_kappa([True, False, True, True], [True, False, False, True]) == pytest.approx(0.5)


def test_a_strict_judge_agrees_with_the_rule_grader_and_fails_every_master_key():
    result = judge_check(LLMJudge(ScriptedJudge(number_rule)), "agent_gym/ToolUse-v0", tasks=6)
    assert result["agreement"]["kappa"] == 1.0 and result["agreement"]["judged"] == 12
    assert result["position"]["flip_rate"] == 0.0 and result["position"]["pairs"] == 6
    assert result["master_keys"] == {"answers": 6 * len(MASTER_KEYS), "judged": 30, "passed": 0, "pass_rate": 0.0,
                                     "passed_answers": []}
    assert result["ok"] and "result: ok" in format_check(result)


def test_a_lenient_judge_is_caught_by_the_master_keys():
    result = judge_check(LLMJudge(ScriptedJudge(lambda reference, answer: 10.0)), "agent_gym/ToolUse-v0", tasks=3)
    assert not result["ok"] and result["master_keys"]["pass_rate"] == 1.0
    assert "" in result["master_keys"]["passed_answers"] and result["agreement"]["kappa"] == 0.0
    assert "FAILED" in format_check(result)


def test_judge_check_cli_counts_an_unreachable_judge_as_failures(capsys):
    code = main(["judge-check", "127.0.0.1:9", "--tasks", "1", "--judge-retries", "0", "--judge-timeout", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "judge failures (no verdict): down=" in out and "kappa n/a" in out
    assert main(["judge-check", "127.0.0.1:9", "--env", "no/Such-v0"]) == 2
