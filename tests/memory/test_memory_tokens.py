"""Token counting: tokenizer + 4 per message, chars / 4 without, per-content cache, lazy loading."""

from __future__ import annotations

import pytest

from agent_gym.errors import ConfigError
from agent_gym.memory import MemoryConfig, MemorySimple
from agent_gym.memory.tokens import TokenCounter


class CountingTokenizer:
    """Wraps a real tokenizer and counts encode calls."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def encode(self, text):
        self.calls += 1
        return self.inner.encode(text).ids


def test_count_with_tokenizer_adds_four(word_tokenizer):
    counter = TokenCounter(word_tokenizer)
    assert counter.count("the weather is sunny") == 4 + 4
    assert counter.count("") == 4
    assert counter.count_text("the weather is sunny") == 4


def test_count_without_tokenizer_is_chars_over_four():
    counter = TokenCounter()
    assert counter.count("abcd") == 1
    assert counter.count("abcde") == 2
    assert counter.count("") == 0
    assert counter.count("x" * 400) == 100


def test_counts_are_cached_per_content(word_tokenizer):
    tok = CountingTokenizer(word_tokenizer)
    memory = MemorySimple(tokenizer=tok)
    memory.add([{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "hello world"}])
    for _ in range(5):
        memory.get_prompt_messages()
        memory.count_tokens()
    assert tok.calls == 1
    memory.add({"role": "tool", "content": "result is sunny"})
    memory.get_prompt_messages()
    assert tok.calls == 2
    assert memory.count_tokens() == 3 * 4 + 2 + 2 + 3


def test_transformers_tokenizer_counts_without_special_tokens(word_tokenizer):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=word_tokenizer, unk_token="[UNK]", bos_token="[UNK]")
    counter = TokenCounter(fast)
    assert counter.count("find the city") == 3 + 4


def test_tokenizer_is_loaded_lazily_from_the_config_path(word_tokenizer_dir):
    memory = MemorySimple(MemoryConfig(train_model_tokenizer_path=word_tokenizer_dir))
    assert memory._counter._tokenizer is None  # nothing loaded yet
    memory.add({"role": "user", "content": "what is the weather in the city"})
    memory.get_prompt_messages()
    assert memory.last_view_tokens == 7 + 4
    from transformers import PreTrainedTokenizerBase

    assert isinstance(memory.tokenizer, PreTrainedTokenizerBase)


def test_a_bad_tokenizer_path_names_the_field(tmp_path):
    memory = MemorySimple(MemoryConfig(train_model_tokenizer_path=str(tmp_path / "missing")))
    memory.add({"role": "user", "content": "hi"})
    with pytest.raises(ConfigError, match="train_model_tokenizer_path"):
        memory.get_prompt_messages()


def test_changing_the_tokenizer_path_recounts(word_tokenizer_dir):
    memory = MemorySimple()
    memory.add({"role": "user", "content": "the city is sunny and the rain was"})  # 35 chars, 8 words
    memory.get_prompt_messages()
    assert memory.last_view_tokens == 9
    memory.get_prompt_messages({"train_model_tokenizer_path": word_tokenizer_dir})
    assert memory.last_view_tokens == 8 + 4


def test_a_tokenizer_without_encode_is_rejected():
    with pytest.raises(TypeError, match="encode"):
        MemorySimple(tokenizer=object())


def test_split_and_truncate(word_tokenizer):
    counter = TokenCounter(word_tokenizer)
    text = " ".join(["hello"] * 10)
    pieces = counter.split(text, 4)
    assert [counter.count_text(p) for p in pieces] == [4, 4, 2]
    assert counter.count_text(counter.truncate(text, 3)) == 3
    assert counter.truncate("hello world", 5) == "hello world"
    plain = TokenCounter()
    assert plain.split("abcdefghij", 1) == ["abcd", "efgh", "ij"]
    assert plain.truncate("abcdefghij", 2) == "abcdefgh"
    with pytest.raises(ValueError):
        plain.split("abc", 0)
