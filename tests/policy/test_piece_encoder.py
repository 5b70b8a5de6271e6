"""PieceEncoder: ids equal the tokenizer's whole-text encoding; recurring pieces are reused."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gym.policy.chat_messages import as_id_list
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.piece_encoder import PieceEncoder

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]
FRAGMENTS = [
    "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<|endoftext|>",
    "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<|im_start", "im_end|>", "<tool_", "\n", "\n\n", " ",
    "  ", "\t", "system", "user", "Hello", " world", "e\u0301", "\u0301", "世界", "123", "4567", "{\"a\": 1}", "'s",
    "ok ok", "!!", "é", "\u00a0", "🙂",
]


@pytest.fixture(params=["qwen", "deepseek"])
def tokenizer(request, qwen_tokenizer, deepseek_tokenizer):
    return qwen_tokenizer if request.param == "qwen" else deepseek_tokenizer


def test_real_tokenizers_are_cut_at_added_tokens(qwen_tokenizer, deepseek_tokenizer):
    assert PieceEncoder(qwen_tokenizer).exact_pieces
    assert PieceEncoder(deepseek_tokenizer).exact_pieces


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=24))
def test_ids_equal_whole_text_encoding(tokenizer, parts):
    encoder = PieceEncoder(tokenizer, min_chars=1)
    text = "".join(parts)
    expected = tokenizer.encode(text, add_special_tokens=False)
    assert encoder.encode(text) == expected
    assert encoder.encode(text) == expected  # now from the kept pieces


def test_recurring_pieces_are_reused(qwen_tokenizer):
    encoder = PieceEncoder(qwen_tokenizer, min_chars=16)  # "\n" between the turns is not counted
    system = "You are a careful assistant. " * 40
    encoder.encode(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n")
    assert encoder.misses == 2 and encoder.hits == 0
    second = encoder.encode(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nAnd 3*7, please?<|im_end|>\n")
    assert encoder.hits == 1 and encoder.misses == 3
    assert second == qwen_tokenizer.encode(
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nAnd 3*7, please?<|im_end|>\n",
        add_special_tokens=False,
    )


def test_cache_is_bounded(qwen_tokenizer):
    encoder = PieceEncoder(qwen_tokenizer, max_entries=8, min_chars=1)
    for i in range(50):
        assert encoder.encode(f"piece number {i}<|im_end|>") == qwen_tokenizer.encode(
            f"piece number {i}<|im_end|>", add_special_tokens=False
        )
    assert len(encoder._cache) <= 8


def test_tokens_that_strip_whitespace_disable_the_cut(qwen_tokenizer):
    from tokenizers import AddedToken

    tokenizer = copy.deepcopy(qwen_tokenizer)
    tokenizer.add_tokens([AddedToken("<mark>", lstrip=True, rstrip=True)])
    encoder = PieceEncoder(tokenizer)
    assert not encoder.exact_pieces
    text = "a  <mark>  b<|im_end|>"
    assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False)


def test_builder_render_ids_equal_the_template_tokenization(tokenizer):
    builder = ChatTokenBuilder(tokenizer)
    conversations = [
        [{"role": "user", "content": "What is 17*3?"}],
        [{"role": "system", "content": "Be brief.  "}, {"role": "user", "content": "  世界\n\nhi"}],
        [
            {"role": "user", "content": "Compute."},
            {
                "role": "assistant",
                "content": '<tool_call>\n{"name": "calculator", "arguments": {"expr": "1"}}\n</tool_call>',
            },
            {"role": "tool", "content": "1"},
        ],
    ]
    for messages in conversations:
        for tools in (None, TOOLS):
            kwargs = {"tools": tools} if tools and builder.supports_tools else {}
            if tools and not builder.supports_tools:
                continue
            rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **kwargs)
            expected = as_id_list(rendered)
            assert builder.render_ids(messages, tools) == expected
            assert builder.render_ids(messages, tools) == expected
