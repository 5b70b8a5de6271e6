"""Argument checks: a wrong type is a TypeError, a value out of range a ConfigError ("name: expected ..., got ...")."""

from __future__ import annotations

import enum
import math
import re

import pytest

from agent_gym.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_enum,
    check_float,
    check_gamma,
    check_int,
    check_non_empty,
    check_pattern,
    check_timeout,
)
from agent_gym.errors import AgentGymError, ConfigError


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


def test_config_error_is_a_value_error_of_the_tree():
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, AgentGymError)


def test_numbers():
    assert check_int("n", 3, low=1, high=3) == 3
    with pytest.raises(TypeError, match=r"n: expected int, got bool"):
        check_int("n", True)
    with pytest.raises(ConfigError, match=r"n: expected an int in \[1, 3\], got 4"):
        check_int("n", 4, low=1, high=3)
    assert check_float("x", 1) == 1.0 and isinstance(check_float("x", 1), float)
    with pytest.raises(ConfigError, match=r"p: expected a finite number in \(0.0, 1.0\), got 1.0"):
        check_float("p", 1.0, low=0.0, high=1.0, low_open=True, high_open=True)
    with pytest.raises(ConfigError, match=r"\(0.0, 1.0\)"):
        check_float("p", 0.0, low=0.0, high=1.0, low_open=True, high_open=True)
    with pytest.raises(ConfigError, match=r"x: expected a finite number < 2"):
        check_float("x", 2, high=2, high_open=True)
    with pytest.raises(ConfigError, match="finite"):
        check_float("x", math.nan)
    assert check_gamma(0.5) == 0.5
    assert check_timeout("t", None) is None
    with pytest.raises(TypeError, match="t: expected a number of seconds"):
        check_timeout("t", None, allow_none=False)
    with pytest.raises(ConfigError, match="t: expected a finite number > 0"):
        check_timeout("t", 0)


def test_choices_enums_and_patterns():
    assert check_choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(ConfigError, match=r"mode: expected one of \['a', 'b'\], got 'c'"):
        check_choice("mode", "c", ("a", "b"))
    with pytest.raises(ConfigError, match=r"got \['a'\]"):
        check_choice("mode", ["a"], {"a", "b"})  # unhashable against a set: not a choice, no TypeError
    assert check_enum("mode", "slow", Mode) is Mode.SLOW and check_enum("mode", Mode.FAST, Mode) is Mode.FAST
    with pytest.raises(ConfigError, match=r"mode: expected one of \['fast', 'slow'\], got 'SLOW'"):
        check_enum("mode", "SLOW", Mode)
    word = re.compile(r"[a-z]+")
    assert check_pattern("tag", "think", word, "a lowercase word") == "think"
    with pytest.raises(ConfigError, match="tag: expected a lowercase word, got 'Think'"):
        check_pattern("tag", "Think", word, "a lowercase word")
    with pytest.raises(TypeError, match="tag: expected a lowercase word, got int"):
        check_pattern("tag", 3, word, "a lowercase word")


def test_callables_flags_and_collections():
    assert check_callable("f", len) is len
    with pytest.raises(TypeError, match="f: expected a callable, got int"):
        check_callable("f", 3)
    assert check_bool("flag", False) is False
    with pytest.raises(TypeError, match="flag: expected bool, got int"):
        check_bool("flag", 0)
    assert check_non_empty("files", [1]) == [1]
    with pytest.raises(ConfigError, match="files: expected at least one item, got none"):
        check_non_empty("files", ())
