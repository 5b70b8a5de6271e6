"""Turns aborted by a pause continue: streamed (VLLMPolicy.astream), chat (VLLMChatPolicy), through the gateway.

One tiny-model reference server in dev mode serves every test of the module; each test pauses it
in ``abort`` mode while a turn samples, reloads the weights and labels them with the next version
(vLLM's ``/collective_rpc`` and ``/update_weight_version``), moves the policy's counter and resumes,
then checks the turn against what the server recorded it sampled (``/debug/sample_answers``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from agent_gym.policy import ClientOptions, SamplingParams, VLLMChatPolicy, VLLMPolicy

MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse."}]
# No stop id but the end of turn: a random model's turn runs to max_tokens, long enough to be paused.
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=48, logprobs=0)
ATTEMPTS = 4  # turns tried until a pause lands in the middle of one (a fast server may finish first)


@pytest.fixture(scope="module")
def dev_server(start_server):
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SERVER_DEV_MODE", "1")
    try:
        yield start_server(max_model_len=2048)
    finally:
        mp.undo()


class Trainer:
    """The weight update a trainer makes while turns run, with vLLM's routes: pause (abort), reload
    (``/collective_rpc``), label (``/update_weight_version``), move the policies' counters, resume a little later."""

    def __init__(self, server: str, model_dir: str, *policies) -> None:
        self.url = f"http://{server}"
        self.model_dir = model_dir
        self.policies = policies
        self.version = self.state()["weight_version"]
        for policy in policies:
            policy.weight_version = self.version

    def records(self) -> list[dict]:
        return httpx.get(f"{self.url}/debug/sample_answers", timeout=60).json()

    def state(self) -> dict:
        return httpx.get(f"{self.url}/debug/stats", timeout=60).json()

    def update(self) -> int:
        with httpx.Client(base_url=self.url, timeout=120) as client:
            assert client.post("/pause", params={"mode": "abort"}).json()["status"] == "paused"
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": self.model_dir}}
            assert client.post("/collective_rpc", json=rpc).json() == {"results": [None]}
            self.version += 1
            client.post("/update_weight_version", json={"new_version": str(self.version)}).raise_for_status()
            assert client.get("/weight_info").json() == {"weight_version": str(self.version)}
            for policy in self.policies:
                policy.weight_version = self.version
            threading.Timer(0.3, lambda: httpx.post(f"{self.url}/resume", timeout=60)).start()
        return self.version

    def update_when_sampling(self) -> int:
        """Wait until a running sample drew a few ids, then update (the pause aborts it)."""
        deadline = time.monotonic() + 300
        while max(self.state()["in_flight"], default=0) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.update()


def chain(prompt_len: int, ids: list[int], versions: list[int] | None, records: list[dict]) -> list[dict]:
    """The server answers that sampled a turn's ids, in order (aborted ones first); asserts they fit exactly."""
    used, pos, pending = [], 0, list(records)
    while pos < len(ids) or not used:
        match = next((r for r in pending if r["prompt_tokens"] == prompt_len + pos and r["token_ids"]
                      and ids[pos:pos + len(r["token_ids"])] == r["token_ids"]
                      and (r["finish_reason"] == "abort" or pos + len(r["token_ids"]) == len(ids))), None)
        assert match is not None, f"the turn's ids from {pos} on are not what the server sampled"
        pending.remove(match)
        if versions is not None:
            assert versions[pos:pos + len(match["token_ids"])] == match["weight_versions"]
        used.append(match)
        pos += len(match["token_ids"])
    # every other answer of the turn sampled nothing (an abort before the first id): 0 re-sampled, 0 lost
    assert all(not r["token_ids"] for r in pending)
    return used


def _streamed_turn(policy, trainer, session):
    async def main():
        events, out, updated = [], None, False
        async for event in policy.astream(MESSAGES, session_id=session):
            if event.output is not None:
                out = event.output
                break
            events.append(event)
            if not updated and sum(len(e.token_ids) for e in events) >= 3:
                updated = True
                await asyncio.to_thread(trainer.update)
        await policy.aclose()
        return events, out

    return asyncio.run(main())


def test_a_streamed_turn_aborted_by_a_pause_continues_token_exactly(dev_server, qwen_tokenizer, tiny_model_dir):
    policy = VLLMPolicy([dev_server], qwen_tokenizer, SAMPLING, client_options=ClientOptions(timeout=600))
    trainer = Trainer(dev_server, str(tiny_model_dir), policy)
    for attempt in range(ATTEMPTS):
        before = len(trainer.records())
        events, out = _streamed_turn(policy, trainer, f"stream-{attempt}")
        answers = chain(len(out.prompt_token_ids), out.token_ids, out.weight_versions, trainer.records()[before:])
        if len(answers) > 1:
            break
    assert len(answers) > 1, "no pause landed in the middle of a streamed turn"
    assert answers[0]["finish_reason"] == "abort" and out.finish_reason in ("stop", "length") and out.error is None
    # the client saw one stream: each id once, in order, with its logprob; the text deltas are the turn's text
    assert [t for e in events for t in e.token_ids] == out.token_ids
    assert [lp for e in events for lp in e.logprobs or []] == pytest.approx(out.logprobs)
    assert "".join(e.text for e in events) == qwen_tokenizer.decode(out.token_ids, skip_special_tokens=False)
    # the continuation went to the server with the prompt and the kept ids, and the versions moved on
    kept = answers[0]["token_ids"]
    assert answers[1]["prompt_tail"] == (out.prompt_token_ids + kept)[-32:]
    assert len(set(out.weight_versions)) > 1 and out.weight_versions == sorted(out.weight_versions)


def test_a_chat_turn_aborted_by_a_pause_continues_from_its_text(dev_server, qwen_tokenizer, tiny_model_dir):
    policy = VLLMChatPolicy([dev_server], qwen_tokenizer, SAMPLING, client_options=ClientOptions(timeout=600))
    trainer = Trainer(dev_server, str(tiny_model_dir), policy)
    for attempt in range(ATTEMPTS):
        before = len(trainer.records())
        result: list = []
        worker = threading.Thread(target=lambda out=result, session=f"chat-{attempt}": out.append(
            policy.act(MESSAGES, session_id=session)))
        worker.start()
        trainer.update_when_sampling()
        worker.join(timeout=600)
        out = result[0]
        # chat mode re-renders the prompt: the answers are matched in order, not by prompt length
        answers = [r for r in trainer.records()[before:] if r["token_ids"]]
        if len(answers) > 1:
            break
    assert len(answers) > 1, "no pause landed in the middle of a chat turn"
    first, rest = answers
    assert first["finish_reason"] == "abort" and rest["finish_reason"] != "abort"
    assert out.finish_reason in ("stop", "length") and out.error is None
    # every sampled id once, in order; the continuation was asked with the aborted text as an open
    # assistant message (its prompt is longer; not necessarily by the kept ids: the text is rendered again)
    assert out.token_ids == first["token_ids"] + rest["token_ids"]
    assert out.prompt_token_ids[-32:] == first["prompt_tail"] and rest["prompt_tokens"] > first["prompt_tokens"]
    head = qwen_tokenizer.decode(first["token_ids"], skip_special_tokens=False)
    assert out.text.startswith(head.rstrip("\ufffd"))
    assert len(out.logprobs) == len(out.token_ids)
    assert out.weight_versions == first["weight_versions"] + rest["weight_versions"]


def _gateway_turn(gw, trainer, stream):
    """One chat request through a gateway session, paused in the middle; returns (client text, trajectory)."""
    s = gw.session()
    body = {"model": "m", "messages": MESSAGES, "stream": stream, "max_tokens": 48}
    headers = {"Authorization": f"Bearer {s.api_key}"}
    if stream:
        text, updated = [], False
        with httpx.stream("POST", f"{s.openai_base_url}/chat/completions", json=body, headers=headers,
                          timeout=600) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                choice = json.loads(line[6:])["choices"][0]
                text.append(choice["delta"].get("content") or "")
                if not updated and len("".join(text)) >= 3:
                    updated = True
                    trainer.update()
                finish = choice.get("finish_reason") or None
        content = "".join(text)
    else:
        worker_out: list = []
        worker = threading.Thread(target=lambda: worker_out.append(
            httpx.post(f"{s.openai_base_url}/chat/completions", json=body, headers=headers, timeout=600)))
        worker.start()
        trainer.update_when_sampling()
        worker.join(timeout=600)
        reply = worker_out[0]
        assert reply.status_code == 200, reply.text
        choice = reply.json()["choices"][0]
        content, finish = choice["message"]["content"] or "", choice["finish_reason"]
    return content, finish, s.reward(1.0)


@pytest.mark.parametrize("stream", [True, False])
def test_a_gateway_turn_aborted_by_a_pause_continues_token_exactly(dev_server, qwen_tokenizer, tiny_model_dir,
                                                                   stream):
    from agent_gym.gateway import Gateway

    with Gateway([dev_server], qwen_tokenizer, sampling=SAMPLING) as gw:
        trainer = Trainer(dev_server, str(tiny_model_dir), gw.policy)
        for _ in range(ATTEMPTS):
            before = len(trainer.records())
            content, finish, trajectory = _gateway_turn(gw, trainer, stream)
            segment = trajectory.segments[0]
            ids = segment.response_tokens.tolist()
            versions = segment.weight_versions.tolist()
            answers = chain(len(segment.prompt_tokens), ids, versions, trainer.records()[before:])
            if len(answers) > 1:
                break
    assert len(answers) > 1, "no pause landed in the middle of a gateway turn"
    # the client got one ordinary answer; the trajectory holds every sampled id once, with its version
    assert finish in ("stop", "length") and trajectory.status != "POLICY_ERROR"
    assert answers[0]["finish_reason"] == "abort" and len(set(versions)) > 1
    assert segment.response_masks.tolist() == [1] * len(ids)
    assert content.strip() in qwen_tokenizer.decode(ids, skip_special_tokens=False)
