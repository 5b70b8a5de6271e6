"""HttpTransport: replies, JSON on the wire, and how transport failures are reported."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from agent_gym.errors import TransportFailure, TransportTimeout
from agent_gym.policy.http_transport import HttpReply, HttpTransport, _dump_json

BODY = {"prompt": [9707, 1879, 0], "max_tokens": 2, "logprobs": 0, "return_token_ids": True}


def _run(coro_fn, **transport_options):
    async def main():
        options = {"max_connections": 4, "timeout": 30.0, "connect_timeout": 5.0, **transport_options}
        transport = HttpTransport(**options)
        try:
            return await coro_fn(transport)
        finally:
            await transport.aclose()
            assert transport.closed

    return asyncio.run(main())


def test_post_json_and_get_return_complete_replies(reference_server):
    async def calls(transport):
        posted = await transport.post_json(f"http://{reference_server}/v1/completions", BODY, headers={"x-a": "1"})
        models = await transport.get(f"http://{reference_server}/v1/models")
        return posted, models

    posted, models = _run(calls)
    assert posted.status == 200 and len(posted.json()["choices"][0]["token_ids"]) == 2
    assert posted.headers["content-type"].startswith("application/json")
    assert models.status == 200 and models.json()["data"][0]["max_model_len"] == 4096


def test_error_statuses_are_replies_not_exceptions(reference_server):
    reply = _run(lambda t: t.post_json(f"http://{reference_server}/v1/completions", {"prompt": []}))
    assert reply.status == 400 and "empty" in reply.json()["error"]["message"]


def test_refused_connection_is_a_transport_failure():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportFailure, match="Connect"):
        _run(lambda t: t.post_json(f"http://127.0.0.1:{port}/v1/completions", BODY))


def test_no_answer_in_time_is_a_transport_timeout(start_server):
    server = start_server(fake_tokens=2, hang=True)
    with pytest.raises(TransportTimeout):
        _run(lambda t: t.post_json(f"http://{server}/v1/completions", BODY, timeout=0.5))


def test_reply_json_accepts_python_constants_and_rejects_garbage():
    assert HttpReply(200, b'{"lp": -Infinity, "x": NaN}').json()["lp"] == float("-inf")
    with pytest.raises(ValueError):
        HttpReply(200, b'{"choices": [').json()
    assert HttpReply(200, b"\xff\xfe").text  # undecodable bytes do not raise


def test_bodies_orjson_cannot_write_fall_back_to_the_standard_library():
    assert json.loads(_dump_json({"seed": 2**70, "ids": [1, 2]})) == {"seed": 2**70, "ids": [1, 2]}
    assert _dump_json({"a": [1, 2]}) == b'{"a":[1,2]}'
