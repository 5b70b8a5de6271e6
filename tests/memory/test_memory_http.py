"""MemorySummary against a real local OpenAI-compatible HTTP server through the ``openai`` client."""

from __future__ import annotations

import logging
import time

import openai
import pytest

from agent_gym.memory import MemoryConfig, MemorySummary, memory_from_config
from agent_gym.memory.summarizers import ChatClientSummarizer, make_summarizer

PROMPT = "summarize in {max_summary_length}"


def conversation() -> list[dict]:
    msgs = [
        {"role": "system", "content": "you are a helpful assistant"},
        {"role": "user", "content": "what is the weather in the city"},
    ]
    for i in range(6):
        msgs.append({"role": "assistant", "content": f"<think>plan step {i}</think>call search {i}"})
        msgs.append({"role": "tool", "content": "result the city is sunny and the temperature was " + "w " * 8})
    return msgs


def config(**fields) -> MemoryConfig:
    base = dict(
        use_summary=True,
        max_prompt_length=120,
        max_summary_length=20,
        before_raw_message=1,
        summary_system_prompt=PROMPT,
        oai_model_name="tiny-summarizer",
    )
    base.update(fields)
    return MemoryConfig(**base)


def client_for(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY")


def run_episode(memory) -> list[list[dict]]:
    views = []
    msgs = conversation()
    memory.add(msgs[:2])
    views.append(memory.get_prompt_messages())
    for i in range(2, len(msgs), 2):
        memory.add(msgs[i : i + 2])
        views.append(memory.get_prompt_messages())
    return views


def test_summaries_through_an_openai_client(summary_server, word_tokenizer):
    memory = MemorySummary(config(), chat_client=client_for(summary_server), tokenizer=word_tokenizer)
    views = run_episode(memory)
    assert memory.summaries, "the episode should have been summarized"
    body = summary_server.requests[0]
    assert body["model"] == "tiny-summarizer"
    assert body["max_tokens"] == 20
    assert body["messages"][0] == {"role": "system", "content": "summarize in 20"}
    assert body["messages"][1]["content"] == "what is the weather in the city"
    assert memory.summaries[0].startswith("summary of ") and "<think>" not in memory.summaries[0]
    last = views[-1]
    assert last[0]["content"].startswith("you are a helpful assistant\n\n[Historical Information Summary]:\n\n")
    assert memory.failed_summaries == 0
    assert len(summary_server.requests) == len(memory.summaries)


def test_oai_client_from_the_config_and_an_address_string(summary_server, word_tokenizer):
    memory = memory_from_config(config(oai_client=client_for(summary_server)), tokenizer=word_tokenizer)
    run_episode(memory)
    assert memory.summaries
    n = len(summary_server.requests)
    by_address = MemorySummary(config(), chat_client=summary_server.address, tokenizer=word_tokenizer)
    run_episode(by_address)
    assert by_address.summaries == memory.summaries
    assert len(summary_server.requests) == 2 * n
    assert isinstance(make_summarizer(summary_server.base_url, "m"), ChatClientSummarizer)


def test_a_server_error_is_retried(summary_server, word_tokenizer):
    summary_server.fail_first = 1
    memory = MemorySummary(
        config(), chat_client=client_for(summary_server), tokenizer=word_tokenizer, max_retries=1, retry_backoff=0.01
    )
    run_episode(memory)
    assert memory.summaries and memory.failed_summaries == 0
    assert len(summary_server.requests) == len(memory.summaries) + 1  # the client itself does not retry


@pytest.mark.parametrize("mode", ["error", "empty"])
def test_a_failing_server_leaves_the_episode_going(summary_server, word_tokenizer, caplog, mode):
    summary_server.mode = mode
    memory = MemorySummary(
        config(), chat_client=client_for(summary_server), tokenizer=word_tokenizer, max_retries=1, retry_backoff=0.01
    )
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        views = run_episode(memory)
    assert memory.summaries == [] and memory.failed_summaries >= 1
    assert len(summary_server.requests) == 2 * memory.failed_summaries
    assert views[-1] == [{"role": m["role"], "content": m["content"]} for m in conversation()]
    assert any("Summary call failed" in r.getMessage() for r in caplog.records)
    assert any("PROMPT_TRUNCATION" in r.getMessage() for r in caplog.records)


def test_a_hung_server_is_bounded_by_the_timeout(summary_server, word_tokenizer, caplog):
    summary_server.mode = "hang"
    memory = MemorySummary(
        config(), chat_client=client_for(summary_server), tokenizer=word_tokenizer, summary_timeout=0.5, max_retries=0
    )
    msgs = conversation()
    memory.add(msgs)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent_gym.memory"):
        view = memory.get_prompt_messages()
    assert time.monotonic() - start < 5.0
    assert len(view) == len(msgs) and memory.failed_summaries == 1
    assert any("Summary call failed" in r.getMessage() for r in caplog.records)
