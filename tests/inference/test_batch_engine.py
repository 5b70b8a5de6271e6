"""BatchEngine and Batcher: ``max_batch`` holds with requests of several rows; the caches keep to their byte budgets."""

from __future__ import annotations

import pytest

from agent_gym.inference import BatchEngine, Batcher, Row
from agent_gym.models import default_model_path
from agent_gym.policy import SamplingParams

SAMPLING = SamplingParams(temperature=1.0, top_k=-1)
HEAD = list(range(10, 140))  # two 64-id chunks


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(default_model_path())).eval()


def _engine(model, **kwargs) -> BatchEngine:
    return BatchEngine(model, pad_id=0, vocab=model.config.vocab_size, **kwargs)


def _rows(engine: BatchEngine, count: int, first_seed: int, budget: int = 6) -> list[Row]:
    seeds = range(first_seed, first_seed + count)
    return [engine.new_row([*HEAD, 500 + seed], budget, seed, SAMPLING) for seed in seeds]


def test_rows_beyond_max_batch_wait_for_room_and_sample_what_they_sample_in_a_large_batch(model):
    narrow = _engine(model, max_batch=3)
    rows = _rows(narrow, 5, 0)
    request = _rows(narrow, 4, 5)  # one request of four rows, handed over while the batch is full
    handed = []

    def admit(room: int) -> list[Row]:
        handed.append(room)
        return request if len(handed) == 1 else []

    narrow.run(rows, admit)
    assert narrow.stats["max_rows"] == 3 and handed[0] == 1  # asked for one row, handed four
    wide = _engine(model, max_batch=64)
    again = _rows(wide, 9, 0)
    wide.run(again)
    assert wide.stats["max_rows"] == 9
    assert [row.out for row in rows + request] == [row.out for row in again]
    assert all(len(row.out) == 6 for row in rows + request)


def test_the_batcher_fills_a_batch_by_rows_not_by_requests(model):
    engine = _engine(model, max_batch=2)
    batcher = Batcher(engine, gather_s=0.05)
    try:
        futures = [batcher.submit(lambda k=k: _rows(engine, 3, 10 * k, budget=3), lambda rows: [r.out for r in rows],
                                  rows=3) for k in range(3)]
        results = [future.result(timeout=300) for future in futures]
    finally:
        batcher.close()
    assert [len(outs) for outs in results] == [3, 3, 3] and all(len(out) == 3 for outs in results for out in outs)
    assert engine.stats["max_rows"] == 2


def test_session_caches_keep_to_their_byte_budget_and_closing_keeps_the_prompt_heads(model):
    engine = _engine(model)
    first = engine.new_row([*HEAD, 501], 4, 1, SAMPLING, session="a")
    engine.run([first])
    one_session = engine.sessions.nbytes
    assert one_session > 0 and len(engine.chunks) == 2
    small = _engine(model, session_cache_bytes=one_session + one_session // 2)
    for name in ("a", "b", "c"):
        small.run([small.new_row([*HEAD, 501], 4, 1, SAMPLING, session=name)])
        assert small.sessions.nbytes <= small.sessions.max_bytes
    assert "a" not in small.sessions and "c" in small.sessions  # the oldest left
    follow = small.new_row([*HEAD, 501, *small.sessions.peek("c")[0][len(HEAD) + 1 :], 7, 8], 3, 2, SAMPLING,
                           session="c")
    assert follow.start == len(HEAD) + 1 + 3  # the next turn continues the cached ids
    small.clear(prompt_heads=False)
    assert len(small.sessions) == 0 and len(small.chunks) == 2
    small.clear()
    assert len(small.chunks) == 0
    with pytest.raises(ValueError, match="session_cache_bytes"):
        _engine(model, session_cache_bytes=-1)
