"""Tests of POST /v1/completions (and /tokenize, /detokenize, /v1/models) on a real server process."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch

PROMPT = [9707, 1879, 0]  # "Hello world!"


def complete(server: str, **body):
    body.setdefault("prompt", PROMPT)
    return httpx.post(f"http://{server}/v1/completions", json=body, timeout=60)


def test_token_ids_and_logprobs(reference_server):
    r = complete(reference_server, max_tokens=6, logprobs=0, return_token_ids=True, seed=0)
    assert r.status_code == 200, r.text
    body = r.json()
    (choice,) = body["choices"]
    assert choice["prompt_token_ids"] == PROMPT
    ids = choice["token_ids"]
    assert len(ids) == 6 and choice["finish_reason"] == "length"
    lps = choice["logprobs"]["token_logprobs"]
    assert len(lps) == 6 and all(lp <= 0 for lp in lps)
    assert len(choice["logprobs"]["tokens"]) == 6 and len(choice["logprobs"]["top_logprobs"]) == 6
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    # the text is the decoding of the sampled ids
    detok = httpx.post(f"http://{reference_server}/detokenize", json={"tokens": ids}).json()["prompt"]
    assert choice["text"] == detok


def test_logprobs_match_rescoring_at_temperature_1(reference_server, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    r = complete(reference_server, max_tokens=8, logprobs=0, return_token_ids=True, temperature=1.0, seed=5)
    choice = r.json()["choices"][0]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    seq = torch.tensor([PROMPT + choice["token_ids"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq).logits[0].float(), dim=-1)
    expected = [float(logp[len(PROMPT) - 1 + i, t]) for i, t in enumerate(choice["token_ids"])]
    got = choice["logprobs"]["token_logprobs"]
    assert max(abs(a - b) for a, b in zip(got, expected, strict=False)) < 1e-3


def test_return_tokens_as_token_ids_and_top_logprobs(reference_server):
    r = complete(reference_server, max_tokens=3, logprobs=2, return_token_ids=True, return_tokens_as_token_ids=True)
    choice = r.json()["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    lp_block = choice["logprobs"]
    for t, lp, top in zip(choice["token_ids"], lp_block["token_logprobs"], lp_block["top_logprobs"], strict=True):
        assert top[f"token_id:{t}"] == pytest.approx(lp)
        assert len(top) >= 2 and all(k.startswith("token_id:") for k in top)


def test_seed_determinism_and_n(reference_server):
    a = complete(reference_server, max_tokens=5, seed=123, return_token_ids=True).json()
    b = complete(reference_server, max_tokens=5, seed=123, return_token_ids=True).json()
    assert a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]
    multi = complete(reference_server, max_tokens=5, seed=123, n=3, return_token_ids=True).json()
    assert [c["index"] for c in multi["choices"]] == [0, 1, 2]
    assert multi["choices"][0]["token_ids"] == a["choices"][0]["token_ids"]
    child = complete(reference_server, max_tokens=5, seed=124, return_token_ids=True).json()
    assert multi["choices"][1]["token_ids"] == child["choices"][0]["token_ids"]  # child i uses seed + i


def test_greedy_and_top_k_1_agree(reference_server):
    greedy = complete(reference_server, max_tokens=4, temperature=0, return_token_ids=True).json()
    topk = complete(reference_server, max_tokens=4, top_k=1, seed=9, return_token_ids=True).json()
    assert greedy["choices"][0]["token_ids"] == topk["choices"][0]["token_ids"]


def test_stop_token_ids(reference_server):
    greedy = complete(reference_server, max_tokens=4, temperature=0, return_token_ids=True).json()["choices"][0]
    first = greedy["token_ids"][0]
    r = complete(reference_server, max_tokens=4, temperature=0, return_token_ids=True, stop_token_ids=[first])
    choice = r.json()["choices"][0]
    assert choice["token_ids"] == [first]  # the stop token is included in token_ids
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == first
    assert choice["text"] == ""
    kept = complete(
        reference_server,
        max_tokens=4,
        temperature=0,
        stop_token_ids=[first],
        include_stop_str_in_output=True,
        skip_special_tokens=False,
    ).json()["choices"][0]
    tok_text = httpx.post(f"http://{reference_server}/detokenize", json={"tokens": [first]}).json()["prompt"]
    assert kept["text"] == tok_text


def test_stop_strings(reference_server):
    greedy = complete(reference_server, max_tokens=6, temperature=0, return_token_ids=True).json()["choices"][0]
    pieces = [
        httpx.post(f"http://{reference_server}/detokenize", json={"tokens": [t]}).json()["prompt"]
        for t in greedy["token_ids"]
    ]
    stop = next(p for p in pieces[2:] if p.strip())
    choice = complete(reference_server, max_tokens=6, temperature=0, stop=[stop], return_token_ids=True).json()[
        "choices"
    ][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert stop not in choice["text"] and greedy["text"].startswith(choice["text"])
    assert choice["token_ids"] == greedy["token_ids"][: len(choice["token_ids"])]


def test_text_prompt_and_tokenize_round_trip(reference_server):
    tok = httpx.post(f"http://{reference_server}/tokenize", json={"prompt": "Hello world!"}).json()
    assert tok["tokens"] == PROMPT and tok["count"] == 3 and tok["max_model_len"] == 4096
    back = httpx.post(f"http://{reference_server}/detokenize", json={"tokens": tok["tokens"]}).json()
    assert back == {"prompt": "Hello world!"}
    r = complete(reference_server, prompt="Hello world!", max_tokens=2, return_token_ids=True)
    assert r.json()["choices"][0]["prompt_token_ids"] == PROMPT
    assert len(complete(reference_server, prompt="Hello world!").json()["choices"][0]["token_ids"] or []) == 0
    assert complete(reference_server, prompt="x", return_token_ids=True).json()["usage"]["completion_tokens"] == 16


def test_models_lists_max_model_len(reference_server):
    data = httpx.get(f"http://{reference_server}/v1/models").json()["data"]
    assert data[0]["max_model_len"] == 4096 and data[0]["object"] == "model"
    assert httpx.get(f"http://{reference_server}/health").status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"top_p": 2.0}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"n": 0}, "n"),
        ({"prompt": [999999999]}, "prompt"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"prompt": None}, "prompt"),
    ],
)
def test_bad_request_body(reference_server, body, param):
    r = complete(reference_server, **body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400 and err["param"] == param
    assert isinstance(err["message"], str) and err["message"]


def test_over_long_prompt(reference_server):
    r = complete(reference_server, prompt=[9707] * 4100, max_tokens=1)
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
    r = complete(reference_server, prompt=PROMPT, max_tokens=4095)
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]


async def test_concurrent_requests_do_not_block_io(reference_server):
    async with httpx.AsyncClient(base_url=f"http://{reference_server}", timeout=120) as client:
        long = asyncio.create_task(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 150}))
        await asyncio.sleep(0.3)
        t0 = time.perf_counter()
        assert (await client.get("/health")).status_code == 200
        assert (await client.post("/tokenize", json={"prompt": "hi"})).status_code == 200
        assert time.perf_counter() - t0 < 1.0
        shorts = await asyncio.gather(
            *(
                client.post(
                    "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, "seed": i, "return_token_ids": True}
                )
                for i in range(6)
            )
        )
        assert all(r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 3 for r in shorts)
        assert (await long).status_code == 200


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b'{"prompt": [1, 2', "not valid JSON"), (b'{"prompt": [1], "max_tokens": "many"}', "max_tokens")],
)
def test_malformed_bodies_get_a_vllm_400(reference_server, raw, expected):
    r = httpx.post(
        f"http://{reference_server}/v1/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert expected in error["message"] and error["code"] == 400
