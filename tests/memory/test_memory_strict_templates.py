"""Summarization with strict chat templates: the summary request is one the template accepts, and failures count.

The summarizer below renders each request with the family's template, as a server does
before it answers, and refuses what the template refuses (the server's 400).
"""

from __future__ import annotations

import pytest
from family_templates import family_tokenizer, real_family_tokenizer

from agent_gym.memory import MemoryConfig, MemorySummary


class TemplateServer:
    """A summarizer that renders every request with a chat template first (a refusal is an error)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.requests: list[list[dict]] = []
        self.refused = 0

    def __call__(self, messages, *, max_tokens):
        self.requests.append(messages)
        try:
            self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:
            self.refused += 1
            raise RuntimeError(f"400 Bad Request: {exc}") from exc
        return f"summary {len(self.requests)}"


def conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": "Task: add numbers. " * 5}]
    for k in range(turns):
        msgs.append({"role": "assistant", "content": f"I will call the tool {k}. " * 6})
        msgs.append({"role": "tool", "content": f"result {k} " * 12})
        msgs.append({"role": "user", "content": f"Go on {k}. " * 4})
    return msgs


@pytest.mark.parametrize("family", ["gemma3", "mistral", "openai"])
def test_strict_templates_get_requests_they_accept(family):
    tokenizer = family_tokenizer(family)
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=400, max_summary_length=40, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0, retry_backoff=0.0)
    msgs = conversation(8)
    memory.add(msgs)
    view = memory.get_prompt_messages()
    assert memory.summaries and memory.failed_summaries == 0 and server.refused == 0
    assert len(view) < len(msgs)  # the prompt shrank
    request = server.requests[0]
    assert [m["role"] for m in request] == ["system", "user"]
    assert request[1]["content"].startswith("Conversation to summarize:\n\n[")


def test_alternating_ranges_keep_the_messages_form():
    tokenizer = family_tokenizer("gemma3")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=20, before_raw_message=1,
                          end_raw_message=-1)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0)
    msgs = [{"role": "system", "content": "s"}]
    for k in range(6):
        msgs += [{"role": "user", "content": f"question {k} " * 20},
                 {"role": "assistant", "content": f"answer {k} " * 20}]
    memory.add(msgs)
    memory.get_prompt_messages()
    assert memory.summaries and server.refused == 0
    assert [m["role"] for m in server.requests[0]][:3] == ["system", "user", "assistant"]


def test_without_a_template_the_retry_sends_the_transcript():
    server = TemplateServer(family_tokenizer("mistral"))
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=30, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, max_retries=1, retry_backoff=0.0)  # counts chars, no template
    memory.add(conversation(14))
    memory.get_prompt_messages()
    assert server.refused == 1 and memory.summaries and memory.failed_summaries == 0
    assert [m["role"] for m in server.requests[1]] == ["system", "user"]


def test_a_summary_that_fails_is_counted(caplog):
    server = TemplateServer(family_tokenizer("mistral"))
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=30, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, max_retries=0, summary_request="messages")
    memory.add(conversation(14))
    memory.get_prompt_messages()
    assert memory.summaries == [] and memory.failed_summaries == 1
    assert "Summary call failed" in caplog.text
    with pytest.raises(ValueError, match="summary_request"):
        MemorySummary(config, chat_client=server, summary_request="xml")


@pytest.mark.parametrize("mode", ["messages", "auto"])
def test_summary_counters_reach_the_step_info(mode):
    """A refused summary request is counted in every later step's ``info["memory"]``, not only logged."""
    import gymnasium as gym

    from agent_gym import TrajectoryWrapper

    tokenizer = family_tokenizer("mistral")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(summary_system_prompt="Summarize.", use_summary=True, max_prompt_length=150,
                          max_summary_length=20, before_raw_message=2, end_raw_message=-1)
    env = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0"), memory=lambda: MemorySummary(
        config, chat_client=server, tokenizer=tokenizer, max_retries=0, summary_request=mode))
    _, info = env.reset(seed=0)
    assert info["memory"] == {"summaries": 0, "failed_summaries": 0, "summarized": False}
    while True:
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            break
    steps = info["trajectory"].steps
    counters = [step.info["memory"] for step in steps]
    if mode == "messages":  # Mistral's template refuses the raw range: each refusal is counted
        assert server.refused >= 1 and counters[-1]["failed_summaries"] == server.refused
        assert counters[0]["failed_summaries"] == 1 and counters[-1]["summaries"] == 0
    else:
        assert server.refused == 0 and counters[-1]["failed_summaries"] == 0
        assert counters[-1]["summaries"] >= 1 and any(c["summarized"] for c in counters)
    assert steps[-1].to_dict()["info"]["memory"] == counters[-1]  # exported with the step


@pytest.mark.parametrize("mode", ["messages", "auto"])
def test_real_gemma3_template(mode):
    """Gemma 3's own template (from trl) refuses the raw range; the auto request passes and the prompt shrinks."""
    pytest.importorskip("trl")
    tokenizer = real_family_tokenizer("gemma3")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=400, max_summary_length=40, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0, retry_backoff=0.0,
                           summary_request=mode)
    msgs = conversation(8)
    memory.add(msgs)
    view = memory.get_prompt_messages()
    if mode == "messages":
        assert server.refused == 1 and memory.failed_summaries == 1 and not memory.summaries
    else:
        assert server.refused == 0 and memory.summaries and len(view) < len(msgs)
