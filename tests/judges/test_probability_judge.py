"""ProbabilityJudge: the embedded model as an in-process judge read from its verdict-word probabilities."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from transformers import AutoTokenizer

from agent_gym.cli import main
from agent_gym.errors import JudgeError
from agent_gym.judges import JudgeCriterion, JudgeLog, Rubric, RuleCriterion
from agent_gym.judges.probability import EMBEDDED_TEMPLATES, ProbabilityJudge, anchored_score, embedded_judge
from agent_gym.judges.rubric import JudgedEpisode
from agent_gym.judges.specs import default_judge
from agent_gym.models.tiny import default_model_path

QUESTION = "Describe the city of Fouxpith: which country is it in and which river does it lie on?"
REFERENCE = "Fouxpith is a city in Grathia and lies on the Dryrk River."


@pytest.fixture(scope="module")
def judge():
    made = embedded_judge()
    yield made
    made.close()


def test_a_verdict_is_one_recorded_token_exact_forward_pass(judge):
    log = JudgeLog()
    raw = ProbabilityJudge(None, templates=EMBEDDED_TEMPLATES, anchored=False)
    p = raw.score(QUESTION, REFERENCE, "It is in Grathia.", log)
    assert 0.0 < p < 1.0 and len(log.calls) == 1 and log.calls[0].failure is None
    call = log.calls[0]
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    rendered = tokenizer.apply_chat_template(call.messages, tokenize=False, add_generation_prompt=True)
    assert call.prompt_token_ids == tokenizer.encode(rendered + "<answer>", add_special_tokens=False)
    assert call.text in ("yes", "no") and call.token_ids == tokenizer.encode(call.text, add_special_tokens=False)
    assert len(call.logprobs) == len(call.token_ids) and all(lp <= 0.0 for lp in call.logprobs)
    assert (call.text == "yes") == (p >= 0.5)
    segment = call.segment()
    assert segment is not None and segment.role == "judge" and segment.response_tokens.tolist() == call.token_ids
    assert raw.score(QUESTION, REFERENCE, "It is in Grathia.", log) == p and log.cache_hits == 1  # cached


def test_anchored_scores_lie_between_the_reference_and_the_empty_answer(judge):
    assert judge.score(QUESTION, REFERENCE, REFERENCE) == 1.0
    raw = ProbabilityJudge(None, templates=EMBEDDED_TEMPLATES, anchored=False)
    p_reference, p_empty = raw.score(QUESTION, REFERENCE, REFERENCE), raw.score(QUESTION, REFERENCE, "")
    for answer in ("I don't know", "Grathia, on the Dryrk River.", ":"):
        expected = anchored_score(raw.score(QUESTION, REFERENCE, answer), p_reference, p_empty)
        assert judge.score(QUESTION, REFERENCE, answer) == pytest.approx(expected)
    assert judge.score(QUESTION, REFERENCE, "") == judge.score(QUESTION, REFERENCE, " \n") == 0.0
    assert anchored_score(0.3, 0.5, 0.1) == pytest.approx(0.5) and anchored_score(0.05, 0.5, 0.1) == 0.0
    assert anchored_score(0.9, 0.5, 0.1) == 1.0 and anchored_score(0.0, 0.5, 0.1) == 0.0
    assert anchored_score(0.5, 0.4, 0.6) == 1.0 and anchored_score(0.3, 0.4, 0.6) == 0.0  # cannot tell them apart


def test_pairwise_verdicts_are_asked_in_both_orders(judge):
    log = JudgeLog()
    verdict = judge.compare(QUESTION, REFERENCE, REFERENCE, "I don't know", log)
    assert verdict.winner in ("A", "B", "tie") and isinstance(verdict.flipped, bool)
    assert [c.kind for c in log.calls] == ["pairwise", "pairwise"] and {c.text for c in log.calls} <= {"A", "B"}
    assert (verdict.winner == "tie") == verdict.flipped


def test_the_judge_pickles_without_its_model_and_copies_agree(judge):
    score = judge.score(QUESTION, REFERENCE, "Grathia")
    copy = pickle.loads(pickle.dumps(judge))
    assert copy.score(QUESTION, REFERENCE, "Grathia") == score
    copy.close()


def test_a_model_that_does_not_load_is_a_judge_error_never_a_score(tmp_path):
    log = JudgeLog()
    with pytest.raises(JudgeError) as caught:
        ProbabilityJudge(tmp_path / "missing").score(QUESTION, REFERENCE, "Grathia", log)
    assert caught.value.kind == "down" and "did not load" in str(caught.value)
    rubric = Rubric([RuleCriterion("rule", lambda e: 1.0), JudgeCriterion("judge", ProbabilityJudge(tmp_path))])
    (score,) = rubric.score([JudgedEpisode(QUESTION, REFERENCE, "Grathia")])
    assert score.outcome is None and score.failure is not None and score.failure.kind == "down"
    with pytest.raises(ValueError, match="verdict words"):
        ProbabilityJudge(templates=EMBEDDED_TEMPLATES.__class__(yes_no=("yes", "yes")))


def test_embedded_is_a_judge_spec_and_judge_check_runs_it_offline(capsys):
    assert isinstance(default_judge("embedded"), ProbabilityJudge)
    assert isinstance(default_judge(["embedded"]), ProbabilityJudge)
    code = main(["judge-check", "embedded", "--env", "agent_gym/RAGExplain-v0", "--tasks", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == (0 if result["ok"] else 1)
    assert result["failures"] == {} and result["agreement"]["judged"] == result["agreement"]["answers"] == 2
    assert result["master_keys"]["judged"] == 5 and result["position"]["judged"] == 1
    assert result["agreement"]["kappa"] is None or math.isfinite(result["agreement"]["kappa"])
