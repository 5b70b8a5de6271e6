import json
import math
import random

import pytest

from agent_gym.errors import JudgeError
from agent_gym.judges import parse_preference, parse_score, parse_scores
from agent_gym.judges.verdicts import json_objects


@pytest.mark.parametrize("text, score", [
    ('{"score": 7}', 0.7),
    ('The answer matches the reference.\n{"score": 10}', 1.0),
    ('```json\n{"score": 0, "reason": "wrong"}\n```', 0.0),
    ('Reasoning {not json} then {"score": 2.5}', 0.25),
])
def test_a_single_verdict_is_read(text, score):
    assert parse_score(text) == pytest.approx(score)


@pytest.mark.parametrize("text, kind", [
    ("", "unparseable"),
    (":", "unparseable"),
    ("Thought process:", "unparseable"),
    ("Score: 7", "unparseable"),  # no verdict object: the number is not guessed
    ('{"grade": 7}', "schema"),
    ('{"score": "7"}', "schema"),
    ('{"score": true}', "schema"),
    ('{"score": 7, "bonus": 3}', "schema"),
    ('{"score": 11}', "out_of_range"),
    ('{"score": -1}', "out_of_range"),
    ('{"score": NaN}', "out_of_range"),
    ('{"score": 3} and also {"score": 9}', "ambiguous"),
])
def test_anything_else_is_a_classified_failure(text, kind):
    with pytest.raises(JudgeError) as caught:
        parse_score(text)
    assert caught.value.kind == kind


def test_pairwise_and_group_verdicts():
    assert parse_preference('{"winner": "b"}') == "B" and parse_preference('{"winner": "Tie"}') == "tie"
    with pytest.raises(JudgeError, match="schema"):
        parse_preference('{"winner": "C"}')
    assert parse_scores('{"scores": [0, 5, 10]}', 3) == [0.0, 0.5, 1.0]
    for text, kind in (('{"scores": [1, 2]}', "wrong_count"), ('{"scores": [1, 2, 30]}', "out_of_range"),
                       ('{"scores": "1,2,3"}', "schema")):
        with pytest.raises(JudgeError) as caught:
            parse_scores(text, 3)
        assert caught.value.kind == kind


def _fuzzed_reply(rng: random.Random) -> tuple[str, float | None]:
    """A random judge reply and the score it must give (None: it must be a classified failure)."""
    words = ["score", "the", "answer", "is", "7", "{", "}", ":", '"', "[", "]", "10", "-3", "correct", "\n"]
    prose = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
    pick = rng.randrange(7)
    if pick == 0:  # random text (may contain braces and numbers)
        return prose, None
    if pick == 1:  # a valid verdict inside prose
        value = rng.choice([0, 1, 2.5, 7, 10, rng.uniform(0, 10)])
        return f"{prose.replace('{', '(').replace('}', ')')}\n{json.dumps({'score': value})}", value / 10
    if pick == 2:  # out of range
        return json.dumps({"score": rng.choice([10.5, -0.1, 1e9, -7, 100])}), None
    if pick == 3:  # wrong type
        return json.dumps({"score": rng.choice(["7", None, [7], {"v": 7}, True])}), None
    if pick == 4:  # a group verdict with the wrong count where one score is asked
        return json.dumps({"scores": [rng.randint(0, 10) for _ in range(rng.randint(0, 9))]}), None
    if pick == 5:  # two verdicts
        return f'{{"score": {rng.randint(0, 10)}}} {prose} {{"score": {rng.randint(0, 10)}}}', None
    cut = json.dumps({"score": rng.randint(0, 10)})  # a verdict cut short
    return prose + cut[: rng.randint(0, len(cut) - 1)], None


def test_fuzzed_replies_are_valid_or_classified_and_no_score_is_invented():
    rng = random.Random(7)
    valid = classified = invented = 0
    total = 20_000
    for _ in range(total):
        text, expected = _fuzzed_reply(rng)
        try:
            got = parse_score(text)
        except JudgeError:
            classified += 1
            invented += 0
            continue
        valid += 1
        if expected is None or not math.isclose(got, expected, abs_tol=1e-12):
            invented += 1
    print(f"\nfuzzed judge replies: {total}, valid {valid}, classified failures {classified}, invented {invented}")
    assert valid + classified == total and invented == 0
    assert valid > 1000 and classified > 10_000


def test_group_verdicts_fuzzed_count_is_exact():
    rng = random.Random(3)
    for _ in range(2000):
        count = rng.randint(1, 8)
        given = [rng.randint(0, 10) for _ in range(rng.randint(0, 9))]
        text = "ranking: " + json.dumps({"scores": given})
        try:
            scores = parse_scores(text, count)
        except JudgeError as exc:
            assert exc.kind in ("wrong_count", "out_of_range") and len(given) != count
        else:
            assert len(given) == count and scores == [g / 10 for g in given]


def test_json_objects_reads_nested_and_skips_broken():
    assert json_objects('x {"a": {"b": 1}} y {bad} {"c": 2}') == [{"a": {"b": 1}}, {"c": 2}]
