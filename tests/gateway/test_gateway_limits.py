"""The gateway under large and malformed requests, over HTTP: capped in each dialect, /health answers.

Its command's start line and its stop on SIGTERM while a large conversation is rendered are checked by
``tests/serving/test_server_fuzz_small.py`` (the servers as commands).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from agent_gym.gateway import Gateway
from agent_gym.serving.limits import RequestLimits

USER = {"role": "user", "content": "What is 6 * 7?"}
LIMITS = RequestLimits(max_body_bytes=6 * 2**20, max_messages=8, max_tools=2)


@pytest.fixture(scope="module")
def upstream(scripted_upstream, qwen_tokenizer):
    address, _ = scripted_upstream(qwen_tokenizer, max_model_len=1024)
    return address


@pytest.fixture(scope="module")
def gateway(upstream, qwen_tokenizer):
    with Gateway([upstream], qwen_tokenizer, sampling={"max_tokens": 64}, limits=LIMITS) as gw:
        yield gw


def test_requests_beyond_the_limits_are_refused_in_each_dialect(gateway):
    gw = gateway
    s = gw.session()
    key = {"Authorization": f"Bearer {s.api_key}"}
    huge = "a" * (20 * 2**20)  # the 20 MiB request
    chat = httpx.post(f"{s.openai_base_url}/chat/completions", json={"messages": [{"role": "user", "content": huge}]},
                      headers=key)
    assert chat.status_code == 413 and chat.json()["error"]["type"] == "RequestTooLargeError"
    responses = httpx.post(f"{s.openai_base_url}/responses", json={"input": huge}, headers=key)
    assert responses.status_code == 413 and responses.json()["error"]["code"] == 413
    messages = httpx.post(f"{s.base_url}/v1/messages", json={"messages": [{"role": "user", "content": huge}]},
                          headers={**key, "anthropic-version": "2023-06-01"})
    assert messages.status_code == 413 and messages.json()["type"] == "error"
    assert messages.json()["error"]["type"] == "request_too_large"
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(3)]
    for body, param in (({"messages": [USER] * 9}, "messages"), ({"messages": [USER], "tools": tools}, "tools"),
                        ({"messages": [USER], "n": 2}, "n")):
        refused = httpx.post(f"{s.openai_base_url}/chat/completions", json=body, headers=key)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, body
    anthropic = httpx.post(f"{s.base_url}/v1/messages", json={"messages": [USER] * 9}, headers=key)
    assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"
    assert httpx.post(f"{s.openai_base_url}/responses", json={"input": [USER] * 9}, headers=key).status_code == 400
    assert httpx.post(f"{s.openai_base_url}/chat/completions", json={"messages": [USER]}, headers=key).status_code \
        == 200


def test_health_answers_while_a_large_conversation_is_rendered(gateway):
    gw = gateway
    s = gw.session()
    body = {"messages": [{"role": "user", "content": "word " * 600_000}]}  # 3 MB: seconds of tokenization
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(httpx.post(
        f"{s.openai_base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {s.api_key}"},
        timeout=120)))
    thread.start()
    slowest = 0.0
    while thread.is_alive():
        began = time.perf_counter()
        assert httpx.get(f"{gw.url}/health", timeout=10).status_code == 200
        slowest = max(slowest, time.perf_counter() - began)
        time.sleep(0.05)
    thread.join()
    assert answers[0].status_code == 400 and "maximum context length" in answers[0].text  # 600k ids > 1024
    assert slowest < 1.0
