"""Batched BM25 search gives exactly the single-query results; snippet-free hits; ties at the cut."""

import asyncio
import random

import numpy as np
import pytest

from agent_gym.envs.rag import (
    BM25Retriever,
    Corpus,
    builtin_corpus_path,
    builtin_tasks,
    load_corpus,
    retrieval,
    shared_retriever,
)
from agent_gym.envs.rag.retrieval import _top_k_rows, top_k
from agent_gym.envs.rag.server import create_app


@pytest.fixture(scope="module")
def shipped() -> BM25Retriever:
    return shared_retriever(BM25Retriever, load_corpus(builtin_corpus_path()), {})


@pytest.fixture(scope="module")
def queries(shipped) -> list[str]:
    rng = random.Random(7)
    words = " ".join(d.text for d in list(shipped.corpus)[:200]).split()
    mixed = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(300)]
    odd = ["", "   ", "the of and", "zzzz qqqq", "born born born", "Kelmar " * 50, "\x00\xff binary ☃"]
    return [t["question"] for t in builtin_tasks()][:300] + mixed + odd


def reference(retriever: BM25Retriever, query: str, k: int) -> list[tuple[str, float]]:
    """bm25s's own single-query scores, every document sorted by (score desc, index asc)."""
    ids = retriever._term_ids(query)
    if not ids:
        return []
    scores = retriever._index.get_scores_from_ids(ids)
    order = np.lexsort((np.arange(scores.size), -scores))[:k]
    return [(retriever.corpus[int(i)].id, float(scores[i])) for i in order if scores[i] > 0]


def pairs(hits) -> list[tuple[str, float]]:
    return [(h.doc_id, h.score) for h in hits]


@pytest.mark.parametrize("k", [1, 5, 37, 5000])
def test_batches_equal_single_queries_and_bm25s(shipped, queries, k):
    single = [pairs(shipped.search(q, k)) for q in queries]
    assert single == [reference(shipped, q, k) for q in queries]  # same ids, float32 scores and order
    assert sum(1 for hits in single if hits) > len(queries) * 0.9
    for size in (2, 8, 61, len(queries)):
        batched = []
        for start in range(0, len(queries), size):
            batched += [pairs(h) for h in shipped.search_batch(queries[start:start + size], k, snippets=False)]
        assert batched == single, f"batch size {size}"


def test_batches_split_into_bounded_chunks_give_the_same_results(shipped, queries, monkeypatch):
    whole = [pairs(h) for h in shipped.search_batch(queries, 5)]
    monkeypatch.setattr(retrieval, "_BATCH_CELLS", 3 * len(shipped.corpus))  # three queries per scoring pass
    assert [pairs(h) for h in shipped.search_batch(queries, 5)] == whole


def test_ties_at_the_cut_keep_the_lowest_indices_alone_and_in_batches():
    # 400 equal scores for "alpha": a plain argpartition keeps an arbitrary four of them
    docs = [{"id": f"same{i}", "title": "Note", "text": "alpha beta gamma" if i % 3 else "zeta"} for i in range(600)]
    docs.insert(170, {"id": "best", "title": "Note", "text": "alpha alpha beta gamma"})
    docs.append({"id": "other", "title": "Other", "text": "delta epsilon"})
    bm25 = BM25Retriever(Corpus.from_records(docs))
    expected = ["best", "same1", "same2", "same4"]
    assert [h.doc_id for h in bm25.search("alpha", 4)] == expected
    for batch in (["alpha", "delta"], ["delta"] * 5 + ["alpha"] + ["beta"] * 9):
        results = bm25.search_batch(batch, 4)
        assert [h.doc_id for h in results[batch.index("alpha")]] == expected
    assert [h.doc_id for h in bm25.search("delta", 4)] == ["other"]


def test_top_k_rows_breaks_ties_by_index_at_the_cut():
    scores = np.array([[1.0, 3.0, 3.0, 3.0, 0.0, 3.0], [0.5, 0.1, 0.9, 0.9, 0.2, 0.0]], dtype=np.float32)
    assert [r.tolist() for r in _top_k_rows(scores, 2)] == [[1, 2], [2, 3]]
    assert [r.tolist() for r in _top_k_rows(scores, 4)] == [[1, 2, 3, 5], [2, 3, 0, 4]]
    assert [r.tolist() for r in _top_k_rows(scores, 99)] == [[1, 2, 3, 5, 0, 4], [2, 3, 0, 4, 1, 5]]
    assert top_k(scores[0], 3).tolist() == [1, 2, 3]
    for _ in range(50):  # many ties at random cuts: the cut keeps the lowest indices
        row = np.random.default_rng(_).integers(0, 4, size=40).astype(np.float32)
        k = int(np.random.default_rng(_ + 100).integers(1, 40))
        assert top_k(row, k).tolist() == np.lexsort((np.arange(40), -row))[:k].tolist()


@pytest.mark.parametrize("kind", ["ties", "sparse", "distinct"])
def test_top_k_of_long_rows_through_the_sampled_bound_is_exact(kind):
    rng = np.random.default_rng({"ties": 1, "sparse": 2, "distinct": 3}[kind])
    shape = (5, 20_000)  # long enough for the sampled path
    if kind == "ties":
        scores = rng.integers(0, 6, shape).astype(np.float32)
    elif kind == "sparse":
        scores = (rng.random(shape) * (rng.random(shape) < 0.0005)).astype(np.float32)
    else:
        scores = rng.random(shape).astype(np.float32)
    for k in (1, 5, 40):
        expected = [np.lexsort((np.arange(shape[1]), -row))[:k].tolist() for row in scores]
        assert [r.tolist() for r in _top_k_rows(scores, k)] == expected
        kept = [[i for i in r.tolist() if scores[n, i] > 0] for n, r in enumerate(_top_k_rows(scores, k, floor=0.0))]
        assert kept == [[i for i in e if scores[n, i] > 0] for n, e in enumerate(expected)]


def test_sampled_top_k_and_per_term_scoring_give_the_same_hits(shipped, queries, monkeypatch):
    whole = [pairs(h) for h in shipped.search_batch(queries, 5)]
    monkeypatch.setattr(retrieval, "_SAMPLE_MIN_DOCS", 1)  # sampled bound on the 2,024 documents
    monkeypatch.setattr(retrieval, "_GATHER_POSTINGS", 0)  # a slice per term, not the gather
    assert [pairs(h) for h in shipped.search_batch(queries, 5)] == whole


def test_snippet_free_hits(shipped):
    query = "Where was the founder born?"
    full, bare = shipped.search(query, 5), shipped.search(query, 5, snippets=False)
    assert [h.snippet for h in bare] == [""] * 5 and all(h.snippet for h in full)
    assert [(h.doc_id, h.title, h.score) for h in bare] == [(h.doc_id, h.title, h.score) for h in full]


def test_server_batches_skip_snippets_and_answer_like_single_searches(shipped, queries):
    app = create_app(shipped)
    assert app.batcher.snippets is False
    assert create_app(shipped, Corpus.from_records([{"id": "x", "text": "y"}])).batcher.snippets is True
    asked = [q for q in queries if q.strip()][:120]

    async def ask_all():
        task = asyncio.create_task(app.batcher.run())
        try:
            return await asyncio.gather(*(app.retrieve({"queries": [q], "topk": 5, "return_scores": True})
                                          for q in asked))
        finally:
            task.cancel()

    replies = asyncio.run(ask_all())
    assert app.batcher.batches < len(asked)  # concurrent requests went through shared batches
    for query, (status, body) in zip(asked, replies, strict=True):
        assert status == 200
        got = [(item["document"]["id"], item["score"]) for item in body["result"][0]]
        assert got == pairs(shipped.search(query, 5))
        for item in body["result"][0]:
            assert item["document"]["contents"] == shipped.document(item["document"]["id"]).contents
