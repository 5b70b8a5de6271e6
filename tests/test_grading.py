from __future__ import annotations

import pytest

from agent_gym.grading import (
    answer_matches,
    exact_match,
    infer_answer_type,
    last_number,
    normalize_text,
    numbers_close,
    qa_normalize,
    round_answer,
    token_f1,
)


def test_qa_normalize_strips_case_punctuation_articles_and_spaces():
    assert qa_normalize("  The  Eiffel-Tower, in Paris! ") == "eiffeltower in paris"
    assert qa_normalize("An apple a day") == "apple day"
    assert qa_normalize("theatre") == "theatre"  # articles only as whole words


def test_exact_match_over_aliases():
    assert exact_match("the Beatles", ["Beatles", "The Fab Four"]) == 1.0
    assert exact_match("The Fab four.", ["Beatles", "The Fab Four"]) == 1.0
    assert exact_match("Rolling Stones", ["Beatles"]) == 0.0
    assert exact_match("Paris", "paris") == 1.0
    assert exact_match("x", []) == 0.0


def test_token_f1_takes_the_best_alias():
    assert token_f1("Barack Obama", ["Obama"]) == pytest.approx(2 / 3)
    assert token_f1("Barack Obama", ["Obama", "Barack Hussein Obama"]) == pytest.approx(0.8)
    assert token_f1("the", ["a"]) == 1.0  # both normalise to nothing
    assert token_f1("cat", ["dog"]) == 0.0
    assert token_f1("cat cat", ["cat"]) == pytest.approx(2 / 3)
    assert token_f1("x", []) == 0.0


def test_typed_answers():
    assert answer_matches("1,234.5", "1234.5", "number", 0.01)
    assert not answer_matches("12.02", "12", "number", 0.01)
    assert answer_matches("March 5, 2024", "2024-03-05", "date")
    assert not answer_matches("Monday or Tuesday", "Tuesday", "weekday")
    assert answer_matches("  tamsin works. ", "Tamsin Works", "string")
    assert infer_answer_type(3) == "number" and infer_answer_type("2020-01-01") == "date"
    assert infer_answer_type(True) == "string"
    assert last_number("no digits") is None and last_number("a 1e999 b") is None
    assert normalize_text("ＡＢＣ!") == "abc"


def test_rounding_and_closeness():
    assert round_answer(2.0) == "2" and round_answer(-0.001) == "0" and round_answer(1.005) in ("1", "1.01")
    assert round_answer(3.14159) == "3.14"
    assert numbers_close(1.0, 1.005, tolerance=0.01) and not numbers_close(1.0, 1.05, tolerance=0.01)
    assert numbers_close(1e9 + 1, 1e9, tolerance=0)  # relative


def test_deterministic_random_is_reproducible():
    import datetime as dt
    import pickle

    from agent_gym.generation import DeterministicRandom

    a, b = DeterministicRandom("x.0"), DeterministicRandom("x.0")
    assert [a.randint(0, 99) for _ in range(20)] == [b.randint(0, 99) for _ in range(20)]
    rng = DeterministicRandom(7)
    assert sorted(rng.shuffle(range(10))) == list(range(10))
    picked = rng.sample("abcdef", 3)
    assert len(set(picked)) == 3 and set(picked) <= set("abcdef")
    assert isinstance(rng.number(1, 9, 0), int) and isinstance(rng.number(1, 9, 2), float)
    day = rng.date(dt.date(2000, 1, 1), 30)
    assert dt.date(2000, 1, 1) <= day <= dt.date(2000, 1, 31)
    copy = pickle.loads(pickle.dumps(rng))
    assert copy.randint(0, 10**9) == rng.randint(0, 10**9)
    with pytest.raises(ValueError, match="non-empty"):
        rng.choice([])
