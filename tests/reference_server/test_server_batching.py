"""The reference server's backend decodes concurrent requests together (the shared BatchEngine)."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from agent_gym.reference_server.backends import GenRequest, TransformersBackend

PROMPT = [9707, 1879, 0]  # "Hello world!"
LONG_PROMPT = list(range(100, 180))  # more than one 64-id chunk


@pytest.fixture(scope="module")
def backends(tiny_model_dir):
    raw = TransformersBackend(str(tiny_model_dir), max_model_len=4096)
    processed = TransformersBackend(str(tiny_model_dir), max_model_len=4096, logprobs_mode="processed_logprobs")
    yield raw, processed
    raw.close()
    processed.close()


def _requests() -> list[GenRequest]:
    # different sampling settings in one batch: greedy, full distribution, truncated with a penalty
    return [
        GenRequest(PROMPT, max_tokens=24, temperature=0.0, seed=1, ignore_eos=True, top_logprobs=2),
        GenRequest(LONG_PROMPT, max_tokens=24, temperature=1.0, seed=2, ignore_eos=True),
        GenRequest(PROMPT, max_tokens=20, n=2, temperature=0.7, top_k=5, top_p=0.9, seed=3, ignore_eos=True,
                   repetition_penalty=1.3),
    ]


async def _together(backend: TransformersBackend, reqs: list[GenRequest]):
    return await asyncio.gather(*(backend.generate(r) for r in reqs))


def test_concurrent_requests_share_decode_steps_and_sample_what_they_sample_alone(backends):
    backend = backends[0]
    alone = [asyncio.run(backend.generate(r)) for r in _requests()]
    assert backend.engine.stats["max_rows"] <= 2  # one request at a time (n=2 is two rows)
    before = dict(backend.engine.stats)
    together = asyncio.run(_together(backend, _requests()))
    stats = backend.engine.stats
    # all five samples ran in the same decode steps: fewer steps than rows decoded
    assert stats["max_rows"] >= 3
    assert stats["rows_decoded"] - before["rows_decoded"] > stats["decode_steps"] - before["decode_steps"]
    for one, many in zip(alone, together, strict=True):
        for a, b in zip(one, many, strict=True):
            assert a.token_ids == b.token_ids  # a seed gives the same ids alone or in a batch
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
            assert a.finish_reason == b.finish_reason == "length"
    assert together[0][0].top_logprobs[0][0][0] == together[0][0].token_ids[0]  # greedy: the top id
    assert together[2][0].token_ids != together[2][1].token_ids  # samples of n=2 have their own seeds


def _processed(logits: torch.Tensor, req: GenRequest, context: list[int]) -> torch.Tensor:
    """The distribution a processed-mode sample is drawn from (penalty, temperature, top-k, top-p)."""
    logits = logits.clone()
    if req.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(context)))
        vals = logits[seen]
        logits[seen] = torch.where(vals > 0, vals / req.repetition_penalty, vals * req.repetition_penalty)
    if req.temperature < 1e-5:
        return torch.log_softmax(logits, dim=-1)
    logits = logits / req.temperature
    if req.top_k > 0:
        logits[logits < torch.topk(logits, req.top_k).values[-1]] = float("-inf")
    if req.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        drop = (probs.cumsum(-1) - probs) > req.top_p
        drop[0] = False
        logits[order[drop]] = float("-inf")
    return torch.log_softmax(logits, dim=-1)


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_batched_samples_rescore_with_a_plain_forward_pass(backends, tiny_model_dir, mode):
    from transformers import AutoModelForCausalLM

    backend = backends[0] if mode == "raw_logprobs" else backends[1]
    reqs = _requests()
    results = asyncio.run(_together(backend, reqs))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for req, samples in zip(reqs, results, strict=True):
        for sample in samples:
            ids, prompt = sample.token_ids, req.prompt_ids
            with torch.no_grad():
                logits = model(torch.tensor([prompt + ids])).logits[0].float()[len(prompt) - 1 : -1]
            for i, token in enumerate(ids):
                if mode == "raw_logprobs":
                    expected = torch.log_softmax(logits[i], dim=-1)[token]
                else:
                    expected = _processed(logits[i], req, prompt + ids[:i])[token]
                assert abs(float(expected) - sample.logprobs[i]) < 1e-3, (mode, req.temperature, i)


def test_a_cancelled_request_leaves_the_batch(backends):
    backend = backends[0]
    req = GenRequest(PROMPT, max_tokens=4000, temperature=1.0, seed=5, ignore_eos=True)

    async def cancel_soon() -> None:
        task = asyncio.ensure_future(backend.generate(req))
        while backend.engine.stats["decode_steps"] < before + 5:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = backend.engine.stats["decode_steps"]
    asyncio.run(cancel_soon())
    deadline = time.monotonic() + 120
    while backend.engine.store.rows and time.monotonic() < deadline:
        time.sleep(0.01)
    # the cancelled sample left the batch long before its 4000 ids
    assert not backend.engine.store.rows
    assert backend.engine.stats["decode_steps"] - before < 2000
    after = asyncio.run(backend.generate(GenRequest(PROMPT, max_tokens=2, seed=1)))
    assert len(after[0].token_ids) == 2
