"""SamplingParams: seed ranges, clear errors, vLLM request fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_gym.policy import SamplingParams

BAD = [
    ("n", 0, "[>]= 1"),
    ("top_k", -2, "-1"),
    ("logprobs", -1, ">= 0"),
    ("min_p", 1.5, r"\[0.0, 1.0\]"),
    ("frequency_penalty", 2.5, r"\[-2.0, 2.0\]"),
    ("presence_penalty", -3, r"\[-2.0, 2.0\]"),
    ("max_tokens", 0, r"\[1, 64000\]"),
    ("max_tokens", 64001, r"\[1, 64000\]"),
    ("min_tokens", -1, r"\[0, 64000\]"),
    ("seed", 65536, r"\[-65535, 65535\]"),
    ("temperature", 2.1, r"\[0.0, 2.0\]"),
    ("top_p", 0.0, r"\[1e-08, 1.0\]"),
    ("repetition_penalty", 0.0, "> 0"),
    ("stop_token_ids", [-1], ">= 0"),
]


@pytest.mark.parametrize(("field", "value", "range_text"), BAD)
def test_out_of_range_names_field_and_range(field, value, range_text):
    with pytest.raises(ValidationError, match=range_text) as info:
        SamplingParams(**{field: value})
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(n=4, top_k=0, logprobs=0, min_p=1.0, max_tokens=64000, min_tokens=64000, seed=-65535),
        dict(top_k=-1, temperature=0.0, top_p=1e-8, frequency_penalty=-2.0, presence_penalty=2.0, seed=None),
        dict(temperature=2.0, detokenize=True, stop="</answer>", stop_token_ids=[151645], repetition_penalty=1.1),
    ],
)
def test_boundaries_accepted(kwargs):
    params = SamplingParams(**kwargs)
    assert params.stop in ([], ["</answer>"])


def test_defaults_follow_seed():
    p = SamplingParams()
    assert (p.n, p.top_k, p.logprobs, p.min_p, p.detokenize) == (1, 50, 1, 0.0, False)
    assert (p.max_tokens, p.min_tokens, p.temperature, p.top_p, p.seed) == (128, 0, 0.2, 1.0, None)


def test_min_tokens_not_above_max_tokens():
    with pytest.raises(ValidationError, match="min_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)


def test_assignment_is_validated_and_unknown_fields_rejected():
    p = SamplingParams()
    with pytest.raises(ValidationError, match="temperature"):
        p.temperature = 5.0
    with pytest.raises(ValidationError, match="top_n"):
        SamplingParams(top_n=3)


def test_to_request():
    p = SamplingParams(temperature=1.0, top_k=-1, seed=7, stop=["</tool_call>"], stop_token_ids=[2], max_tokens=64)
    body = p.to_request()
    assert body["max_tokens"] == 64 and body["seed"] == 7 and body["stop"] == ["</tool_call>"]
    assert body["stop_token_ids"] == [2] and body["top_k"] == -1 and body["temperature"] == 1.0
    assert p.to_request(max_tokens=5, n=1)["max_tokens"] == 5
    assert "seed" not in SamplingParams().to_request() and "stop" not in SamplingParams().to_request()


def test_coerce():
    assert SamplingParams.coerce(None) == SamplingParams()
    assert SamplingParams.coerce({"temperature": 1.0}).temperature == 1.0
    p = SamplingParams()
    assert SamplingParams.coerce(p) is p
    with pytest.raises(TypeError, match="expected SamplingParams"):
        SamplingParams.coerce(3)
