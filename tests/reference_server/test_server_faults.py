"""Tests of the server's testing aids: fake answers and fault injection (real processes)."""

from __future__ import annotations

import json

import httpx
import pytest

REQ = {"prompt": [1, 2, 3], "max_tokens": 8, "logprobs": 0, "return_token_ids": True}


def post(server: str, timeout: float = 30.0, **extra):
    return httpx.post(f"http://{server}/v1/completions", json={**REQ, **extra}, timeout=timeout)


@pytest.fixture(scope="module")
def servers(start_servers):
    names = ["fake", "rate_limited_then_hang", "failing_then_dying", "malformed"]
    started = start_servers(
        {"fake_tokens": 4, "fake_latency_ms": 1},
        {"fake_tokens": 2, "fail_first": 2, "fail_status": 429, "hang_after": 3},
        {"fake_tokens": 2, "fail_first": 1, "fail_status": 500, "die_after": 2},
        {"fake_tokens": 2, "malformed_json": True},
    )
    return dict(zip(names, started, strict=False))


def test_fake_mode_fixed_tokens(servers):
    fake = servers["fake"]
    choice = post(fake).json()["choices"][0]
    ids = choice["token_ids"]
    assert len(ids) == 4 and ids[-1] == 151645 and len(set(ids[:-1])) == 1
    assert choice["finish_reason"] == "stop" and choice["logprobs"]["token_logprobs"] == [-0.5] * 4
    cut = post(fake, max_tokens=2).json()["choices"][0]
    assert cut["token_ids"] == ids[:2] and cut["finish_reason"] == "length"
    chat = httpx.post(
        f"http://{fake}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "return_token_ids": True},
    ).json()
    assert chat["choices"][0]["token_ids"] == ids and chat["prompt_token_ids"][0] == 151644


def test_rate_limited_then_hang(servers):
    server = servers["rate_limited_then_hang"]
    first = post(server)
    assert first.status_code == 429 and first.json()["error"]["code"] == 429
    assert [post(server).status_code for _ in range(2)] == [429, 200]
    with pytest.raises(httpx.ReadTimeout):
        post(server, timeout=1.0)
    assert httpx.get(f"http://{server}/health").status_code == 200


def test_failing_then_dying(servers):
    server = servers["failing_then_dying"]
    assert [post(server).status_code for _ in range(2)] == [500, 200]
    with pytest.raises(httpx.TransportError):
        post(server)
    server.process.wait(timeout=10)
    assert not server.alive()


def test_malformed_json(servers):
    r = post(servers["malformed"])
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        r.json()
