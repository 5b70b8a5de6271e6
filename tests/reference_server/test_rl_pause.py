"""vLLM's RL routes (pause/resume/weight reload) and VLLMPolicy continuing aborted turns token-exactly."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.policy.turn_resume import choice_versions
from agent_gym.reference_server.backends import FakeBackend, GenRequest
from agent_gym.reference_server.rl_control import PausableBackend, version_spans
from agent_gym.rollout import collect

ENV_ID = "agent_gym/ToolUse-v0"
# A tenth of the ids stop a turn: turns of a few ids to a few dozen, several turns per episode.
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, logprobs=0,
                          stop_token_ids=list(range(0, 151643, 10)))


def test_pause_modes_on_a_fake_backend(qwen_tokenizer):
    async def main():
        backend = PausableBackend(FakeBackend(qwen_tokenizer, num_tokens=30, token_latency_ms=5.0))

        async def one():
            return (await backend.generate(GenRequest(prompt_ids=[1, 2, 3], max_tokens=30)))[0]

        # abort: the answer ends at once with the ids so far
        task = asyncio.ensure_future(one())
        await asyncio.sleep(0.05)
        await backend.pause("abort")
        aborted = await task
        assert aborted.finish_reason == "abort" and 0 < len(aborted.token_ids) < 30
        assert aborted.weight_versions == [0] * len(aborted.token_ids)
        assert len(aborted.logprobs) == len(aborted.token_ids)
        waiting = asyncio.ensure_future(one())  # a new request waits while paused
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await backend.reload_weights("checkpoint-1")
        backend.set_version_label("1")
        backend.resume()
        assert (await waiting).weight_versions == [1] * 30
        # keep: the request is frozen, continues on the new weights, and answers once with every id
        task = asyncio.ensure_future(one())
        await asyncio.sleep(0.05)
        await backend.pause("keep")
        await backend.reload_weights("checkpoint-2")
        backend.set_version_label("2")
        backend.resume()
        kept = await task
        assert kept.finish_reason == "stop" and len(kept.token_ids) == 30
        head = kept.weight_versions.count(1)
        assert 0 < head < 30 and kept.weight_versions == [1] * head + [2] * (30 - head)
        # wait: in-flight requests finish first
        task = asyncio.ensure_future(one())
        await asyncio.sleep(0.05)
        await backend.pause("wait")
        assert task.done() and (await task).finish_reason == "stop"
        backend.resume()
        assert backend.stats["aborted"] == 1 and backend.stats["frozen"] == 1

    asyncio.run(main())


def test_reload_without_a_pause_drains_first_and_bad_modes_are_rejected(qwen_tokenizer):
    from agent_gym.reference_server.protocol import BadRequest

    async def main():
        backend = PausableBackend(FakeBackend(qwen_tokenizer, num_tokens=3))
        await backend.reload_weights("x")  # as vLLM's collective_rpc: no pause needed, the server is left running
        assert not backend.paused and backend.stats["reloads"] == 1
        assert backend.version_label == "default" and backend.weight_version == 0  # the label is the client's
        backend.set_version_label("step-7")  # a label that is no int: ids get the next number
        assert backend.weight_version == 1 and backend.labels == {0: "default", 1: "step-7"}
        with pytest.raises(BadRequest, match="mode: expected one of"):
            await backend.pause("later")

    asyncio.run(main())


def test_version_spans_are_vllms():
    assert version_spans([], {0: "default"}) == []
    assert version_spans([0, 0, 2, 2, 2], {0: "default"}) == [
        {"version": "default", "start": 0, "end": 2}, {"version": "2", "start": 2, "end": 5}]


def _chains(turns, answers):
    """Match every turn's ids to the server answers that sampled them (in order); return the unused answers."""
    unused = {a["request_id"]: a for a in answers}
    for prompt, ids, versions in turns:
        pos = 0
        while pos < len(ids) or pos == 0:
            match = None
            for key, answer in unused.items():
                choice = answer["choices"][0]
                chunk = choice["token_ids"]
                if (answer["usage"]["prompt_tokens"] == len(prompt) + pos and chunk
                        and ids[pos:pos + len(chunk)] == chunk
                        and (choice["finish_reason"] == "abort" or pos + len(chunk) == len(ids))):
                    match = key
                    break
            assert match is not None, f"turn ids {ids[pos:]} at {pos} are not what the server sampled"
            choice = unused.pop(match)["choices"][0]
            assert versions[pos:pos + len(choice["token_ids"])] == choice_versions(choice, len(choice["token_ids"]), 0)
            pos += len(choice["token_ids"])
    return [a for a in unused.values() if a["choices"][0]["token_ids"]]


def test_sixteen_episodes_through_pauses_stay_token_exact(start_server, qwen_tokenizer, monkeypatch, tiny_model_dir):
    """A trainer pauses (abort, keep, wait in turn), reloads and resumes while 16 episodes run."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    server = str(start_server(max_model_len=4096))
    policy = VLLMPolicy([server], qwen_tokenizer, SAMPLING, api="vllm_generate")
    policy.weight_version = 0  # the server's first weights ("default" in its spans)
    turns: list[tuple[list[int], list[int], list[int]]] = []
    answers: dict[str, dict] = {}

    class Recorder:
        tokenizer, sampling = policy.tokenizer, policy.sampling

        async def aact(self, messages, *, session_id, tools=None):
            out = await policy.aact(messages, session_id=session_id, tools=tools)
            turns.append((out.prompt_token_ids, out.token_ids, out.weight_versions))
            return out

        def close_session(self, session_id):
            policy.close_session(session_id)

    def harvest():
        for entry in httpx.get(f"http://{server}/debug/token_answers", timeout=60).json():
            answers[entry["answer"]["request_id"]] = entry["answer"]

    result: list = []
    worker = threading.Thread(target=lambda: result.append(
        collect(ENV_ID, Recorder(), num_episodes=16, n_parallel=16, max_steps=2, seed=3, progress=False)))
    worker.start()
    cycles = 0
    with httpx.Client(base_url=f"http://{server}", timeout=120) as client:
        while worker.is_alive() and cycles < 3:
            time.sleep(0.4)
            mode = ("abort", "keep", "wait")[cycles % 3]
            assert client.post("/pause", params={"mode": mode}).json()["status"] == "paused"
            assert client.get("/is_paused").json() == {"is_paused": True}
            harvest()
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(tiny_model_dir)}}
            assert client.post("/collective_rpc", json=rpc).json() == {"results": [None]}
            assert client.post("/update_weight_version", json={"new_version": str(cycles + 1)}).json() == {
                "success": True, "new_version": str(cycles + 1)}
            assert client.get("/weight_info").json() == {"weight_version": str(cycles + 1)}
            client.post("/resume")
            cycles += 1
        worker.join(timeout=600)
        harvest()
        stats = client.get("/debug/stats").json()["stats"]
    assert not worker.is_alive() and len(result[0]) == 16 and cycles >= 2
    assert {t.status for t in result[0]} <= {"ENV_DONE", "MAX_STEPS", "TRUNCATION"}
    assert len(answers) < 256 or pytest.skip("more answers than the server keeps")
    leftover = _chains(turns, list(answers.values()))
    assert leftover == []  # every id the server sampled is in exactly one turn: 0 re-sampled, 0 lost
    assert stats["aborted"] > 0 and stats["frozen"] > 0 and stats["pauses"] == cycles
    # the trajectories carry the server's versions on the sampled ids
    recorded = [v for _, _, versions in turns for v in versions]
    for trajectory in result[0]:
        for segment in trajectory.segments:
            sampled = [v for v, m in zip(segment.weight_versions.tolist(), segment.response_masks.tolist(),
                                         strict=True) if m]
            assert all(v >= 0 for v in sampled)
    assert max(recorded) >= 1  # some ids came from reloaded weights
