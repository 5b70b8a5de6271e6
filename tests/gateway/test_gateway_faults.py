"""Gateway under failures and bad input: a dead server among two, malformed bodies, unknown sessions,
rewritten histories, over-long prompts, clients that go away."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from agent_gym.gateway import Gateway
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.types import EpisodeStatus

USER = {"role": "user", "content": "hello"}


class FakeServer(str):
    """A reference server process in fake mode (fixed answers, fixed latency)."""

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_servers():
    servers = []
    for _ in range(2):
        port = _port()
        argv = [sys.executable, "-m", "agent_gym.reference_server", "--port", str(port), "--fake-tokens", "6",
                "--fake-latency-ms", "150"]
        server = FakeServer(f"127.0.0.1:{port}")
        server.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers.append(server)
    deadline = time.monotonic() + 120
    for server in servers:
        while True:
            assert server.process.poll() is None and time.monotonic() < deadline, "fake server did not start"
            try:
                if httpx.get(f"http://{server}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.kill()


def test_64_sessions_survive_a_server_killed_midway(two_servers, qwen_tokenizer):
    a, b = two_servers
    policy = VLLMPolicy([str(a), str(b)], qwen_tokenizer, SamplingParams(max_tokens=16),
                        client_options={"backoff": 0.05, "max_backoff": 0.2, "max_retries": 4})
    turns = 3
    with Gateway(policy=policy) as gateway:
        handles = [gateway.session(f"s{i}") for i in range(64)]
        first_turn_done = asyncio.Event()

        async def agent(handle, client):
            messages = [{"role": "system", "content": "Be brief."}, USER]
            for turn in range(turns):
                reply = await client.chat.completions.create(model="m", messages=messages)
                messages += [reply.choices[0].message.model_dump(exclude_none=True, include={"role", "content"}),
                             {"role": "user", "content": f"and {turn}?"}]
                if turn == 0:
                    await first_turn_done.wait()

        async def main():
            async with openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0,
                                          timeout=60) as client:
                clients = [openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0,
                                              timeout=60, http_client=client._client) for h in handles]
                tasks = [asyncio.ensure_future(agent(h, c)) for h, c in zip(handles, clients, strict=True)]
                while sum(len(h._session.steps) for h in handles) < 64:
                    await asyncio.sleep(0.05)
                a.kill()  # a whole server dies with the next turns in flight or about to be sent
                first_turn_done.set()
                await asyncio.gather(*tasks)

        asyncio.run(main())
        trajectories = []
        for handle in handles:
            with handle:
                pass
            trajectories.append(handle.trajectory)
    assert all(len(t.steps) == turns for t in trajectories)  # no session lost, no turn lost
    assert all(len(t.segments) == 1 and int(t.response_masks.sum()) == turns * 6 for t in trajectories)
    moved = [t for t in trajectories if t.steps[0].info["server"] == str(a)]
    assert moved, "expected some sessions on the killed server"
    assert all(s.info["server"] == str(b) for t in moved for s in t.steps[1:])  # retried elsewhere


@pytest.fixture(scope="module")
def gateway(scripted_upstream, qwen_tokenizer):
    address, engine = scripted_upstream(qwen_tokenizer, max_model_len=512)
    with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}) as gw:
        yield gw, engine


def test_malformed_bodies_get_400(gateway):
    gw, _ = gateway
    s = gw.session()
    url = f"{s.openai_base_url}/chat/completions"
    key = {"Authorization": f"Bearer {s.api_key}"}
    cases = [b"{not json", b"[]", b'{"messages": []}', b'{"messages": [{"role": "robot", "content": "x"}]}',
             b'{"messages": [{"role": "user", "content": 5}]}', b'{"messages": [{"role": "user"}], "tools": [1]}']
    for raw in cases:
        r = httpx.post(url, content=raw, headers={"content-type": "application/json", **key})
        assert r.status_code == 400, raw
        assert r.json()["error"]["type"] == "BadRequestError" and r.json()["error"]["code"] == 400
    r = httpx.post(f"{s.base_url}/v1/messages", json={"messages": [{"role": "user", "content": [{"type": "x"}]}]},
                   headers=key)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert s.current().steps[0].info == {}  # nothing was recorded


def test_unknown_sessions_get_404(gateway):
    gw, _ = gateway
    client = openai.OpenAI(base_url=f"{gw.url}/sessions/nope/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="unknown session"):
        client.chat.completions.create(model="m", messages=[USER])
    trainer = gw.trainer_headers
    assert httpx.get(f"{gw.url}/sessions/nope/trajectory", headers=trainer).status_code == 404
    assert httpx.post(f"{gw.url}/sessions/nope/reward", json={"reward": 1}, headers=trainer).status_code == 404
    r = httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": [USER]})
    assert r.status_code == 400 and "expected a session" in r.json()["error"]["message"]


def test_rewritten_history_starts_a_flagged_segment(gateway):
    gw, _ = gateway
    with gw.session() as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
        messages = [USER]
        reply = client.chat.completions.create(model="m", messages=messages)
        sampled = reply.choices[0].message
        messages.append({"role": "assistant", "content": "I never said that.", "tool_calls": None})
        messages.append({"role": "user", "content": "RESULT=41"})
        del messages[1]["tool_calls"]
        raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)
        assert raw.headers["x-agent-gym-new-segment"] == "true"
    t = s.trajectory
    assert sampled.tool_calls  # the script called a tool first
    assert [st.info["history_rewritten"] for st in t.steps] == [False, True]
    assert [st.info["new_segment"] for st in t.steps] == [False, True]
    assert len(t.segments) == 2 and t.segments[1].first_step == 1
    assert "I never said that." in t.steps[1].chat_completions[1]["content"]


def test_oversize_prompt_gets_vllm_400(gateway):
    gw, _ = gateway
    with gw.session() as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="maximum context length") as info:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 2000}])
        assert info.value.body["type"] == "BadRequestError"
        s.reward(0.0)
    assert s.trajectory.status == EpisodeStatus.PROMPT_TRUNCATION


def test_reward_twice_and_bad_rewards(gateway):
    gw, _ = gateway
    s = gw.session()
    client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
    client.chat.completions.create(model="m", messages=[USER])
    url = f"{gw.url}/sessions/{s.session_id}/reward"
    trainer = gw.trainer_headers
    assert httpx.post(url, json={"rewards": [1, 2]}, headers=trainer).status_code == 400
    assert httpx.post(url, json={"reward": "high"}, headers=trainer).status_code == 400
    assert httpx.post(url, json={}, headers=trainer).status_code == 400
    r = httpx.post(url, json={"rewards": [0.5], "reward": 1.0}, headers=trainer)
    assert r.status_code == 200 and r.json()["trajectory_reward"] == 1.5
    assert httpx.post(url, json={"reward": 1.0}, headers=trainer).status_code == 409
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(model="m", messages=[USER])
    assert httpx.get(f"{gw.url}/sessions/{s.session_id}/trajectory",
                     headers=trainer).json()["trajectory_reward"] == 1.5


def test_client_disconnect_mid_stream_keeps_the_session_consistent(gateway, exact):
    gw, engine = gateway
    engine.records.clear()
    s = gw.session()
    body = {"model": "m", "messages": [USER], "stream": True}
    with httpx.stream("POST", f"{s.openai_base_url}/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {s.api_key}"}) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # one event, then the client goes away
    # The turn is sampled and recorded whole (in the background, once the client is gone);
    # then the client retries the same request.
    session = gw.store.get(s.session_id)
    deadline = time.monotonic() + 120
    while len(session.steps) < 1:
        assert time.monotonic() < deadline, "the abandoned streamed turn was never recorded"
        time.sleep(0.05)
    client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
    reply = client.chat.completions.with_raw_response.create(model="m", messages=[USER])
    assert reply.headers["x-agent-gym-new-segment"] == "true"
    t = s.reward(0.0)
    assert len(t.steps) == 2 and len(t.segments) == 2
    exact(t, engine.records)
