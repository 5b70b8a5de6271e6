"""MemoryConfig: seed fields, defaults, ranges, types and the cross-field rule."""

from __future__ import annotations

import pathlib

import pytest
from pydantic import ValidationError

from agent_gym.memory import DEFAULT_SUMMARY_SYSTEM_PROMPT, MemoryConfig


class FakeClient:
    class chat:  # noqa: N801 - mirrors openai's attribute layout
        class completions:  # noqa: N801
            @staticmethod
            def create(**kwargs):
                raise AssertionError("not called")


def test_defaults_match_the_seed():
    cfg = MemoryConfig()
    assert cfg.simplify_thinking is False
    assert cfg.use_summary is False
    assert cfg.max_summary_length == 1024
    assert cfg.max_prompt_length == 8192
    assert cfg.before_raw_message == 0
    assert cfg.end_raw_message == 0
    assert cfg.summary_system_prompt == DEFAULT_SUMMARY_SYSTEM_PROMPT
    assert cfg.oai_client is None
    assert cfg.oai_model_name == "qwen2.5-7b-instruct"
    assert cfg.train_model_tokenizer_path == ""
    assert list(MemoryConfig.model_fields) == [
        "simplify_thinking",
        "use_summary",
        "max_summary_length",
        "max_prompt_length",
        "before_raw_message",
        "end_raw_message",
        "summary_system_prompt",
        "oai_client",
        "oai_model_name",
        "train_model_tokenizer_path",
    ]
    assert MemoryConfig.model_config["validate_assignment"] is True
    assert MemoryConfig.model_config["arbitrary_types_allowed"] is True


def test_summary_prompt_text_and_placeholder():
    p = DEFAULT_SUMMARY_SYSTEM_PROMPT
    assert p.startswith("Please act as a summarization assistant to provide a precise and comprehensive summary")
    assert p.endswith("Please summarize the following dialogue content based on the above requirements.")
    assert "4. **Length Recommendation**: The summary should not exceed {max_summary_length} tokens.\n" in p
    assert p.count("\n") == 12
    formatted = MemoryConfig(max_summary_length=77).formatted_summary_prompt()
    assert "should not exceed 77 tokens." in formatted and "{" not in formatted
    custom = MemoryConfig(summary_system_prompt="Keep {json} braces; at most {max_summary_length}.")
    assert custom.formatted_summary_prompt() == "Keep {json} braces; at most 1024."


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_prompt_length", 0),
        ("max_prompt_length", 128 * 1024 + 1),
        ("max_summary_length", 0),
        ("before_raw_message", -1),
        ("end_raw_message", 1),
        ("summary_system_prompt", ""),
        ("oai_model_name", ""),
    ],
)
def test_out_of_range_values_name_the_field(field, value):
    with pytest.raises(ValidationError) as info:
        MemoryConfig(**{field: value})
    assert info.value.errors()[0]["loc"] == (field,)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("simplify_thinking", "yes"),
        ("simplify_thinking", 1),
        ("use_summary", "true"),
        ("max_prompt_length", "8192"),
        ("max_prompt_length", 4096.0),
        ("max_prompt_length", True),
        ("max_summary_length", None),
        ("before_raw_message", 1.5),
        ("end_raw_message", "-1"),
        ("summary_system_prompt", 3),
        ("oai_model_name", None),
        ("train_model_tokenizer_path", 5),
        ("oai_client", "http://localhost:8000"),
        ("oai_client", object()),
    ],
)
def test_wrong_types_name_the_field(field, value):
    with pytest.raises(ValidationError) as info:
        MemoryConfig(**{field: value})
    assert info.value.errors()[0]["loc"] == (field,)


def test_limits_are_inclusive():
    cfg = MemoryConfig(max_prompt_length=128 * 1024, max_summary_length=128 * 1024 - 1, end_raw_message=-3)
    assert cfg.max_prompt_length == 131072
    assert MemoryConfig(max_prompt_length=2, max_summary_length=1).max_summary_length == 1


def test_summary_must_be_shorter_than_prompt():
    with pytest.raises(ValidationError, match="max_summary_length .* must be less than max_prompt_length"):
        MemoryConfig(max_prompt_length=512, max_summary_length=512)
    with pytest.raises(ValidationError, match="max_summary_length"):
        MemoryConfig(max_prompt_length=100)  # default summary length 1024


def test_assignment_is_validated_and_rolled_back():
    cfg = MemoryConfig()
    with pytest.raises(ValidationError, match="max_prompt_length"):
        cfg.max_prompt_length = 1000  # below max_summary_length 1024
    assert cfg.max_prompt_length == 8192
    with pytest.raises(ValidationError) as info:
        cfg.before_raw_message = -2
    assert info.value.errors()[0]["loc"] == ("before_raw_message",)
    assert cfg.before_raw_message == 0
    with pytest.raises(ValidationError):
        cfg.use_summary = "no"
    assert cfg.use_summary is False
    cfg.max_summary_length = 100
    cfg.max_prompt_length = 1000
    assert (cfg.max_summary_length, cfg.max_prompt_length) == (100, 1000)


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError) as info:
        MemoryConfig(max_prompt_len=10)
    assert info.value.errors()[0]["loc"] == ("max_prompt_len",)


def test_client_and_path_types():
    client = FakeClient()
    cfg = MemoryConfig(oai_client=client, train_model_tokenizer_path=pathlib.Path("some/dir"))
    assert cfg.oai_client is client
    assert cfg.train_model_tokenizer_path == "some/dir"
    openai = pytest.importorskip("openai")
    real = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="EMPTY")
    assert MemoryConfig(oai_client=real).oai_client is real


def test_updated_validates_changes_together():
    cfg = MemoryConfig()
    new = cfg.updated({"max_prompt_length": 100, "max_summary_length": 50})
    assert (new.max_prompt_length, new.max_summary_length) == (100, 50)
    assert cfg.max_prompt_length == 8192
    with pytest.raises(ValidationError):
        cfg.updated({"max_prompt_length": 100})
    with pytest.raises(TypeError, match="config must be a dictionary"):
        cfg.updated([("max_prompt_length", 100)])  # type: ignore[arg-type]
