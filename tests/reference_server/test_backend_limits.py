"""The reference server's backend keeps its limits: ``max_batch`` rows with ``n > 1``, prompt heads in bytes."""

from __future__ import annotations

import asyncio

import pytest

from agent_gym.reference_server import build_app
from agent_gym.reference_server.backends import GenRequest, TransformersBackend
from agent_gym.reference_server.main import add_server_arguments

HEAD = list(range(100, 300))  # three 64-id chunks shared by every prompt below


def _request(tail: int, n: int, seed: int, max_tokens: int = 12) -> GenRequest:
    return GenRequest([*HEAD, 400 + tail, 500 + tail], max_tokens=max_tokens, n=n, temperature=1.0, seed=seed,
                      ignore_eos=True)


async def _together(backend: TransformersBackend, reqs: list[GenRequest]):
    return await asyncio.gather(*(backend.generate(r) for r in reqs))


@pytest.fixture(scope="module")
def roomy(tiny_model_dir):
    backend = TransformersBackend(str(tiny_model_dir), max_model_len=4096)
    yield backend
    backend.close()


def test_requests_with_several_samples_never_push_a_batch_past_max_batch(tiny_model_dir, roomy):
    narrow = TransformersBackend(str(tiny_model_dir), max_model_len=4096, max_batch=3)
    try:
        reqs = [_request(0, 5, 1), _request(1, 2, 2, max_tokens=4), _request(2, 1, 3, max_tokens=20)]
        results = asyncio.run(_together(narrow, reqs))
    finally:
        narrow.close()
    assert narrow.engine.stats["max_rows"] == 3  # rows drawn together: the batch was full, never more
    expected = asyncio.run(_together(roomy, reqs))  # (max_batch 64)
    for got, want in zip(results, expected, strict=True):
        assert [s.token_ids for s in got] == [s.token_ids for s in want]
        for a, b in zip(got, want, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_the_prompt_head_cache_is_bounded_by_bytes(tiny_model_dir, roomy):
    asyncio.run(_together(roomy, [_request(0, 1, 1, max_tokens=2)]))
    chunks = roomy.engine.chunks
    per_prompt = chunks.nbytes  # the three chunks of one prompt head
    assert len(chunks) == 3 and per_prompt > 0
    budget = per_prompt + per_prompt // 2
    small = TransformersBackend(str(tiny_model_dir), max_model_len=4096, prefix_cache_bytes=budget)
    try:
        # prompts with three different heads: together they hold more than the budget
        reqs = [GenRequest([k, *HEAD[1:], 400], max_tokens=2, seed=k, ignore_eos=True) for k in (1, 2, 3)]
        for req in reqs:
            asyncio.run(small.generate(req))
            assert small.engine.chunks.nbytes <= budget
        assert len(small.engine.chunks) < 9  # the oldest heads left
        assert tuple([3, *HEAD[1:64]]) in small.engine.chunks  # the newest stays
    finally:
        small.close()
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        TransformersBackend(str(tiny_model_dir), prefix_cache_bytes=-1)


def test_the_command_line_sets_the_prompt_head_budget(tiny_model_dir):
    import argparse

    parser = add_server_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--model", str(tiny_model_dir), "--prefix-cache-mb", "0.5", "--max-batch", "4"])
    backend = build_app(args).state.backend
    try:
        assert backend.engine.chunks.max_bytes == 2**19 and backend.engine.max_batch == 4
    finally:
        backend.close()
    assert parser.parse_args([]).prefix_cache_mb * 2**20 == 2**30  # 1 GiB by default
