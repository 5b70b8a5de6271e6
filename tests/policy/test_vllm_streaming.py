"""VLLMPolicy.astream against real reference-server processes: same turns as aact, deltas, faults."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agent_gym.errors import ServerError
from agent_gym.policy import ClientOptions, SamplingParams, VLLMPolicy
from agent_gym.policy.routing import HashRing
from agent_gym.policy.vllm_base import StreamEvent

FAST = ClientOptions(backoff=0.01, max_backoff=0.05)
MESSAGES = [{"role": "user", "content": "What is 17*3?"}]


def _comparable(out) -> dict:
    data = dataclasses.asdict(out)
    data.pop("llm_time")
    return data


async def _streamed_episode(policy: VLLMPolicy, session_id: str, turns: int) -> tuple[list, list[list[StreamEvent]]]:
    messages = list(MESSAGES)
    outs, events = [], []
    for k in range(turns):
        mine = [e async for e in policy.astream(messages, session_id=session_id)]
        events.append(mine)
        out = mine[-1].output
        outs.append(out)
        messages += [{"role": "assistant", "content": out.text}, {"role": "tool", "content": f"r{k}"}]
    await policy.aclose()
    return outs, events


def _episode(policy: VLLMPolicy, session_id: str, turns: int) -> list:
    messages = list(MESSAGES)
    outs = []
    for k in range(turns):
        out = policy.act(messages, session_id=session_id)
        outs.append(out)
        messages += [{"role": "assistant", "content": out.text}, {"role": "tool", "content": f"r{k}"}]
    return outs


def test_streamed_turns_equal_the_unstreamed_ones(reference_server, qwen_tokenizer):
    sampling = SamplingParams(temperature=1.0, top_k=0, max_tokens=12, seed=11, logprobs=1)
    with VLLMPolicy([reference_server], qwen_tokenizer, sampling) as plain:
        expected = _episode(plain, "episode-1", 3)
    streaming = VLLMPolicy([reference_server], qwen_tokenizer, sampling)
    outs, events = asyncio.run(_streamed_episode(streaming, "episode-1", 3))
    assert [_comparable(o) for o in outs] == [_comparable(o) for o in expected]
    for out, turn in zip(outs, events, strict=True):
        *deltas, last = turn
        assert last.output is out and all(e.output is None for e in deltas)
        assert len(deltas) >= 2  # token by token, not one block
        assert sum((e.token_ids for e in deltas), []) == out.token_ids
        assert sum((e.logprobs for e in deltas), []) == pytest.approx(out.logprobs)
        assert "".join(e.text for e in deltas) == out.text  # as vLLM's chunks join to its text
    assert not any(o.new_segment for o in outs[1:])


def test_failure_before_the_first_chunk_fails_over(start_servers, qwen_tokenizer):
    failing, good = start_servers({"fake_tokens": 5, "fail_first": 10}, {"fake_tokens": 5})
    session = next(f"s{i}" for i in range(1000)
                   if HashRing([str(failing), str(good)]).preference(f"s{i}")[0] == str(failing))
    policy = VLLMPolicy([str(failing), str(good)], qwen_tokenizer, client_options=FAST.replace(max_retries=2))
    outs, _ = asyncio.run(_streamed_episode(policy, session, 1))
    assert outs[0].error is None and outs[0].server == str(good) and len(outs[0].token_ids) == 5


def test_failure_after_the_first_chunk_ends_the_turn_with_an_error(start_server, qwen_tokenizer):
    server = start_server(fake_tokens=8, cut_stream_after=3)
    policy = VLLMPolicy([str(server)], qwen_tokenizer, client_options=FAST.replace(max_retries=3))

    async def run() -> list[StreamEvent]:
        try:
            return [e async for e in policy.astream(MESSAGES, session_id="cut")]
        finally:
            await policy.aclose()

    *deltas, last = asyncio.run(run())
    assert len(deltas) == 3  # what arrived was handed on; no retry after that
    out = last.output
    assert out.finish_reason == "error" and str(server) in out.error
    assert out.token_ids == sum((e.token_ids for e in deltas), [])


def test_rejected_request_raises_before_streaming(start_server, qwen_tokenizer):
    server = start_server(fake_tokens=4, fail_first=100, fail_status=503)
    policy = VLLMPolicy([str(server)], qwen_tokenizer, client_options=FAST.replace(max_retries=1))

    async def run() -> None:
        try:
            async for _ in policy.astream(MESSAGES, session_id="x"):
                pass
        finally:
            await policy.aclose()

    with pytest.raises(ServerError, match="HTTP 503"):
        asyncio.run(run())


def test_prompt_too_long_ends_the_stream_with_truncation(start_server, qwen_tokenizer):
    server = start_server(fake_tokens=4, max_model_len=64)
    policy = VLLMPolicy([str(server)], qwen_tokenizer)
    long = [{"role": "user", "content": "word " * 200}]

    async def run() -> list[StreamEvent]:
        try:
            return [e async for e in policy.astream(long, session_id="long")]
        finally:
            await policy.aclose()

    (only,) = asyncio.run(run())
    assert only.output.finish_reason == "prompt_truncation"
