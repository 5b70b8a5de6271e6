"""``Grade``: the constructors and the coercion of what older ``grade_episode`` overrides return."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import agent_gym
from agent_gym.env.grade import Grade
from agent_gym.types import EpisodeStatus


def test_constructors():
    assert Grade.scored(0.5) == Grade(score=0.5, status=None, reason=None)
    assert Grade.ungraded() == Grade(score=None, status=None, reason=None)
    failure = Grade.infra_failure("tests_timeout")
    assert failure == Grade(score=None, status=EpisodeStatus.ENV_ERROR, reason="tests_timeout")
    assert failure.status is EpisodeStatus.ENV_ERROR


def test_a_grade_is_frozen_and_public():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Grade.scored(1.0).score = 0.0  # type: ignore[misc]
    assert agent_gym.Grade is Grade and "Grade" in agent_gym.__all__


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, Grade.ungraded()), (0.25, Grade.scored(0.25)), (1, Grade.scored(1.0)), (True, Grade.scored(1.0)),
     (np.float32(0.5), Grade.scored(0.5)), (np.array(0.75), Grade.scored(0.75)), (3.0, Grade.scored(3.0))],
)
def test_coerce_takes_what_grade_episode_returned_before(value, expected):
    grade = Grade.coerce(value)
    assert grade == expected and (grade.score is None or type(grade.score) is float)


def test_coerce_keeps_a_grade():
    grade = Grade.infra_failure("grading_error")
    assert Grade.coerce(grade) is grade


@pytest.mark.parametrize("value", ["0.5", b"1", [0.5], {"score": 1.0}, object()])
def test_coerce_refuses_anything_else(value):
    with pytest.raises(TypeError, match="grade_episode: expected a Grade, a float or None, got"):
        Grade.coerce(value)


def test_fields_are_checked():
    assert Grade(status="ENV_ERROR", reason="x").status is EpisodeStatus.ENV_ERROR  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="score: expected a float or None, got str"):
        Grade(score="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status: expected an EpisodeStatus or None, got 'BROKEN'"):
        Grade(status="BROKEN")  # type: ignore[arg-type]
    for reason in ("", 3):
        with pytest.raises(TypeError, match="reason: expected a non-empty str or None"):
            Grade(reason=reason)  # type: ignore[arg-type]
