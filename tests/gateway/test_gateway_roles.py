"""The gateway's two roles over HTTP: a session's key samples and nothing else; the trainer's token does the rest."""

from __future__ import annotations

import argparse

import httpx
import pytest

from agent_gym.cli import build_parser
from agent_gym.cli.gateway import TOKEN_ENV, build_gateway
from agent_gym.gateway import Gateway
from agent_gym.serving.auth import resolve_token

USER = {"role": "user", "content": "What is 6 * 7?"}


@pytest.fixture(scope="module")
def gateway(scripted_upstream, qwen_tokenizer):
    address, _ = scripted_upstream(qwen_tokenizer, max_model_len=1024)
    with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}) as gw:
        yield gw


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(gw: Gateway, session_path: str | None, key: str | None) -> httpx.Response:
    base = f"{gw.url}/sessions/{session_path}" if session_path else gw.url
    return httpx.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": [USER]},
                      headers=bearer(key) if key else {}, timeout=60)


def test_a_session_key_samples_in_its_session_and_does_nothing_else(gateway):
    gw = gateway
    mine, other = gw.session(), gw.session()
    assert mine.api_key != mine.session_id and mine.api_key.startswith("sk-agw-")
    assert chat(gw, mine.session_id, mine.api_key).status_code == 200  # by path and key
    assert chat(gw, None, mine.api_key).headers["x-agent-gym-session"] == mine.session_id  # by key alone
    # the agent's key cannot end its episode, set its status, read or list sessions, or make sessions
    url = f"{gw.url}/sessions/{mine.session_id}"
    for status in ("ENV_DONE", "ENV_ERROR"):
        refused = httpx.post(f"{url}/reward", json={"reward": 1.0, "status": status}, headers=bearer(mine.api_key))
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "PermissionDeniedError"
    assert httpx.get(f"{url}/trajectory", headers=bearer(mine.api_key)).status_code == 403
    assert httpx.get(f"{gw.url}/sessions", headers=bearer(mine.api_key)).status_code == 403
    assert httpx.post(f"{gw.url}/sessions", json={}, headers=bearer(mine.api_key)).status_code == 403
    # nor sample in another session; no key, a wrong key or the session id as key get 401
    assert chat(gw, other.session_id, mine.api_key).status_code == 401
    for key in (None, "wrong", mine.session_id):
        assert chat(gw, mine.session_id, key).status_code == 401
        assert httpx.post(f"{url}/reward", json={"reward": 1.0}, headers=bearer(key) if key else {}).status_code == 401
    # the trainer's reward is the one that counts (the agent's attempts changed nothing)
    done = httpx.post(f"{url}/reward", json={"reward": 0.5}, headers=gw.trainer_headers)
    assert done.status_code == 200 and done.json()["status"] == "ENV_DONE" and done.json()["trajectory_reward"] == 0.5
    listed = httpx.get(f"{gw.url}/sessions", headers=gw.trainer_headers).json()["sessions"]
    assert {mine.session_id, other.session_id} <= {s["session_id"] for s in listed}


def test_the_trainer_creates_sessions_whose_keys_sample(gateway):
    gw = gateway
    created = httpx.post(f"{gw.url}/sessions", json={"session_id": "by-trainer"}, headers=gw.trainer_headers).json()
    assert created["api_key"].startswith("sk-agw-")
    assert chat(gw, "by-trainer", created["api_key"]).status_code == 200
    assert chat(gw, "by-trainer", gw.trainer_token).status_code == 200  # the trainer may sample anywhere
    assert httpx.get(f"{gw.url}/v1/models", headers=bearer(created["api_key"])).status_code == 200
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401


@pytest.mark.parametrize("body", [
    b'{"reward": 1e308}', b'{"reward": -11}', b'{"reward": 10.5}', b'{"rewards": [1e308]}', b'{"rewards": [-1e999]}',
    b'{"reward": NaN}', b'{"reward": "1"}', b'{"reward": true}', b'{"reward": 1.0, "status": []}',
    b'{"reward": 1.0, "status": "won"}',
])
def test_rewards_must_be_finite_numbers_within_the_range(gateway, body):
    gw = gateway
    s = gw.session()
    assert chat(gw, s.session_id, s.api_key).status_code == 200
    url = f"{gw.url}/sessions/{s.session_id}/reward"
    refused = httpx.post(url, content=body, headers={**gw.trainer_headers, "content-type": "application/json"})
    assert refused.status_code == 400, refused.text
    ok = httpx.post(url, json={"reward": 10.0}, headers=gw.trainer_headers)  # the range's edge, and not yet finished
    assert ok.status_code == 200 and ok.json()["trajectory_reward"] == 10.0


def _args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["gateway", "--server", "127.0.0.1:9", "--tokenizer", "qwen", *extra])


def test_the_trainer_token_comes_from_the_flag_the_environment_or_is_generated(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    generated = build_gateway(_args("--reward-range", "0", "1"))[0]
    assert generated.state.trainer_token.startswith("tr-agw-") and generated.state.token_source.source == "generated"
    assert generated.state.trainer_token in generated.state.token_source.describe()  # printed at start
    assert generated.state.limits.max_body_bytes == 8 * 2**20
    # the same resolution as the command line's: the flag, else the environment variable, else generated
    assert resolve_token("from-flag", TOKEN_ENV, generate=True, environ={TOKEN_ENV: "env"}).token == "from-flag"
    assert resolve_token(None, TOKEN_ENV, generate=True, environ={TOKEN_ENV: "from-env"}).token == "from-env"
    for blank in (" ", "", "tok "):
        with pytest.raises(ValueError, match="non-blank"):
            resolve_token(blank, TOKEN_ENV)
