"""The reference server over HTTP: capped requests, refused client templates, cancelled generations, its API key."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from agent_gym.policy import ClientOptions, SamplingParams, VLLMPolicy
from agent_gym.reference_server.app import create_app
from agent_gym.reference_server.backends import FakeBackend
from agent_gym.serving.limits import RequestLimits
from agent_gym.serving.templates import TemplateLimits

LIMITS = RequestLimits(max_body_bytes=2**20, max_n=4, max_prompts=8, max_tokens=64, max_messages=16, max_tools=4)
MESSAGES = [{"role": "user", "content": "hi"}]
LOOP = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


class ProbeBackend(FakeBackend):
    """A fake backend that records each generation's start and whether it was cancelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def generate(self, req: Any) -> Any:
        self.started.set()
        try:
            return await super().generate(req)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class Served:
    """An app served by uvicorn in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        while not self.server.started:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None, **kwargs: Any) -> httpx.Response:
        if raw is not None:
            return httpx.post(self.url + path, content=raw, headers={"content-type": "application/json"}, **kwargs)
        return httpx.post(self.url + path, json=body, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def servers(qwen_tokenizer):
    made = {
        "plain": Served(create_app(FakeBackend(qwen_tokenizer, num_tokens=4), limits=LIMITS)),
        "trusting": Served(create_app(FakeBackend(qwen_tokenizer, num_tokens=4), trust_request_chat_template=True,
                                      template_limits=TemplateLimits(cpu_s=1, wall_s=3.0))),
        "keyed": Served(create_app(FakeBackend(qwen_tokenizer, num_tokens=4), api_key="serve-key")),
        "short": Served(create_app(FakeBackend(qwen_tokenizer, num_tokens=4, max_model_len=64))),
    }
    yield made
    for server in made.values():
        server.server.should_exit = True


def error_of(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text[:300]
    return reply.json()["error"]


def test_requests_beyond_the_limits_are_refused_in_vllms_shape(servers):
    s = servers["plain"]
    big = error_of(s.post("/v1/completions", raw=b'{"prompt": "' + b"a" * (2**20 + 10) + b'"}'), 413)
    assert big["type"] == "RequestTooLargeError" and big["code"] == 413
    chunks = (b'{"prompt": "', b"a" * (2**20), b'"}')  # no Content-Length: cut off while it arrives
    assert httpx.post(s.url + "/v1/completions", content=iter(chunks)).status_code == 413
    cases = [
        ("/v1/completions", {"prompt": [1, 2], "n": 5}, "n"),
        ("/v1/completions", {"prompt": [[1, 2]] * 9}, "prompt"),
        ("/v1/completions", {"prompt": [1, 2], "max_tokens": 65}, "max_tokens"),
        ("/v1/chat/completions", {"messages": MESSAGES * 17}, "messages"),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 65}, "max_tokens"),
        ("/v1/chat/completions", {"messages": MESSAGES, "n": 5}, "n"),
        ("/v1/chat/completions", {"messages": MESSAGES, "tool_choice": "none",
                                  "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(5)]},
         "tools"),
        ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"n": 5, "max_tokens": 4}}, "n"),
        ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"max_tokens": 65}}, "max_tokens"),
        ("/tokenize", {"messages": MESSAGES * 17}, "messages"),
    ]
    for path, body, param in cases:
        assert param in error_of(s.post(path, body), 400)["param"], (path, body)
    assert s.post("/v1/completions", {"prompt": [1, 2], "n": 4, "max_tokens": 64}).status_code == 200


def test_client_chat_templates_are_refused_unless_the_operator_trusts_them(servers):
    s = servers["plain"]
    for extra in ({"chat_template": LOOP}, {"chat_template_kwargs": {"chat_template": LOOP}},
                  {"chat_template_kwargs": {"tokenize": False}}, {"chat_template_kwargs": {"items": list(range(9))}},
                  {"chat_template_kwargs": {"note": "x" * 5000}}):
        for path in ("/v1/chat/completions", "/tokenize"):
            error = error_of(s.post(path, {"messages": MESSAGES, **extra}), 400)
            assert error["param"] in ("chat_template", "chat_template_kwargs"), (path, extra)
    assert s.post("/v1/chat/completions", {"messages": MESSAGES,
                                           "chat_template_kwargs": {"enable_thinking": False}}).status_code == 200
    # trusted, a template is rendered in a bounded sandbox: a loop of 10^10 is stopped, /health answers meanwhile
    t = servers["trusting"]
    own = t.post("/tokenize", {"messages": MESSAGES, "chat_template": "{% for m in messages %}[{{ m.content }}]"
                                                                       "{% endfor %}", "add_generation_prompt": False})
    assert own.status_code == 200 and own.json()["tokens"] == t.post("/tokenize", {"prompt": "[hi]"}).json()["tokens"]
    slowest = []

    def health() -> None:
        while not done.is_set():
            began = time.perf_counter()
            httpx.get(t.url + "/health", timeout=10)
            slowest.append(time.perf_counter() - began)
            time.sleep(0.05)

    done = threading.Event()
    watcher = threading.Thread(target=health)
    watcher.start()
    began = time.monotonic()
    try:
        error = error_of(t.post("/v1/chat/completions", {"messages": MESSAGES, "chat_template": LOOP}), 400)
    finally:
        done.set()
        watcher.join()
    assert "chat_template" in error["message"] and time.monotonic() - began < 5
    assert max(slowest) < 1.0


def test_health_answers_while_a_large_prompt_is_tokenized(servers):
    s = servers["trusting"]
    prompt = "word " * 400_000  # 2 MB of text: seconds of tokenization
    done = threading.Event()
    result: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: (result.append(s.post("/tokenize", {"prompt": prompt})), done.set()))
    thread.start()
    slowest = 0.0
    while not done.is_set():
        began = time.perf_counter()
        assert httpx.get(s.url + "/health", timeout=10).status_code == 200
        slowest = max(slowest, time.perf_counter() - began)
        time.sleep(0.05)
    thread.join()
    assert result[0].status_code == 200 and result[0].json()["count"] > 100_000
    assert slowest < 1.0


def test_a_text_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(servers):
    s = servers["short"]
    began = time.perf_counter()
    error = error_of(s.post("/v1/completions", {"prompt": "word " * 200_000, "max_tokens": 4}), 400)
    assert "maximum context length" in error["message"] and "at least" in error["message"]
    assert time.perf_counter() - began < 1.0  # a megabyte is not tokenized to find out
    assert s.post("/v1/completions", {"prompt": "word " * 10, "max_tokens": 4}).status_code == 200


def test_a_generation_stops_when_its_client_goes_away(qwen_tokenizer):
    for stream in (False, True):
        backend = ProbeBackend(qwen_tokenizer, num_tokens=64, latency_ms=50, token_latency_ms=100)
        served = Served(create_app(backend))
        body = {"prompt": [1, 2, 3], "max_tokens": 64, "stream": stream}
        try:
            if stream:
                with httpx.stream("POST", served.url + "/v1/completions", json=body) as reply:
                    next(reply.iter_lines())  # one chunk, then the client goes away
            else:
                with pytest.raises(httpx.ReadTimeout):
                    httpx.post(served.url + "/v1/completions", json=body, timeout=0.5)
            assert backend.started.is_set()
            assert backend.cancelled.wait(3.0), f"the generation went on after the client left (stream={stream})"
        finally:
            served.server.should_exit = True


def test_malformed_bodies_are_400_not_500(servers):
    s = servers["plain"]
    for path, raw in (("/v1/completions", b"[" * 100_000 + b"]" * 100_000),
                      ("/v1/completions", b'{"prompt": "\\ud800"}'),
                      ("/tokenize", b'{"prompt": "a\\udfff"}'),
                      ("/generate", b'{"text": "\\ud800", "sampling_params": {"max_new_tokens": 2}}'),
                      ("/inference/v1/generate", b'{"token_ids": [1], "sampling_params": {"logprobs": "x"}}'),
                      ("/generate", b'{"input_ids": [1], "return_logprob": true, "top_logprobs_num": 1000}')):
        reply = s.post(path, raw=raw)
        assert reply.status_code == 400, (path, raw[:40], reply.status_code, reply.text[:200])


def test_the_api_key_guards_every_route_but_health(servers, qwen_tokenizer):
    s = servers["keyed"]
    assert httpx.get(s.url + "/health").status_code == 200
    for path in ("/v1/models", "/tokenize"):
        refused = httpx.post(s.url + path, json={"prompt": "x"}) if path == "/tokenize" else httpx.get(s.url + path)
        assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    assert httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer serve-key"}).status_code == 200
    policy = VLLMPolicy([s.url.removeprefix("http://")], qwen_tokenizer, SamplingParams(max_tokens=4),
                        client_options=ClientOptions(api_key="serve-key", max_retries=0))
    assert policy.act(MESSAGES, session_id="s").token_ids
