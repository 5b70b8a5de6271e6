"""Tests of streamed POST /v1/completions (vLLM's server-sent events) on real server processes."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from agent_gym.reference_server.backends import GenRequest, SeqResult

PROMPT = [9707, 1879, 0]  # "Hello world!"


def stream(server: str, **body) -> list[dict]:
    """POST a streamed completion; return the JSON chunks (asserting the [DONE] terminator)."""
    body.setdefault("prompt", PROMPT)
    body["stream"] = True
    chunks: list[dict] = []
    done = False
    with httpx.stream("POST", f"http://{server}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            assert not done, "data after [DONE]"
            payload = line[len("data: "):]
            if payload == "[DONE]":
                done = True
            else:
                chunks.append(json.loads(payload))
    assert done
    return chunks


def complete(server: str, **body) -> dict:
    body.setdefault("prompt", PROMPT)
    r = httpx.post(f"http://{server}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_stream_equals_the_unstreamed_answer(reference_server):
    args = dict(max_tokens=12, seed=3, temperature=1.0, logprobs=1, return_token_ids=True)
    whole = complete(reference_server, **args)["choices"][0]
    chunks = stream(reference_server, **args)
    assert all(c["object"] == "text_completion" and len(c["choices"]) == 1 for c in chunks)
    choices = [c["choices"][0] for c in chunks]
    assert [c["finish_reason"] for c in choices[:-1]] == [None] * (len(choices) - 1)
    assert choices[-1]["finish_reason"] == whole["finish_reason"]
    assert choices[0]["prompt_token_ids"] == PROMPT
    assert all(c["prompt_token_ids"] is None for c in choices[1:])
    token_chunks = [c for c in choices if c["token_ids"]]
    assert all(len(c["token_ids"]) == 1 for c in token_chunks)  # one chunk per sampled id
    assert sum((c["token_ids"] for c in choices), []) == whole["token_ids"]
    assert "".join(c["text"] for c in choices) == whole["text"]
    lps = sum((c["logprobs"]["token_logprobs"] for c in token_chunks), [])
    assert lps == pytest.approx(whole["logprobs"]["token_logprobs"])
    tops = sum((c["logprobs"]["top_logprobs"] for c in token_chunks), [])
    assert tops == whole["logprobs"]["top_logprobs"]


def test_stream_without_ids_or_logprobs_and_with_usage(reference_server):
    chunks = stream(reference_server, max_tokens=5, seed=1, stream_options={"include_usage": True})
    *token_chunks, usage = chunks
    assert all("token_ids" not in c["choices"][0] and c["choices"][0]["logprobs"] is None for c in token_chunks)
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 5,
                                                         "total_tokens": 8}


def test_stream_with_n_and_token_ids_as_strings(reference_server):
    args = dict(max_tokens=4, seed=7, n=2, return_token_ids=True, logprobs=0, return_tokens_as_token_ids=True)
    whole = complete(reference_server, **args)["choices"]
    chunks = stream(reference_server, **args)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        ids = sum((c["token_ids"] for c in mine), [])
        assert ids == whole[index]["token_ids"]
        tokens = sum((c["logprobs"]["tokens"] for c in mine if c["logprobs"]), [])
        assert tokens == [f"token_id:{t}" for t in ids]
        assert mine[-1]["finish_reason"] == "length"


def test_stop_string_is_held_back_and_cut(reference_server):
    free = complete(reference_server, max_tokens=16, temperature=0, return_token_ids=True)["choices"][0]
    text = free["text"]
    if len(text.strip()) < 6:
        pytest.skip("the tiny model's greedy text is too short for a stop string")
    stop = text[3:6]
    whole = complete(reference_server, max_tokens=16, temperature=0, stop=[stop])["choices"][0]
    chunks = stream(reference_server, max_tokens=16, temperature=0, stop=[stop])
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    assert streamed == whole["text"] and stop not in streamed
    assert chunks[-1]["choices"][0]["stop_reason"] == stop


class GatedBackend:
    """A backend that samples token k+1 only once the client has received token k's chunk."""

    def __init__(self, tokenizer, num_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.model_path = "gated"
        self.max_model_len = 4096
        self.vocab_size = len(tokenizer)
        self.ids = tokenizer.encode(" one two three four five six seven", add_special_tokens=False)[:num_tokens]
        self.gates = [threading.Event() for _ in self.ids]
        self.timed_out: list[int] = []

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        for k, token in enumerate(self.ids):
            if k and not await asyncio.to_thread(self.gates[k].wait, 30):
                self.timed_out.append(k)
            req.on_token(0, token, -0.25, [])
        text = self.tokenizer.decode(self.ids)
        return [SeqResult(list(self.ids), [-0.25] * len(self.ids), [[] for _ in self.ids], text, "length")]


def test_each_chunk_is_sent_before_the_next_token_is_sampled(qwen_tokenizer):
    import uvicorn

    from agent_gym.reference_server.app import create_app

    backend = GatedBackend(qwen_tokenizer, 5)
    server = uvicorn.Server(uvicorn.Config(create_app(backend), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            threading.Event().wait(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        body = {"prompt": PROMPT, "max_tokens": 10, "stream": True, "return_token_ids": True}
        received: list[int] = []
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    received += json.loads(line[6:])["choices"][0]["token_ids"]
                    if len(received) < len(backend.ids):
                        backend.gates[len(received)].set()  # let the backend sample the next token
        assert received == backend.ids
        assert backend.timed_out == []  # every token waited for the client to hold the previous chunk
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_cut_stream_drops_the_connection(start_server):
    server = start_server(fake_tokens=6, cut_stream_after=2)
    body = {"prompt": PROMPT, "max_tokens": 10, "stream": True}
    with pytest.raises(httpx.HTTPError):
        with httpx.stream("POST", f"http://{server}/v1/completions", json=body, timeout=60) as r:
            for _ in r.iter_lines():
                pass


def test_bad_streamed_request_is_a_400_before_streaming(reference_server):
    r = httpx.post(f"http://{reference_server}/v1/completions",
                   json={"prompt": PROMPT, "stream": True, "temperature": -1}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    chat = httpx.post(f"http://{reference_server}/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], "stream": True}, timeout=60)
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "stream"
