"""Tests of the token-in endpoints: vLLM's POST /inference/v1/generate and SGLang's POST /generate."""

from __future__ import annotations

import httpx
import pytest

PROMPT = [9707, 1879, 0]  # "Hello world!"


def post(server: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"http://{server}{path}", json=body, timeout=60)


def test_vllm_generate_shape_and_same_sample_as_completions(reference_server):
    sampling = {"max_tokens": 6, "logprobs": 0, "seed": 3, "temperature": 1.0, "top_k": -1}
    r = post(reference_server, "/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": sampling})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) >= {"request_id", "model", "created", "choices", "usage"}
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 6
    content = choice["logprobs"]["content"]
    assert [e["token_id"] for e in content] == choice["token_ids"]
    assert all(e["logprob"] <= 0 and "top_logprobs" in e for e in content)
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    # the same seed through /v1/completions draws the same ids and logprobs
    c = post(reference_server, "/v1/completions", {"prompt": PROMPT, **sampling, "return_token_ids": True})
    ref = c.json()["choices"][0]
    assert ref["token_ids"] == choice["token_ids"]
    assert ref["logprobs"]["token_logprobs"] == pytest.approx([e["logprob"] for e in content], abs=1e-5)


def test_vllm_generate_without_logprobs_and_default_budget(reference_server):
    r = post(reference_server, "/inference/v1/generate",
             {"token_ids": PROMPT, "sampling_params": {"stop_token_ids": list(range(151643)), "seed": 0}})
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    assert choice["logprobs"] is None
    assert choice["finish_reason"] == "stop" and len(choice["token_ids"]) == 1  # any id stops it


def test_sglang_generate_shape(reference_server):
    r = post(reference_server, "/generate", {
        "input_ids": PROMPT, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 5, "sampling_seed": 3, "temperature": 1.0, "top_k": -1,
                            "no_stop_trim": True, "skip_special_tokens": False},
    })
    assert r.status_code == 200, r.text
    body = r.json()
    meta = body["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    entries = meta["output_token_logprobs"]
    assert [e[1] for e in entries] == body["output_ids"] and len(entries) == 5
    assert all(e[0] <= 0 and e[2] is None for e in entries)
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 5
    assert isinstance(body["text"], str) and isinstance(meta["weight_version"], str)
    # SGLang's names map onto the same sampling as vLLM's
    v = post(reference_server, "/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": {
        "max_tokens": 5, "seed": 3, "temperature": 1.0, "top_k": -1, "logprobs": 0}}).json()
    assert v["choices"][0]["token_ids"] == body["output_ids"]


def test_sglang_stop_token_reports_matched(reference_server):
    r = post(reference_server, "/generate", {"input_ids": PROMPT, "sampling_params": {
        "max_new_tokens": 5, "stop_token_ids": list(range(151643))}})
    meta = r.json()["meta_info"]
    assert meta["finish_reason"]["type"] == "stop"
    assert meta["finish_reason"]["matched"] == r.json()["output_ids"][-1]
    assert "output_token_logprobs" not in meta  # not asked for


def test_answers_are_recorded(reference_server):
    r = post(reference_server, "/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}})
    recorded = httpx.get(f"http://{reference_server}/debug/token_answers").json()
    assert recorded[-1] == {"path": "/generate", "answer": r.json()}


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/inference/v1/generate", {"token_ids": [], "sampling_params": {}}, "token_ids"),
    ("/inference/v1/generate", {"sampling_params": {}}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": {"temperature": -1}}, "temperature"),
    ("/inference/v1/generate", {"token_ids": [10**9], "sampling_params": {"max_tokens": 2}}, "prompt"),
    ("/generate", {"sampling_params": {}}, "input_ids"),
    ("/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 10**6}}, "max_new_tokens"),
])
def test_bad_requests_are_400(reference_server, path, body, param):
    r = post(reference_server, path, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert param in (error.get("param") or "") + error["message"]
