"""VLLMPolicy against real reference-server processes: exact tokens, invariant, re-scoring, routing."""

from __future__ import annotations

import asyncio

import pytest
import torch
from policy_helpers import TOOLS, recording, run_episode

from agent_gym.policy import SamplingParams, TransformersPolicy, VLLMChatPolicy, VLLMPolicy
from agent_gym.types import PolicyOutput
from agent_gym.wrappers.token_assembly import TokenAssembler

RESCORE = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, max_tokens=12, logprobs=0, seed=1234)


def _check_episode(policy, record, tokenizer, *, tools=None):
    """Exact ids, prefix invariant, render equality; return the assembled segment."""
    responses = [data for _, data in policy.client.responses]
    assert len(responses) == len(record)
    asm = TokenAssembler()
    for k, ((messages, out), data) in enumerate(zip(record, responses, strict=False)):
        choice = data["choices"][0]
        assert out.token_ids == choice["token_ids"]  # exactly the ids the server sampled
        assert out.prompt_token_ids == choice["prompt_token_ids"]  # exactly the ids the server saw
        assert out.logprobs == pytest.approx(choice["logprobs"]["token_logprobs"])
        assert not out.retokenized and not out.new_segment
        assert out.server in policy.client.server_addresses
        # The prompt decodes to the chat template's rendering of the conversation.
        assert tokenizer.decode(out.prompt_token_ids) == policy.builder.render_text(messages, tools)
        if k:
            prev = record[k - 1][1]
            n = len(prev.prompt_token_ids) + len(prev.token_ids)
            assert out.prompt_token_ids[:n] == prev.prompt_token_ids + prev.token_ids
        assert not asm.add_turn(k, out.prompt_token_ids, out.token_ids, out.logprobs)
    (segment,) = asm.segments()
    sampled = [t for _, out in record for t in out.token_ids]
    tokens, masks = segment.response_tokens.tolist(), segment.response_masks.tolist()
    masked = [t for t, m in zip(tokens, masks, strict=True) if m == 1]
    assert masked == sampled  # masks are 1 exactly on the sampled ids
    return segment


def _rescore(model_dir, segment) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.cat([segment.prompt_tokens, segment.response_tokens]).unsqueeze(0)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    targets = ids[0, 1:]
    scored = logp.gather(1, targets.unsqueeze(1)).squeeze(1)
    n_prompt = len(segment.prompt_tokens)
    mask = segment.response_masks.bool()
    recomputed = scored[n_prompt - 1 :][mask]
    rollout = segment.response_logprobs[mask]
    assert len(recomputed) == int(mask.sum()) > 0
    return float((recomputed - rollout).abs().max())


@pytest.mark.parametrize("use_tools", [False, True])
def test_multi_turn_exact_tokens_and_rescoring_qwen(reference_server, qwen_tokenizer, tiny_model_dir, use_tools):
    tools = TOOLS if use_tools else None
    with recording(VLLMPolicy, [reference_server], qwen_tokenizer, RESCORE) as policy:
        record = run_episode(policy, "qwen-episode", 5, tools=tools)
        segment = _check_episode(policy, record, qwen_tokenizer, tools=tools)
        policy.close_session("qwen-episode")
    assert _rescore(tiny_model_dir, segment) < 1e-3


def test_multi_turn_exact_tokens_and_rescoring_deepseek(policy_fleet, deepseek_tokenizer, tiny_deepseek_model_dir):
    server = policy_fleet["deepseek"]
    with recording(VLLMPolicy, [server], deepseek_tokenizer, RESCORE) as policy:
        record = run_episode(policy, "ds-episode", 5, tools=TOOLS)
        segment = _check_episode(policy, record, deepseek_tokenizer, tools=TOOLS)
        # Tools are described in the system message (the template has no tool support), never both.
        first_prompt = deepseek_tokenizer.decode(record[0][1].prompt_token_ids)
        assert "calculator" in first_prompt and "<tools>" not in first_prompt
    assert _rescore(tiny_deepseek_model_dir, segment) < 1e-3


def test_stop_token_finish_with_fixed_answers(policy_fleet, qwen_tokenizer):
    server = policy_fleet["fake_a"]
    with recording(VLLMPolicy, [server], qwen_tokenizer, SamplingParams(max_tokens=32)) as policy:
        record = run_episode(policy, "fake", 4, tools=TOOLS)
        _check_episode(policy, record, qwen_tokenizer, tools=TOOLS)
    for _, out in record:
        assert out.finish_reason == "stop"
        assert out.token_ids[-1] == qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
        assert out.text == qwen_tokenizer.decode(out.token_ids[:-1]) and "<|im_end|>" not in out.text
        assert out.logprobs == [-0.5] * 3


def test_request_fields_and_headers(reference_server, qwen_tokenizer, monkeypatch):
    from agent_gym.policy.http_transport import HttpTransport

    seen = []
    original = HttpTransport.post_json

    async def spy(self, url, body, **kwargs):
        seen.append((url, body, kwargs.get("headers")))
        return await original(self, url, body, **kwargs)

    monkeypatch.setattr(HttpTransport, "post_json", spy)
    with VLLMPolicy([reference_server], qwen_tokenizer, SamplingParams(max_tokens=7, seed=3)) as policy:
        out = policy.act([{"role": "user", "content": "hi"}], session_id="hdr")
    url, body, headers = seen[0]
    assert url.endswith("/v1/completions")
    assert body["prompt"] == out.prompt_token_ids and body["max_tokens"] == 7
    assert body["return_token_ids"] and body["include_stop_str_in_output"] and body["return_tokens_as_token_ids"]
    assert body["skip_special_tokens"] is False and body["logprobs"] == 1 and body["n"] == 1
    assert body["model"]  # discovered from /v1/models
    assert headers == {"x-session-id": "hdr", "X-SMG-Routing-Key": "hdr"}


def test_max_tokens_is_capped_by_response_budget(reference_server, qwen_tokenizer):
    sampling = SamplingParams(max_tokens=50, temperature=1.0, seed=5)
    with VLLMPolicy([reference_server], qwen_tokenizer, sampling, max_response_length=40) as policy:
        record = run_episode(policy, "budget", 6)
    outs = [out for _, out in record]
    first_len = len(outs[0].prompt_token_ids)
    for out in outs:
        used = len(out.prompt_token_ids) - first_len
        assert len(out.token_ids) <= max(0, 40 - used)
    assert outs[-1].finish_reason == "prompt_truncation" and outs[-1].token_ids == []


def test_chat_mode_records_server_ids(reference_server, qwen_tokenizer):
    with recording(VLLMChatPolicy, [reference_server], qwen_tokenizer, RESCORE) as policy:
        record = run_episode(policy, "chat", 3, tools=TOOLS)
    for (_, out), (_, data) in zip(record, policy.client.responses, strict=False):
        assert out.token_ids == data["choices"][0]["token_ids"]
        assert not out.retokenized
        assert out.prompt_token_ids is not None and len(out.logprobs) == len(out.token_ids)
    assert record[0][1].prompt_token_ids == policy.builder.render_ids(record[0][0], TOOLS)


def test_seed_completions_api(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([reference_server, f"http://{reference_server}/v1"], qwen_tokenizer)
    assert policy.client.server_addresses == [reference_server]  # same server given twice
    assert len(policy.completions) == 1
    ids = qwen_tokenizer.encode("Hello", add_special_tokens=False)

    async def main():
        result = await policy.completions[0]({"prompt": ids, "max_tokens": 3, "return_token_ids": True})
        await policy.aclose()
        return result

    result = asyncio.run(main())
    assert len(result["choices"][0]["token_ids"]) == 3


def test_concurrent_sessions_are_sticky_and_spread(policy_fleet, qwen_tokenizer):
    servers = [policy_fleet["fake_a"], policy_fleet["fake_b"]]
    policy = VLLMPolicy(servers, qwen_tokenizer, SamplingParams(max_tokens=8), client_options={"concurrency": 8})

    async def episode(i: int) -> list[str]:
        messages = [{"role": "user", "content": f"task {i}"}]
        used = []
        for k in range(3):
            out = await policy.aact(messages, session_id=f"ep{i}")
            used.append(out.server)
            messages += [{"role": "assistant", "content": out.text}, {"role": "user", "content": f"go {k}"}]
        policy.close_session(f"ep{i}")
        return used

    async def main():
        try:
            return await asyncio.gather(*(episode(i) for i in range(16)))
        finally:
            await policy.aclose()

    used = asyncio.run(main())
    assert all(len(set(u)) == 1 for u in used)  # one server per episode
    per_server = {s: sum(u[0] == s for u in used) for s in servers}
    assert min(per_server.values()) >= 4  # new sessions spread over both servers


def test_act_inside_running_loop(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([reference_server], qwen_tokenizer, SamplingParams(max_tokens=4))

    async def notebook_cell():
        return policy.act([{"role": "user", "content": "hi"}], session_id="nb")

    out = asyncio.run(notebook_cell())
    assert len(out.token_ids) == 4
    policy.close()


def test_transformers_and_vllm_policies_produce_the_same_kind_of_output(
    reference_server, qwen_tokenizer, tiny_model_dir
):
    local = TransformersPolicy(str(tiny_model_dir), sampling=RESCORE)
    remote = VLLMPolicy([reference_server], qwen_tokenizer, RESCORE)
    try:
        records = [run_episode(p, "same", 3, tools=TOOLS) for p in (local, remote)]
    finally:
        remote.close()
    for a, b in zip(*records, strict=False):
        out_a, out_b = a[1], b[1]
        assert isinstance(out_a, PolicyOutput) and isinstance(out_b, PolicyOutput)
        for out in (out_a, out_b):
            assert isinstance(out.text, str) and out.finish_reason in ("stop", "length")
            assert all(isinstance(t, int) for t in out.prompt_token_ids + out.token_ids)
            assert len(out.logprobs) == len(out.token_ids) and all(isinstance(v, float) for v in out.logprobs)
            assert not out.retokenized and not out.new_segment and out.llm_time > 0
    # Same builder, same conversation start: identical first prompts.
    assert records[0][0][1].prompt_token_ids == records[1][0][1].prompt_token_ids
    asm = TokenAssembler()
    for k, (_, out) in enumerate(records[0]):
        assert not asm.add_turn(k, out.prompt_token_ids, out.token_ids, out.logprobs)
    assert _rescore(tiny_model_dir, asm.segments()[0]) < 1e-3


def test_async_context_manager_closes_the_loops_connections(reference_server, qwen_tokenizer):
    import asyncio

    async def main():
        async with VLLMPolicy([reference_server], qwen_tokenizer, SamplingParams(max_tokens=3)) as policy:
            out = await policy.aact([{"role": "user", "content": "hi"}], session_id="ctx")
            transport = policy.client.loop_resources().transport
        assert out.token_ids and transport.closed and not policy.client._resources

    asyncio.run(main())
