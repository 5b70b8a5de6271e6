"""Thinking elision, summary post-processing and read-only view messages."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from agent_gym.memory.text import THINKING_OMITTED, ViewMessage, clean_summary, elide_thinking


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>a\nb</think>answer", THINKING_OMITTED + "answer"),
        ("x<think>1</think>y<think>2</think>z", f"x{THINKING_OMITTED}y{THINKING_OMITTED}z"),
        ("<think>never closed", "<think>never closed"),
        ("<think>a</think>b<think>open", THINKING_OMITTED + "b<think>open"),
        ("no thinking", "no thinking"),
        (THINKING_OMITTED + "done", THINKING_OMITTED + "done"),
        ("</think> stray", "</think> stray"),
    ],
)
def test_elide_thinking(content, expected):
    assert elide_thinking(content) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>reasoning</think>\nThe summary.", "The summary."),
        ("<think>r</think><answer>inside</answer> trailing", "inside"),
        ("<answer>\n only this \n</answer>", "only this"),
        ("reasoning without opening</think>the summary", "the summary"),
        ("the summary<think>cut off reasoning", "the summary"),
        ("<think>only reasoning</think>", ""),
        ("   ", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_clean_summary(reply, expected):
    assert clean_summary(reply) == expected


def test_view_message_is_a_read_only_dict():
    m = ViewMessage("user", "hi")
    assert m == {"role": "user", "content": "hi"} and isinstance(m, dict)
    assert json.loads(json.dumps(m)) == {"role": "user", "content": "hi"}
    for mutate in (
        lambda: m.__setitem__("content", "x"),
        lambda: m.__delitem__("role"),
        lambda: m.update(content="x"),
        lambda: m.pop("role"),
        lambda: m.setdefault("name", "x"),
        m.clear,
        m.popitem,
    ):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    assert m == {"role": "user", "content": "hi"}
    for clone in (dict(m), m.copy(), copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m)), {**m}):
        assert type(clone) is dict and clone == m
        clone["content"] = "changed"
