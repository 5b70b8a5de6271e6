"""Former home of the answer-grading helpers, now :mod:`agent_gym.grading`.

The helpers serve the base environment (:mod:`agent_gym.core`) as well as the envs, so
they live beside it; this module keeps the old import path working.
"""

from __future__ import annotations

from agent_gym.grading import (
    ANSWER_TYPES,
    answer_matches,
    exact_match,
    infer_answer_type,
    last_number,
    normalize_text,
    numbers_close,
    parse_date,
    qa_normalize,
    round_answer,
    token_f1,
)

__all__ = [
    "ANSWER_TYPES",
    "answer_matches",
    "exact_match",
    "infer_answer_type",
    "last_number",
    "normalize_text",
    "numbers_close",
    "parse_date",
    "qa_normalize",
    "round_answer",
    "token_f1",
]
