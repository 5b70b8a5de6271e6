"""MemorySummary: every rule of the Memory design, its edge windows, and summarizer faults.

Counting uses a real word-level tokenizer: a message of k words counts k + 4 tokens,
and the summary prompt "summarize in {max_summary_length}" counts 3 (+ 4).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agent_gym.errors import ConfigError
from agent_gym.memory import MemoryConfig, MemorySimple, MemorySummary, memory_from_config

PROMPT = "summarize in {max_summary_length}"
BLOCK = "\n\n[Historical Information Summary]:\n\n{}\n\n"


def words(tag: str, k: int) -> str:
    """A content of exactly k words (k + 4 tokens)."""
    return " ".join([tag] + ["w"] * (k - 1))


def m(role: str, tag: str, k: int = 6) -> dict:
    return {"role": role, "content": words(tag, k)}


def rv(*pairs) -> list[dict]:
    return [{"role": r, "content": c} for r, c in pairs]


@pytest.fixture
def make(word_tokenizer, recorder):
    def build(summarizer=None, **fields) -> MemorySummary:
        options = {k: fields.pop(k) for k in ("summary_timeout", "max_retries", "retry_backoff") if k in fields}
        options.setdefault("retry_backoff", 0.0)
        fields.setdefault("max_prompt_length", 50)
        fields.setdefault("max_summary_length", 10)
        cfg = MemoryConfig(use_summary=fields.pop("use_summary", True), summary_system_prompt=PROMPT, **fields)
        return MemorySummary(cfg, chat_client=summarizer or recorder, tokenizer=word_tokenizer, **options)

    return build


def base_conversation() -> list[dict]:
    # 5 + 4 * 10 = 45 tokens
    return [m("system", "sys", 1), m("user", "u1"), m("assistant", "a1"), m("tool", "t1"), m("assistant", "a2")]


def test_trigger_is_strictly_greater_than_the_budget(make, recorder):
    memory = make()
    memory.add(base_conversation())
    memory.add(m("tool", "t2", 1))  # exactly 50
    memory.get_prompt_messages()
    assert recorder.calls == [] and memory.last_view_tokens == 50
    memory.add(m("user", "u2", 1))  # 55 > 50
    memory.get_prompt_messages()
    assert len(recorder.calls) == 1


def test_greedy_range_after_the_system_message_and_insertion_point(make, recorder):
    memory = make()
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    view = memory.get_prompt_messages()
    # range starts at 1 (system); 7 + 10 + 10 + 10 + 10 = 47 fits, + t2 (5) = 52 does not
    (request,) = recorder.calls
    assert request[0] == {"role": "system", "content": "summarize in 10"}
    assert [x["content"].split()[0] for x in request[1:]] == ["u1", "a1", "t1", "a2"]
    assert recorder.max_tokens == [10]
    assert [x["role"] for x in memory.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "summary",
        "tool",
        "user",
    ]
    # before_raw_message = 0: the body starts at the summary; the system message is not kept
    assert view == rv(("system", BLOCK.format("S")), ("tool", words("t2", 1)), ("user", words("u2", 1)))
    assert memory.last_view_summarized is True and memory.summaries == ["S"]
    assert memory.last_view_rewritten is False  # the first view of an episode has nothing to rewrite


def test_before_raw_keeps_the_head_and_the_system_message(make, recorder):
    memory = make(before_raw_message=2)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    view = memory.get_prompt_messages()
    # range starts at 2 and everything up to the end fits: 7 + 10 + 10 + 10 + 5 + 5 = 47
    assert [x["content"].split()[0] for x in recorder.calls[0][1:]] == ["a1", "t1", "a2", "t2", "u2"]
    assert view == rv(("system", words("sys", 1) + BLOCK.format("S")), ("user", words("u1", 6)))


def test_system_absent_and_before_raw_zero_start_at_index_zero(make, recorder):
    memory = make()
    memory.add(
        [
            m("user", "u1"),
            m("assistant", "a1"),
            m("tool", "t1"),
            m("assistant", "a2"),
            m("tool", "t2"),
            m("user", "u2", 1),
        ]
    )
    view = memory.get_prompt_messages()
    assert [x["content"].split()[0] for x in recorder.calls[0][1:]] == ["u1", "a1", "t1", "a2"]
    assert view == rv(("system", BLOCK.format("S")), ("tool", words("t2", 6)), ("user", words("u2", 1)))


def test_a_summary_on_a_later_turn_rewrites_the_view(make, recorder):
    memory = make()
    memory.add(base_conversation())
    first = memory.get_prompt_messages()
    assert memory.last_view_rewritten is False and first[0]["content"] == words("sys", 1)
    memory.add([m("tool", "t2", 1), m("user", "u2", 1)])
    memory.get_prompt_messages()
    assert memory.last_view_summarized is True and memory.last_view_rewritten is True
    memory.add(m("assistant", "a3", 1))
    memory.get_prompt_messages()
    assert memory.last_view_summarized is False and memory.last_view_rewritten is False


def test_empty_system_is_prepended_even_without_a_summary(make, recorder):
    memory = make()
    memory.add(m("user", "u1"))
    assert memory.get_prompt_messages() == rv(("system", ""), ("user", words("u1", 6)))
    memory.add(m("assistant", "a1"))
    assert memory.get_prompt_messages()[0] == {"role": "system", "content": ""}
    assert memory.last_view_rewritten is False


def test_end_raw_keeps_the_tail_out_of_the_range(make, recorder):
    memory = make(end_raw_message=-3, max_prompt_length=80)
    memory.add(base_conversation() + [m("tool", "t2"), m("user", "u2"), m("assistant", "a3"), m("tool", "t3")])
    view = memory.get_prompt_messages()  # 85 > 80; boundary = 9 - 3 = 6
    assert [x["content"].split()[0] for x in recorder.calls[0][1:]] == ["u1", "a1", "t1", "a2", "t2"]
    assert [x["content"].split()[0] for x in view[1:]] == ["u2", "a3", "t3"]


def test_nothing_to_summarize_between_the_windows(make, recorder, caplog):
    memory = make(before_raw_message=2, end_raw_message=-3)
    memory.add(base_conversation())
    memory.add(m("user", "u2", 10))  # 59 > 50, range [2, 3) holds a1 only: summarized
    memory.get_prompt_messages()
    assert len(recorder.calls) == 1
    memory2 = make(before_raw_message=3, end_raw_message=-3)
    memory2.add(base_conversation() + [m("user", "u2", 10)])
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        view = memory2.get_prompt_messages()  # range [3, 3): nothing
    assert len(recorder.calls) == 1
    assert len(view) == 6 and any("PROMPT_TRUNCATION" in r.getMessage() for r in caplog.records)


def test_a_second_summary_gets_the_first_as_context_and_replaces_it(make, make_recorder, word_tokenizer):
    rec = make_recorder(replies=["first", "second"])
    memory = make(rec, before_raw_message=1)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    memory.get_prompt_messages()
    for tag in ("a3", "t3", "a4", "t4", "a5"):
        memory.add(m("assistant" if tag[0] == "a" else "tool", tag))
    view = memory.get_prompt_messages()
    assert len(rec.calls) == 2
    request = rec.calls[1]
    assert request[1] == {"role": "user", "content": "[Summary of the earlier conversation]:\n\nfirst"}
    assert request[2]["content"].split()[0] == "t2"  # starts right after the first summary
    assert view[0] == {"role": "system", "content": words("sys", 1) + BLOCK.format("second")}
    assert "first" not in "".join(x["content"] for x in view)
    assert [x["role"] for x in memory.messages].count("summary") == 2


def test_tail_overlapping_the_last_summary_wins(make, recorder):
    memory = make(before_raw_message=1)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    memory.get_prompt_messages()  # summary inserted at index 5: [sys u1 a1 t1 a2 S t2 u2]
    view = memory.get_prompt_messages({"end_raw_message": -4, "use_summary": False})
    # tail = messages[4:] = a2, S, t2, u2 reaches back over the summary: a2 is kept raw
    assert view == rv(
        ("system", words("sys", 1) + BLOCK.format("S")),
        ("assistant", words("a2", 6)),
        ("tool", words("t2", 1)),
        ("user", words("u2", 1)),
    )
    assert memory.last_view_rewritten is True
    view = memory.get_prompt_messages({"end_raw_message": -8})  # the tail covers everything
    assert [x["content"].split()[0] for x in view] == ["sys", "u1", "a1", "t1", "a2", "t2", "u2"]
    assert view[0]["content"] == words("sys", 1) + BLOCK.format("S")


def test_one_message_longer_than_the_budget_is_summarized_in_chunks(make, make_recorder):
    rec = make_recorder(replies=["part one", "part two", "final"])
    memory = make(rec, max_prompt_length=60, before_raw_message=1)
    memory.add([m("system", "sys", 1), {"role": "tool", "content": " ".join(["hello"] * 50)}, m("user", "u1", 1)])
    view = memory.get_prompt_messages()
    # chunk size = 60 - (3 + 4 + 4) - 10 - 16 = 23 tokens: 23 + 23 + 4 words
    assert [len(c[-1]["content"].split()) for c in rec.calls] == [23, 23, 4]
    assert all(c[-1]["role"] == "tool" for c in rec.calls)
    assert len(rec.calls[0]) == 2
    assert rec.calls[1][1]["content"].endswith("part one") and rec.calls[2][1]["content"].endswith("part two")
    assert memory.summaries == ["final"]
    assert view == rv(("system", words("sys", 1) + BLOCK.format("final")), ("user", words("u1", 1)))


def test_chunking_without_room_logs_and_goes_on(make, recorder, caplog):
    memory = make(max_prompt_length=30, max_summary_length=20)
    memory.add({"role": "user", "content": words("long", 40)})
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        view = memory.get_prompt_messages()
    assert recorder.calls == [] and memory.failed_summaries == 1
    assert view[1]["content"] == words("long", 40)
    assert any("leave no room" in r.getMessage() for r in caplog.records)


def test_at_most_one_summary_per_turn(make, recorder, caplog):
    memory = make(max_prompt_length=40)
    memory.add([m("user", f"u{i}", 16) for i in range(6)])  # 6 * 20 = 120; each range holds one message
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
        memory.get_prompt_messages()
        memory.get_prompt_messages()
    assert len(recorder.calls) == 1
    assert sum("PROMPT_TRUNCATION" in r.getMessage() for r in caplog.records) == 1
    memory.add(m("assistant", "a", 1))
    memory.get_prompt_messages()
    assert len(recorder.calls) == 2


def test_reply_post_processing_and_truncation(make, make_recorder):
    rec = make_recorder(replies=["<think>long reasoning</think><answer>the gist</answer>"])
    memory = make(rec)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    assert memory.get_prompt_messages()[0]["content"] == BLOCK.format("the gist")
    rec2 = make_recorder(replies=[" ".join(["hello"] * 25)])
    memory2 = make(rec2)
    memory2.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    memory2.get_prompt_messages()
    assert memory2.summaries == [" ".join(["hello"] * 10)]


@pytest.mark.parametrize("bad", ["", "   ", "<think>only thinking</think>", None, 42])
def test_an_empty_or_unusable_summary_is_retried_then_skipped(make, make_recorder, caplog, bad):
    rec = make_recorder(default=bad)
    memory = make(rec, max_retries=2)
    convo = base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)]
    memory.add(convo)
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        view = memory.get_prompt_messages()
    assert len(rec.calls) == 3 and memory.failed_summaries == 1 and memory.summaries == []
    assert [x["content"] for x in view] == [x["content"] for x in convo]
    assert any("Summary call failed after 3 attempt(s)" in r.getMessage() for r in caplog.records)
    assert memory.last_view_summarized is False


def test_a_raising_summarizer_is_retried_with_backoff(make, make_recorder, caplog):
    rec = make_recorder(replies=[RuntimeError("boom"), ConnectionError("down"), "recovered"])
    memory = make(rec, max_retries=2, retry_backoff=0.1)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    start = time.monotonic()
    memory.get_prompt_messages()
    assert time.monotonic() - start >= 0.3  # 0.1 + 0.2
    assert len(rec.calls) == 3 and memory.summaries == ["recovered"] and memory.failed_summaries == 0

    always = make_recorder(replies=[RuntimeError("boom")] * 10)
    memory = make(always, max_retries=1)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
        memory.get_prompt_messages()  # same turn: not retried again
    assert len(always.calls) == 2
    assert any("RuntimeError: boom" in r.getMessage() for r in caplog.records)
    memory.add(m("assistant", "a9", 1))
    memory.get_prompt_messages()  # next turn: tried again
    assert len(always.calls) == 4


def test_a_hung_summarizer_is_bounded_by_the_timeout(make, caplog):
    release = threading.Event()
    calls = []

    def hang(messages, *, max_tokens):
        calls.append(1)
        release.wait(30)
        return "too late"

    memory = make(hang, summary_timeout=0.3, max_retries=1, retry_backoff=0.05)
    memory.add(base_conversation() + [m("tool", "t2", 1), m("user", "u2", 1)])
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        view = memory.get_prompt_messages()
    elapsed = time.monotonic() - start
    release.set()
    assert 0.6 <= elapsed < 3.0 and len(calls) == 2
    assert memory.summaries == [] and len(view) == 7
    assert any("SummaryTimeoutError" in r.getMessage() for r in caplog.records)


def test_configuration_errors(word_tokenizer, recorder):
    with pytest.raises(ConfigError, match="oai_client"):
        MemorySummary(MemoryConfig(use_summary=True))
    with pytest.raises(ConfigError, match="oai_client"):
        memory_from_config(MemoryConfig(use_summary=True))
    memory = MemorySummary(MemoryConfig())
    with pytest.raises(ConfigError, match="oai_client"):
        memory.get_prompt_messages({"use_summary": True})
    assert memory.config.use_summary is False
    with pytest.raises(TypeError, match="chat_client"):
        MemorySummary(chat_client=3)
    for bad in ({"summary_timeout": 0}, {"max_retries": -1}, {"retry_backoff": -1}):
        with pytest.raises(ConfigError, match=f"{next(iter(bad))}: expected"):
            MemorySummary(chat_client=recorder, **bad)
    for bad in ({"max_retries": 1.5}, {"summary_timeout": "1"}):
        with pytest.raises(TypeError, match=f"{next(iter(bad))}: expected"):
            MemorySummary(chat_client=recorder, **bad)
    built = memory_from_config(MemoryConfig(use_summary=True), chat_client=recorder, max_retries=0)
    assert type(built) is MemorySummary and built.max_retries == 0


def test_use_summary_off_never_calls_the_summarizer(make, recorder, caplog):
    memory = make(use_summary=False)
    memory.add(base_conversation() + [m("user", "u2", 30)])
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
    assert recorder.calls == []
    assert any("PROMPT_TRUNCATION: Prompt length (79)" in r.getMessage() for r in caplog.records)


def test_warns_once_when_the_system_message_leaves_the_view(make, recorder, caplog):
    memory = make(max_prompt_length=40)
    memory.add([m("system", "sys", 1)] + [m("user", f"u{i}", 16) for i in range(3)])
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        memory.get_prompt_messages()
        memory.add(m("assistant", "a", 16))
        memory.get_prompt_messages()
    assert sum("before_raw_message >= 1" in r.getMessage() for r in caplog.records) == 1


def test_thinking_filter_runs_on_the_final_view(make, recorder):
    memory = make(simplify_thinking=True, max_prompt_length=200, max_summary_length=10)
    memory.add([{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>x</think>call"}])
    view = memory.get_prompt_messages()
    # index 2 of the final view (an empty system message was prepended)
    assert view[2]["content"] == "<think>Thinking process omitted.</think>call"


@pytest.mark.parametrize("before", [0, 1, 2])
@pytest.mark.parametrize("end", [0, -1, -3])
@pytest.mark.parametrize("thinking", [False, True])
def test_incremental_view_matches_a_rebuild_across_summaries(
    make, make_recorder, word_tokenizer, before, end, thinking
):
    rec = make_recorder(default="<think>t</think>short summary")
    memory = make(rec, before_raw_message=before, end_raw_message=end, simplify_thinking=thinking, max_prompt_length=70)
    memory.add([m("system", "sys", 2), m("user", "question", 5)])
    summaries = 0
    for turn in range(14):
        memory.add(
            [
                {"role": "assistant", "content": f"<think>plan {turn}</think>" + words(f"a{turn}", 4)},
                m("tool", f"t{turn}", 3 + turn % 4),
            ]
        )
        view = memory.get_prompt_messages()
        summaries += memory.last_view_summarized
        fresh = MemorySummary(memory.config.updated({"use_summary": False}), tokenizer=word_tokenizer)
        fresh.add(memory.messages)
        assert view == fresh.get_prompt_messages()
        assert memory.last_view_tokens == fresh.last_view_tokens
        if memory.last_view_summarized:
            assert memory.last_view_rewritten
    assert summaries >= 2


def test_simple_and_summary_share_the_seed_api(make):
    memory = make()
    assert isinstance(memory, MemorySimple)
    memory.add(m("user", "u1"))
    assert memory.get_prompt_messages(None) == memory.get_prompt_messages({})
