"""MemorySimple: storage, key removal, the thinking filter windows, rewrites and the incremental view."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agent_gym.memory import MemoryConfig, MemorySimple, memory_from_config
from agent_gym.memory.text import THINKING_OMITTED

T = "<think>reasoning</think>"


def convo(n_turns: int, *, system: bool = True) -> list[dict]:
    msgs = [{"role": "system", "content": "sys"}] if system else []
    msgs.append({"role": "user", "content": "question"})
    for i in range(n_turns):
        msgs.append({"role": "assistant", "content": f"{T}call {i}"})
        msgs.append({"role": "tool", "content": f"result {i}"})
    return msgs


def elided(view) -> list[int]:
    return [i for i, m in enumerate(view) if m["content"].startswith(THINKING_OMITTED)]


def test_add_accepts_one_dict_or_many_and_strips_other_keys():
    memory = MemorySimple()
    memory.add({"role": "user", "content": "q", "name": "alice"})
    memory.add(iter([{"role": "assistant", "content": "a", "tool_calls": []}, {"role": "tool", "content": "r"}]))
    memory.add([])
    assert len(memory) == 3
    assert memory.messages[0] == {"role": "user", "content": "q", "name": "alice"}
    assert memory.get_prompt_messages() == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "r"},
    ]
    assert all(set(m) == {"role", "content"} for m in memory.get_prompt_messages())


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"role": "robot", "content": "x"}, ValueError),
        ({"content": "x"}, ValueError),
        ({"role": "user", "content": None}, TypeError),
        ({"role": "user", "content": 3}, TypeError),
        ("just text", TypeError),
        (42, TypeError),
        ([("role", "user")], TypeError),
    ],
)
def test_add_rejects_bad_messages_atomically(bad, error):
    memory = MemorySimple()
    memory.add({"role": "user", "content": "ok"})
    with pytest.raises(error):
        memory.add([{"role": "assistant", "content": "fine"}, bad] if isinstance(bad, dict) else bad)
    assert len(memory) == 1


def test_stored_messages_are_copies():
    source = {"role": "user", "content": "q"}
    memory = MemorySimple()
    memory.add(source)
    source["content"] = "changed"
    memory.messages[0]["content"] = "changed too"
    assert memory.get_prompt_messages() == [{"role": "user", "content": "q"}]


def test_view_messages_are_read_only_and_the_list_is_fresh():
    memory = MemorySimple()
    memory.add(convo(1))
    first = memory.get_prompt_messages()
    with pytest.raises(TypeError):
        first[0]["content"] = "x"
    first.append({"role": "user", "content": "mine"})
    assert len(memory.get_prompt_messages()) == 4


def test_no_filter_without_simplify_thinking():
    memory = MemorySimple()
    memory.add(convo(3))
    assert elided(memory.get_prompt_messages()) == []


@pytest.mark.parametrize(
    ("before", "end", "expected"),
    [
        (0, 0, [2, 4, 6]),  # every assistant message, the last one too
        (0, -1, [2, 4, 6]),  # the last message is a tool result
        (0, -2, [2, 4]),  # the last assistant message is in the raw tail
        (3, 0, [4, 6]),  # index 2 is in the raw head
        (5, -3, []),  # window [5, 4) is empty
        (0, -7, []),  # max(0, 7 - 7) = 0
        (0, -100, []),  # end clamps at 0
        (100, 0, []),
    ],
)
def test_thinking_filter_window(before, end, expected):
    cfg = MemoryConfig(simplify_thinking=True, before_raw_message=before, end_raw_message=end)
    memory = MemorySimple(cfg)
    memory.add(convo(3))
    view = memory.get_prompt_messages()
    assert elided(view) == expected
    fresh = MemorySimple(cfg)
    for m in convo(3):  # built one message at a time: same result
        fresh.add(m)
        fresh.get_prompt_messages()
    assert fresh.get_prompt_messages() == view


def test_filter_only_touches_assistant_messages_and_closed_blocks():
    memory = MemorySimple(MemoryConfig(simplify_thinking=True))
    memory.add(
        [
            {"role": "user", "content": f"{T}user text"},
            {"role": "tool", "content": f"{T}tool text"},
            {"role": "assistant", "content": "<think>unclosed reasoning"},
            {"role": "assistant", "content": "plain"},
        ]
    )
    assert [m["content"] for m in memory.get_prompt_messages()] == [
        f"{T}user text",
        f"{T}tool text",
        "<think>unclosed reasoning",
        "plain",
    ]


def test_config_dict_updates_settings_and_is_validated():
    memory = MemorySimple()
    memory.add(convo(2))
    assert elided(memory.get_prompt_messages()) == []
    assert elided(memory.get_prompt_messages({"simplify_thinking": True})) == [2, 4]
    assert memory.last_view_rewritten is True
    assert memory.config.simplify_thinking is True
    with pytest.raises(ValidationError):
        memory.get_prompt_messages({"end_raw_message": 2})
    with pytest.raises(ValidationError):
        memory.get_prompt_messages({"no_such_field": 1})
    with pytest.raises(TypeError, match="config must be a dictionary or None"):
        memory.get_prompt_messages(["simplify_thinking"])  # type: ignore[arg-type]
    assert memory.config.end_raw_message == 0


def test_the_given_config_is_copied_but_direct_assignment_is_seen():
    cfg = MemoryConfig()
    memory = MemorySimple(cfg)
    memory.add(convo(1))
    memory.get_prompt_messages({"simplify_thinking": True})
    assert cfg.simplify_thinking is False
    memory.config.simplify_thinking = False
    assert elided(memory.get_prompt_messages()) == []
    with pytest.raises(TypeError):
        MemorySimple(config=3)  # type: ignore[arg-type]
    assert MemorySimple({"max_prompt_length": 2048}).config.max_prompt_length == 2048


def test_last_view_rewritten_tracks_prefix_consistency():
    memory = MemorySimple(MemoryConfig(simplify_thinking=True, end_raw_message=-2))
    memory.add(convo(0))
    memory.get_prompt_messages()
    assert memory.last_view_rewritten is False  # first view
    memory.add([{"role": "assistant", "content": f"{T}a"}, {"role": "tool", "content": "r"}])
    memory.get_prompt_messages()
    assert memory.last_view_rewritten is False  # the new thought is still in the raw tail
    memory.add([{"role": "assistant", "content": "no thinking"}, {"role": "tool", "content": "r"}])
    view = memory.get_prompt_messages()
    assert memory.last_view_rewritten is True  # the earlier thought left the tail and was elided
    assert elided(view) == [2]
    assert memory.get_prompt_messages() == view
    assert memory.last_view_rewritten is False  # same turn, same view


def test_prompt_truncation_warning(caplog):
    memory = MemorySimple(MemoryConfig(max_prompt_length=10, max_summary_length=5))
    memory.add({"role": "user", "content": "x" * 40})
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
    assert not caplog.records
    memory.add({"role": "assistant", "content": "y"})
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
        memory.get_prompt_messages()  # no second warning in the same turn
    assert [r.getMessage() for r in caplog.records] == [
        "PROMPT_TRUNCATION: Prompt length (11) exceeds max_prompt_length (10)"
    ]


def test_clear_and_memory_from_config():
    memory = memory_from_config(MemoryConfig(simplify_thinking=True))
    assert type(memory) is MemorySimple
    memory.add(convo(1))
    memory.get_prompt_messages()
    memory.clear()
    assert memory.get_prompt_messages() == [] and len(memory) == 0
    assert memory.last_view_rewritten is False
    with pytest.raises(TypeError):
        memory_from_config({"use_summary": False})  # type: ignore[arg-type]


async def test_async_view():
    memory = MemorySimple()
    memory.add(convo(1))
    assert await memory.aget_prompt_messages() == memory.get_prompt_messages()


ROLES = st.sampled_from(["system", "user", "assistant", "tool"])
CONTENT = st.sampled_from(["", "plain", f"{T}x", "<think>open", f"a{T}b{T}", "word " * 30])
MESSAGE = st.fixed_dictionaries({"role": ROLES, "content": CONTENT})


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(MESSAGE, max_size=3), min_size=1, max_size=12),
    before=st.integers(0, 4),
    end=st.integers(-4, 0),
    thinking=st.booleans(),
)
def test_incremental_view_equals_a_rebuilt_one(batches, before, end, thinking):
    cfg = MemoryConfig(simplify_thinking=thinking, before_raw_message=before, end_raw_message=end)
    memory = MemorySimple(cfg)
    previous: list[dict] = []
    for batch in batches:
        memory.add(batch)
        view = memory.get_prompt_messages()
        rebuilt = MemorySimple(cfg)
        rebuilt.add(memory.messages)
        assert view == rebuilt.get_prompt_messages()
        assert memory.last_view_tokens == rebuilt.last_view_tokens == memory.count_tokens(view)
        appended = view[: len(previous)] == previous and view[len(previous) :] == batch
        assert memory.last_view_rewritten is (bool(previous) and not appended)
        previous = view


def test_images_on_messages_never_reach_the_prompt_view():
    """A message's images (agent_gym.messages) are stored with it but the view is role/content text."""
    from agent_gym.messages import image_part

    shown = convo(1)
    shown[-1] = {**shown[-1], "images": [image_part(b"\x89PNG")]}
    memory = MemorySimple()
    memory.add(shown)
    view = memory.get_prompt_messages()
    assert [dict(m) for m in view] == [{"role": m["role"], "content": m["content"]} for m in shown]
    assert all(set(m) == {"role", "content"} for m in view)
