"""Retrieval-augmented QA: corpora, retrievers (BM25, dense, hybrid, remote) and ``agent_gym/RAG-v0``.

``from agent_gym.envs.rag import RAGEnv, load_corpus, BM25Retriever`` and so on; the dense
and hybrid retrievers (sentence-transformers, optional faiss) load on first use of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_gym.envs.rag.corpus import Corpus, Document, load_corpus
from agent_gym.envs.rag.env import RAGEnv, make_retriever
from agent_gym.envs.rag.remote import RemoteRetriever
from agent_gym.envs.rag.retrieval import BM25Retriever, Hit, Retriever, shared_retriever
from agent_gym.envs.rag.tasks import builtin_corpus_path, builtin_tasks, from_hotpotqa, from_search_r1, load_tasks

if TYPE_CHECKING:  # loaded on first use (see __getattr__)
    from agent_gym.envs.rag.dense import DenseRetriever, HybridRetriever

__all__ = [
    "BM25Retriever",
    "Corpus",
    "DenseRetriever",
    "Document",
    "Hit",
    "HybridRetriever",
    "RAGEnv",
    "RemoteRetriever",
    "Retriever",
    "builtin_corpus_path",
    "builtin_tasks",
    "from_hotpotqa",
    "from_search_r1",
    "load_corpus",
    "load_tasks",
    "make_retriever",
    "shared_retriever",
]


def __getattr__(name: str) -> Any:
    if name in ("DenseRetriever", "HybridRetriever"):
        from agent_gym.envs.rag import dense

        return getattr(dense, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
