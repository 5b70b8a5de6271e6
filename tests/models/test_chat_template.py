"""Tests of agent_gym.models.chat_template (Qwen3-like ChatML with tools and <think>)."""

from __future__ import annotations

import json

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


def render(tok, messages, **kwargs):
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


def test_plain_turns_and_generation_prompt(qwen_tokenizer):
    text = render(
        qwen_tokenizer,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = qwen_tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids[0] == 151644 and 151645 in ids


def test_tools_listed_as_json_in_system_prompt(qwen_tokenizer):
    text = render(qwen_tokenizer, [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], tools=TOOLS)
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n")
    assert text.count("<|im_start|>system") == 1
    inner = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in inner.splitlines()] == TOOLS
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in text
    # without a system message the tools still open the conversation
    assert render(qwen_tokenizer, [{"role": "user", "content": "q"}], tools=TOOLS).startswith(
        "<|im_start|>system\n# Tools\n"
    )


def test_tool_calls_and_tool_responses(qwen_tokenizer):
    messages = [
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
                {"type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}},
            ],
        },
        {"role": "tool", "content": "5"},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "5"},
    ]
    text = render(qwen_tokenizer, messages)
    assert (
        "Let me add.\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n<tool_call>\n'
        '{"name": "add", "arguments": {"a": 1, "b": 1}}\n</tool_call><|im_end|>\n'
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    ) in text
    ids = qwen_tokenizer.encode(text)
    assert 151657 in ids and 151658 in ids and 151665 in ids and 151666 in ids


def test_think_dropped_before_last_query_and_kept_after(qwen_tokenizer):
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\na1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "<think>new reasoning</think>call"},
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "<think>more</think>final"},
    ]
    text = render(qwen_tokenizer, messages)
    assert "old reasoning" not in text
    assert "<|im_start|>assistant\na1<|im_end|>" in text
    assert "<|im_start|>assistant\n<think>\nnew reasoning\n</think>\n\ncall<|im_end|>" in text
    assert "<|im_start|>assistant\n<think>\nmore\n</think>\n\nfinal<|im_end|>" in text
    # a later real user query drops all of it
    later = render(qwen_tokenizer, messages + [{"role": "user", "content": "q3"}])
    assert "reasoning" not in later and "more" not in later


def test_enable_thinking(qwen_tokenizer):
    msgs = [{"role": "user", "content": "q"}]
    assert render(qwen_tokenizer, msgs, add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    assert render(qwen_tokenizer, msgs, add_generation_prompt=True, enable_thinking=True).endswith(
        "<|im_start|>assistant\n"
    )
    assert render(qwen_tokenizer, msgs, add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_last_assistant_turn_gets_empty_think_like_qwen3(qwen_tokenizer):
    base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert render(qwen_tokenizer, base).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n")
    # once it is no longer the last turn (and has no reasoning) the empty block disappears:
    # renderings of a growing conversation are not prefixes of each other (token builders must not re-render)
    more = render(qwen_tokenizer, base + [{"role": "tool", "content": "obs"}])
    assert "<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\n<tool_response>\nobs" in more


def test_appending_to_a_user_turn_extends_the_rendering(qwen_tokenizer):
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    more = base + [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "obs"}]
    assert render(qwen_tokenizer, more, tools=TOOLS).startswith(render(qwen_tokenizer, base, tools=TOOLS))
