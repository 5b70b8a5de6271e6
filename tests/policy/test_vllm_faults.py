"""VLLMPolicy under faults, each against a real server process with injected failures."""

from __future__ import annotations

import time

import pytest

from agent_gym.errors import PolicyError, ServerError
from agent_gym.policy import ClientOptions, SamplingParams, VLLMClient, VLLMPolicy
from agent_gym.policy.routing import HashRing

FAST = ClientOptions(backoff=0.01, max_backoff=0.05)
MESSAGES = [{"role": "user", "content": "What is 17*3?"}]


def _session_starting_on(first: str, servers: list[str]) -> str:
    ring = HashRing(servers)
    return next(f"ep{i}" for i in range(1000) if ring.preference(f"ep{i}")[0] == first)


def _episode(policy: VLLMPolicy, session_id: str, turns: int) -> list:
    messages = list(MESSAGES)
    outs = []
    for k in range(turns):
        out = policy.act(messages, session_id=session_id)
        outs.append(out)
        messages += [{"role": "assistant", "content": out.text}, {"role": "tool", "content": f"r{k}"}]
    return outs


def _assert_one_segment(outs) -> None:
    for prev, out in zip(outs, outs[1:], strict=False):
        n = len(prev.prompt_token_ids) + len(prev.token_ids)
        assert out.prompt_token_ids[:n] == prev.prompt_token_ids + prev.token_ids
        assert not out.new_segment


def test_server_crash_mid_request_continues_on_second_server(policy_fleet, qwen_tokenizer):
    dies, backup = policy_fleet["dies"], policy_fleet["fake_a"]
    servers = [dies, backup]
    session = _session_starting_on(dies, servers)
    options = FAST.replace(timeout=10)
    with VLLMPolicy(servers, qwen_tokenizer, SamplingParams(max_tokens=8), client_options=options) as policy:
        outs = _episode(policy, session, 4)
    assert [o.server for o in outs] == [dies, dies, backup, backup]  # sticky, then failover, sticky again
    _assert_one_segment(outs)  # the episode's tokens stay one valid sequence
    dies.process.wait(timeout=10)
    assert not dies.alive()


def test_server_killed_between_turns_continues_on_second_server(policy_fleet, qwen_tokenizer, start_server):
    victim, backup = start_server(fake_tokens=3), policy_fleet["fake_b"]
    servers = [victim, backup]
    session = _session_starting_on(victim, servers)
    options = FAST.replace(timeout=10)
    with VLLMPolicy(servers, qwen_tokenizer, SamplingParams(max_tokens=8), client_options=options) as policy:
        messages = list(MESSAGES)
        first = policy.act(messages, session_id=session)
        assert first.server == victim
        victim.kill()  # SIGKILL
        messages += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "and?"}]
        second = policy.act(messages, session_id=session)
    assert second.server == backup
    _assert_one_segment([first, second])


@pytest.mark.parametrize("fault", ["e500", "e429"])
def test_transient_errors_are_retried(policy_fleet, qwen_tokenizer, fault):
    server = policy_fleet[fault]
    options = FAST.replace(max_retries=3)
    with VLLMPolicy([server], qwen_tokenizer, SamplingParams(max_tokens=8), client_options=options) as policy:
        out = policy.act(MESSAGES, session_id="retry")
    assert out.server == server and out.finish_reason == "stop" and len(out.token_ids) == 3


def test_hung_server_times_out(policy_fleet, qwen_tokenizer):
    hang = policy_fleet["hang"]
    start = time.monotonic()
    with VLLMPolicy([hang], qwen_tokenizer, client_options=FAST.replace(timeout=1.0, max_retries=1)) as policy:
        with pytest.raises(ServerError, match="timeout") as info:
            policy.act(MESSAGES, session_id="s")
    assert hang in str(info.value)
    assert time.monotonic() - start < 10


def test_a_request_never_outlasts_timeout_times_attempts(policy_fleet, qwen_tokenizer):
    """Retries, their waits and the /v1/models lookup share one bound: timeout x (max_retries + 1) = 4 s.

    With these waits (3-6 s between attempts) four attempts would take at least 13 s."""
    hang = policy_fleet["hang"]
    options = ClientOptions(timeout=1.0, max_retries=3, backoff=6.0, max_backoff=6.0)
    start = time.monotonic()
    with VLLMPolicy([hang], qwen_tokenizer, client_options=options) as policy:
        with pytest.raises(ServerError, match="no time left for another attempt") as info:
            policy.act(MESSAGES, session_id="s")
    assert "timeout x (max_retries + 1) = 4s" in str(info.value)
    assert time.monotonic() - start < 7.5


def test_hung_server_fails_over(policy_fleet, qwen_tokenizer):
    hang, backup = policy_fleet["hang"], policy_fleet["fake_a"]
    session = _session_starting_on(hang, [hang, backup])
    with VLLMPolicy([hang, backup], qwen_tokenizer, client_options=FAST.replace(timeout=1.0)) as policy:
        out = policy.act(MESSAGES, session_id=session)
    assert out.server == backup


def test_over_long_prompt_is_a_status_not_an_exception(reference_server, qwen_tokenizer):
    long_messages = [{"role": "user", "content": "word " * 5000}]
    # Known limit (from /v1/models): no request is sent.
    with VLLMPolicy([reference_server], qwen_tokenizer) as policy:
        out = policy.act(long_messages, session_id="long")
    assert out.finish_reason == "prompt_truncation" and out.token_ids == [] and out.text == ""
    assert out.sampling["logprobs_mode"] == "raw_logprobs"  # a truncated turn records its sampling too
    assert len(out.prompt_token_ids) > 4096
    # A wrong client-side limit: the server's 400 "maximum context length" gives the same status.
    with VLLMPolicy([reference_server], qwen_tokenizer, max_model_len=100_000) as policy:
        out = policy.act(long_messages, session_id="long")
    assert out.finish_reason == "prompt_truncation" and out.token_ids == []
    assert "maximum context length" in out.error


def test_other_400_is_not_retried(reference_server, qwen_tokenizer):
    import asyncio

    policy = VLLMPolicy([reference_server], qwen_tokenizer, client_options={"max_retries": 3, "backoff": 5.0})

    async def bad_request():
        try:
            return await policy.completions[0]({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": -1})
        finally:
            await policy.aclose()

    start = time.monotonic()
    with pytest.raises(ServerError, match="HTTP 400") as info:
        asyncio.run(bad_request())
    assert time.monotonic() - start < 4  # no backoff sleeps
    assert info.value.status == 400 and reference_server in str(info.value)


def test_malformed_json_names_the_server(policy_fleet, qwen_tokenizer):
    bad = policy_fleet["malformed"]
    with VLLMPolicy([bad], qwen_tokenizer, client_options=FAST) as policy:
        with pytest.raises(ServerError, match="malformed JSON") as info:
            policy.act(MESSAGES, session_id="s")
    assert bad in str(info.value) and info.value.server == bad


def test_unreachable_servers_raise_policy_error(qwen_tokenizer):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = FAST.replace(max_retries=2)
    with VLLMPolicy([f"127.0.0.1:{port}"], qwen_tokenizer, client_options=options) as policy:
        with pytest.raises(PolicyError, match=f"3 attempt.*127.0.0.1:{port}.*connection failed") as info:
            policy.act(MESSAGES, session_id="s")
    assert isinstance(info.value, ServerError) and info.value.server == f"127.0.0.1:{port}"


def test_constructor_validation(qwen_tokenizer):
    with pytest.raises(ValueError, match="tokenizer"):
        VLLMPolicy(["127.0.0.1:1"], None)
    with pytest.raises(ValueError, match="at least one"):
        VLLMPolicy([], qwen_tokenizer)
    with pytest.raises(ValueError, match="concurrency"):
        VLLMPolicy(["127.0.0.1:1"], qwen_tokenizer, client_options={"concurrency": 0})
    with pytest.raises(TypeError, match="expected names among .*max_retries.*got \\['retries'\\]"):
        VLLMPolicy(["127.0.0.1:1"], qwen_tokenizer, client_options={"retries": 2})
    with pytest.raises(TypeError, match="ready VLLMClient"):
        VLLMPolicy(VLLMClient(["127.0.0.1:1"]), qwen_tokenizer, client_options=FAST)
    with pytest.raises(TypeError):
        VLLMPolicy(["127.0.0.1:1"], qwen_tokenizer, max_retries=2)  # options are given once, as client_options


def test_injected_client_is_used_as_given(policy_fleet, qwen_tokenizer):
    """A ready client carries its options; two policies may share it."""
    client = VLLMClient([policy_fleet["fake_a"]], FAST.replace(max_retries=0))
    first, second = VLLMPolicy(client, qwen_tokenizer), VLLMPolicy(client, qwen_tokenizer)
    assert first.client is second.client is client and first.client.options.max_retries == 0
    with first, second:
        assert first.act(MESSAGES, session_id="a").server == second.act(MESSAGES, session_id="b").server
