"""ClientOptions (the vLLM client's settings, named once) and the client's retry step, without servers."""

from __future__ import annotations

import asyncio
import pickle
import sys

import pytest

from agent_gym.errors import ConfigError, ServerError, TransportFailure
from agent_gym.policy import ClientOptions, VLLMClient
from agent_gym.policy.http_transport import HttpReply, HttpTransport


def test_defaults_checks_and_coercion():
    options = ClientOptions()
    assert (options.concurrency, options.max_retries, options.timeout, options.connect_timeout) == (64, 3, 300.0, 10.0)
    assert ClientOptions(timeout=2).connect_timeout == 2.0  # capped at the timeout
    assert ClientOptions.coerce(None) == options and ClientOptions.coerce(options) is options
    assert ClientOptions.coerce({"max_retries": 0}) == ClientOptions(max_retries=0)
    assert options.replace(backoff=1).backoff == 1.0 and options.backoff == 0.5
    assert "api_key" not in repr(ClientOptions(api_key="k"))
    with pytest.raises(ConfigError, match="unhealthy_seconds"):
        ClientOptions(unhealthy_seconds=-1)
    with pytest.raises(TypeError, match="api_key"):
        ClientOptions(api_key=5)
    with pytest.raises(TypeError, match="got \\['retry'\\]"):
        ClientOptions.coerce({"retry": 1})
    with pytest.raises(TypeError, match="client_options"):
        ClientOptions.coerce([("max_retries", 1)])


def test_client_pickles_as_addresses_and_options():
    client = VLLMClient(["https://node:9/v1", "127.0.0.1:8"], ClientOptions(max_retries=1))
    copy = pickle.loads(pickle.dumps(client))
    assert type(copy) is VLLMClient and copy.options == client.options
    assert copy.server_addresses == client.server_addresses == ["node:9", "127.0.0.1:8"]
    assert copy.url("node:9", "/v1/models") == "https://node:9/v1/models"


def _spy_posts(monkeypatch, answers):
    """``HttpTransport.post_json`` answering from ``answers`` (a reply, or an exception to raise) in order."""
    targets: list[str] = []

    async def post_json(self, url, body, **kwargs):
        targets.append(url.split("/")[2])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(HttpTransport, "post_json", post_json)
    return targets


async def _make_body(server: str) -> dict:
    return {"prompt": [1]}


def _post(client: VLLMClient, **kwargs):
    async def run():
        try:
            return await client.post("session", "/v1/completions", _make_body, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_retry_step_fails_over_and_gives_up_with_every_error(monkeypatch):
    ok = HttpReply(200, b'{"choices": [{"text": "x"}]}')
    client = VLLMClient(["127.0.0.1:1", "127.0.0.1:2"], ClientOptions(max_retries=2, backoff=0.0))
    targets = _spy_posts(monkeypatch, [TransportFailure("refused"), ok])
    data, server = _post(client)
    assert data["choices"][0]["text"] == "x" and targets == [targets[0], server] and server != targets[0]

    client = VLLMClient(["127.0.0.1:1"], ClientOptions(max_retries=2, backoff=0.0))
    _spy_posts(monkeypatch, [HttpReply(503, b"busy"), TransportFailure("refused"), HttpReply(500, b"boom")])
    with pytest.raises(ServerError, match="after 3 attempt.*HTTP 503.*connection failed.*HTTP 500") as info:
        _post(client, server="127.0.0.1:1")  # pinned: retried on the same server
    assert info.value.status == 500 and info.value.server == "127.0.0.1:1"


def test_retry_step_waits_for_retry_after(monkeypatch):
    client = VLLMClient(["127.0.0.1:1"], ClientOptions(max_retries=1, backoff=0.0, max_backoff=5.0))
    _spy_posts(monkeypatch, [HttpReply(429, b"slow down", {"retry-after": "0.3"}),
                             HttpReply(200, b'{"choices": [{"text": "x"}]}')])
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds):
        # other threads' loops (left by earlier tests) also sleep: count only the client's own waits
        if not sys._getframe(1).f_code.co_filename.endswith("vllm_client.py"):
            return await real_sleep(seconds)
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    _post(client)
    assert slept == [0.3]
