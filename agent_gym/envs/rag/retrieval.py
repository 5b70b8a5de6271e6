"""The ``Retriever`` protocol, search hits, the on-disk index cache and BM25.

Every retriever answers ``search(query, k) -> list[Hit]`` (best first) and
``search_batch(queries, k)``; local retrievers also give ``document(doc_id)``.
Indexes are built once per corpus and settings, stored under :func:`cache_dir`
(``$AGENT_GYM_CACHE``, else ``$XDG_CACHE_HOME/agent_gym``, else ``~/.cache/agent_gym``)
in a folder named by the corpus fingerprint and a hash of the settings, guarded by a
file lock so that concurrent processes build it once, and loaded memory-mapped.
:func:`shared_retriever` keeps one instance per (kind, corpus, settings) in a process,
so every env instance in that process shares it.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agent_gym.checks import check_int
from agent_gym.envs.rag.corpus import Corpus, Document
from agent_gym.errors import MissingExtraError

__all__ = [
    "BM25Retriever",
    "Hit",
    "LocalRetriever",
    "Retriever",
    "cache_dir",
    "index_dir",
    "make_snippet",
    "shared_retriever",
    "tokenize",
    "top_k",
]

_TOKEN = re.compile(r"\w\w+")
_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with which who whom what when where why how did does do has have had were been its from".split()
)


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        doc_id: Id of the document.
        title: Its title.
        score: Retriever score (higher is better; scales differ between retrievers).
        snippet: The start of its text, for the result list.
    """

    doc_id: str
    title: str
    score: float
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        """As a plain dict."""
        return asdict(self)


@runtime_checkable
class Retriever(Protocol):
    """Anything that finds documents for a query."""

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The best ``k`` hits for ``query``, best first (fewer if fewer match)."""
        ...

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        """``search`` for several queries at once."""
        ...

    def document(self, doc_id: str) -> Document | None:
        """The full document with this id, or None if unknown."""
        ...


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens of two or more characters, without English stopwords."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


def make_snippet(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of ``text``, cut at a word boundary with ``...``."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip(" ,;:") + "..."


def cache_dir() -> Path:
    """Root folder of agent_gym's caches (created on first use)."""
    root = os.environ.get("AGENT_GYM_CACHE")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME")
        path = (Path(base) if base else Path.home() / ".cache") / "agent_gym"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def index_dir(kind: str, corpus: Corpus, settings: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """The folder of a built index, building it first if it is not in the cache.

    The build writes into a temporary folder beside the final one, which is renamed
    into place when complete; a file lock makes concurrent processes wait for one build.

    Args:
        kind: Index kind (``bm25``, ``dense``).
        corpus: The indexed corpus (its fingerprint keys the folder).
        settings: Every setting that changes the index (hashed into the folder name).
        build: Writes the index files into the folder it is given.
    """
    from filelock import FileLock

    root = cache_dir() / "rag"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{corpus.fingerprint}-{_settings_hash(settings)}"
    if (final / "DONE").exists():
        return final
    with FileLock(str(final) + ".lock", timeout=3600):
        if (final / "DONE").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=root))
        try:
            build(tmp)
            (tmp / "settings.json").write_text(json.dumps({"kind": kind, "corpus": corpus.fingerprint,
                                                           "documents": len(corpus), **settings}, default=str))
            (tmp / "DONE").write_text("ok\n")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _top_k_rows(scores: np.ndarray, k: int, *, floor: float | None = None) -> list[np.ndarray]:
    """Per row of ``scores`` (queries x documents), the indices of its ``k`` largest, best first.

    Ties are broken by the lower index, also at the cut: of the documents that tie with
    the ``k``-th score, the lowest indices are kept. A row's result therefore depends only
    on that row, so a query ranks the same alone and in any batch.

    Args:
        scores: A 2-D array, one row per query.
        k: Indices kept per row.
        floor: When given, the caller drops scores ``<= floor``, and such indices may be left out.
    """
    rows, n = scores.shape
    k = min(k, n)
    if k <= 0 or rows == 0:
        return [np.empty(0, dtype=np.int64) for _ in range(rows)]
    if k == n:
        return list(np.lexsort((np.broadcast_to(np.arange(n), (rows, n)), -scores), axis=-1))
    if n >= _SAMPLE_MIN_DOCS and n >= 4 * _SAMPLE_STRIDE * k:
        return _top_k_sampled(scores, k, floor)
    return _top_k_partition(scores, k, floor)


def _top_k_partition(scores: np.ndarray, k: int, floor: float | None) -> list[np.ndarray]:
    """:func:`_top_k_rows` by one ``argpartition`` of each row (``k`` < documents)."""
    rows = scores.shape[0]
    if rows == 1:  # the same steps on 1-D arrays, which cost less per call
        line = scores[0]
        part = np.argpartition(-line, k)
        top, values = part[:k], line[part[:k]]
        cut = values.min()
        if cut == line[part[k]] and (floor is None or cut > floor):
            above = top[values > cut]
            top = np.concatenate([above, np.flatnonzero(line == cut)[: k - above.size]])
            values = line[top]
        return [top[np.lexsort((top, -values))]]
    # position k gets the (k+1)-th largest, the k largest come before it in some order;
    # the (k+1)-th equal to the k-th means a tie across the cut
    part = np.argpartition(-scores, k, axis=1)
    values = scores[np.arange(rows)[:, None], part[:, : k + 1]]
    cut = values[:, :k].min(axis=1)
    crowded = cut == values[:, k]
    if floor is not None:
        crowded &= cut > floor
    part, values = part[:, :k], values[:, :k]
    for row in np.flatnonzero(crowded):
        # every score above the k-th is among the first k; the ties go to the lowest indices
        threshold = cut[row]
        keep = values[row] > threshold
        above, above_values = part[row][keep], values[row][keep]
        tied = np.flatnonzero(scores[row] == threshold)[: k - above.size]
        part[row] = np.concatenate([above, tied])
        values[row] = np.concatenate([above_values, np.full(tied.size, threshold, dtype=values.dtype)])
    return list(part[np.arange(rows)[:, None], np.lexsort((part, -values), axis=-1)])


def _top_k_sampled(scores: np.ndarray, k: int, floor: float | None) -> list[np.ndarray]:
    """:func:`_top_k_rows` for long rows: a bound from a sample of each row, then an exact sort above it.

    The ``k``-th largest of every ``_SAMPLE_STRIDE``-th score is at most the row's ``k``-th
    largest, so every document of the exact answer (ties at the cut included) scores at
    least that bound; one pass finds those few candidates, sorted by (score desc, index asc).
    """
    rows, n = scores.shape
    sample = scores[:, ::_SAMPLE_STRIDE]
    bound = np.partition(sample, sample.shape[1] - k, axis=1)[:, sample.shape[1] - k]
    if floor is not None:
        bound = np.maximum(bound, np.nextafter(scores.dtype.type(floor), scores.dtype.type(np.inf)))
    row_of, index = np.divmod(np.flatnonzero(scores >= bound[:, None]), n)  # 1-D nonzero is far faster
    counts = np.bincount(row_of, minlength=rows)
    out: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * rows
    heavy = counts > n // 8  # many ties at the bound: partition those rows instead
    if heavy.any():
        light = ~heavy[row_of]
        row_of, index = row_of[light], index[light]
        for row, top in zip(np.flatnonzero(heavy), _top_k_partition(scores[heavy], k, floor), strict=True):
            out[row] = top
    order = np.lexsort((index, -scores[row_of, index], row_of))
    index = index[order]
    ends = np.cumsum(np.where(heavy, 0, counts))
    for row in np.flatnonzero(~heavy):
        end = int(ends[row])
        start = end - int(counts[row])
        out[row] = index[start:min(end, start + k)]
    return out


_SAMPLE_MIN_DOCS = 16384
"""Rows at least this long (and 4 x ``_SAMPLE_STRIDE`` x k) take their top k through a sampled bound."""

_SAMPLE_STRIDE = 64
"""One score in this many forms the sample that bounds the k-th largest."""


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first (ties broken by lower index, also at the cut)."""
    return _top_k_rows(np.asarray(scores)[None, :], k)[0]


class LocalRetriever(abc.ABC):
    """Base of the in-process retrievers: a corpus, hits with snippets, pickling as settings.

    Subclasses implement ``_scores_batch(queries) -> list[(indices, scores)]`` and list
    their constructor settings in ``settings``; pickling stores the corpus and settings,
    and unpickling reloads the index from the cache.

    Args:
        corpus: The documents.
        snippet_chars: Characters of text shown per hit.
    """

    kind = "local"

    def __init__(self, corpus: Corpus, *, snippet_chars: int = 200) -> None:
        if not isinstance(corpus, Corpus):
            raise TypeError(f"corpus: expected a Corpus (see load_corpus), got {type(corpus).__name__}")
        self.corpus = corpus
        self.snippet_chars = check_int("snippet_chars", snippet_chars, low=20)

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments that reproduce this retriever (besides the corpus)."""
        return {"snippet_chars": self.snippet_chars}

    def __reduce__(self) -> tuple[Any, ...]:
        return (shared_retriever, (type(self), self.corpus, self.settings))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.corpus)} documents, {self.settings})"

    @abc.abstractmethod
    def _candidates(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """The best ``k`` ``(document index, score)`` pairs of each query, best first."""

    def search(self, query: str, k: int = 5, *, snippets: bool = True) -> list[Hit]:
        """The best ``k`` documents for ``query``, best first; documents with no match are left out.

        Args:
            query: The query text.
            k: Most hits returned.
            snippets: Whether hits carry the start of their text (``snippet`` is ``""`` when not).

        Raises:
            TypeError / ValueError: For a query that is not a str or a ``k`` < 1.
        """
        return self.search_batch([query], k, snippets=snippets)[0]

    def search_batch(self, queries: Sequence[str], k: int = 5, *, snippets: bool = True) -> list[list[Hit]]:
        """``search`` for several queries in one pass over the index.

        Each query gets the same hits, scores and order as when searched alone.
        ``snippets=False`` skips cutting the snippets, for callers that read the
        documents themselves (the retrieval server).
        """
        check_int("k", k, low=1)
        queries = list(queries)
        for query in queries:
            if not isinstance(query, str):
                raise TypeError(f"query: expected str, got {type(query).__name__}")
        corpus, limit = self.corpus, self.snippet_chars
        results = []
        for found in self._candidates(queries, k):
            hits = []
            for index, score in found:
                doc = corpus[index]
                hits.append(Hit(doc.id, doc.title, score, make_snippet(doc.text, limit) if snippets else ""))
            results.append(hits)
        return results

    def document(self, doc_id: str) -> Document | None:
        """The document with this id, or None."""
        return self.corpus.get(doc_id) if isinstance(doc_id, str) else None


class BM25Retriever(LocalRetriever):
    """Okapi BM25 over the corpus (the ``bm25s`` package, an optional extra).

    Titles are indexed with the text. The sparse score matrix is cached on disk and
    loaded memory-mapped.

    Args:
        corpus: The documents.
        k1: Term-frequency saturation.
        b: Length normalisation.
        snippet_chars: Characters of text shown per hit.

    Raises:
        MissingExtraError: If ``bm25s`` is not installed (``pip install 'agent-gym[rag]'``).
    """

    kind = "bm25"

    def __init__(self, corpus: Corpus, *, k1: float = 1.5, b: float = 0.75, snippet_chars: int = 200) -> None:
        super().__init__(corpus, snippet_chars=snippet_chars)
        try:
            import bm25s
        except ImportError:
            raise MissingExtraError("bm25s", "rag") from None
        self.k1, self.b = float(k1), float(b)
        settings = {"k1": self.k1, "b": self.b, "tokenizer": "w2-stop-v1", "bm25s": "lucene"}

        def build(folder: Path) -> None:
            index = bm25s.BM25(k1=self.k1, b=self.b)
            index.index([tokenize(f"{d.title} {d.text}") or [""] for d in corpus], show_progress=False)
            index.save(str(folder), show_progress=False)

        folder = index_dir(self.kind, corpus, settings, build)
        self._index = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        self._vocab: dict[str, int] = self._index.vocab_dict
        matrix = self._index.scores  # postings of each term (CSC): plain ndarray views of the memory maps
        self._data = np.asarray(matrix["data"])
        self._indices = np.asarray(matrix["indices"])
        self._indptr = np.asarray(matrix["indptr"])
        self._n_docs = int(matrix["num_docs"])
        self.index_path = folder

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments besides the corpus."""
        return {"k1": self.k1, "b": self.b, "snippet_chars": self.snippet_chars}

    def _term_ids(self, query: str) -> list[int]:
        vocab = self._vocab
        return [vocab[t] for t in tokenize(query) if t in vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no term is known)."""
        return self._score_rows([self._term_ids(query)])[0]

    def _score_rows(self, term_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """BM25 scores of every document (columns) for each query's term ids (rows).

        A batch of short posting lists is gathered at once and added into a (queries x documents)
        float32 matrix with one ``np.add.at``, which adds in array order; one query, or long
        posting lists, add each term's slice in turn. Either way each document's score is summed
        term by term in query order: the same float32 sums as ``bm25s``'s single-query scoring,
        so scores, ranks and ties do not depend on the batch.
        """
        data, indices, indptr, n_docs = self._data, self._indices, self._indptr, self._n_docs
        rows = len(term_ids)
        out = np.zeros(rows * n_docs, dtype=data.dtype)
        lengths = np.fromiter((len(ids) for ids in term_ids), dtype=np.int64, count=rows)
        terms = np.fromiter((t for ids in term_ids for t in ids), dtype=np.int64, count=int(lengths.sum()))
        starts = indptr[terms].astype(np.int64)
        counts = indptr[terms + 1].astype(np.int64) - starts
        total = int(counts.sum())
        if rows == 1 or total > _GATHER_POSTINGS * terms.size:
            # one query, or long posting lists: a slice per term costs less than gathering them
            flat = iter(zip(starts.tolist(), (starts + counts).tolist(), strict=True))
            for row, ids in enumerate(term_ids):
                line = out[row * n_docs:(row + 1) * n_docs]
                for _ in range(len(ids)):
                    start, end = next(flat)
                    np.add.at(line, indices[start:end], data[start:end])
        elif total:
            # every posting of every term, in (query, term, posting) order
            positions = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total, dtype=np.int64)
            owner = np.repeat(np.repeat(np.arange(0, rows * n_docs, n_docs, dtype=np.int64), lengths), counts)
            np.add.at(out, owner + indices[positions], data[positions])
        out = out.reshape(rows, n_docs)
        extra = getattr(self._index, "nonoccurrence_array", None)
        if extra is not None:  # BM25L / BM25+ variants: a constant per query term
            for row, ids in enumerate(term_ids):
                if len(ids):
                    out[row] += extra[np.asarray(ids, dtype=np.int64)].sum()
        return out

    def _candidates(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        term_ids = [self._term_ids(q) for q in queries]
        out: list[list[tuple[int, float]]] = [[] for _ in queries]
        live = [i for i, ids in enumerate(term_ids) if ids]
        # score a bounded number of (query x document) cells at a time
        step = max(1, _BATCH_CELLS // max(len(self.corpus), 1))
        for first in range(0, len(live), step):
            chunk = live[first:first + step]
            matrix = self._score_rows([term_ids[i] for i in chunk])
            for i, row, top in zip(chunk, matrix, _top_k_rows(matrix, k, floor=0.0), strict=True):
                values = row[top].tolist()
                out[i] = [(index, value) for index, value in zip(top.tolist(), values, strict=True) if value > 0]
        return out


_BATCH_CELLS = 1 << 22
"""Most (query x document) scores held at once by one BM25 batch (16 MiB of float32)."""

_GATHER_POSTINGS = 2048
"""Above this many postings per query term on average, a batch adds each term's slice in turn."""


_SHARED: dict[tuple[Any, ...], LocalRetriever] = {}
_SHARED_LOCK = threading.Lock()
_BUILD_LOCKS: dict[tuple[Any, ...], threading.Lock] = {}


def shared_retriever(cls: type[LocalRetriever], corpus: Corpus, settings: dict[str, Any]) -> LocalRetriever:
    """One instance of ``cls(corpus, **settings)`` per process, shared by every caller.

    Args:
        cls: A :class:`LocalRetriever` subclass.
        corpus: The documents.
        settings: Constructor keyword arguments.
    """
    key = (cls, corpus.fingerprint, len(corpus), json.dumps(settings, sort_keys=True, default=str))
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is not None:
            return found
        lock = _BUILD_LOCKS.setdefault(key, threading.Lock())
    with lock:
        with _SHARED_LOCK:
            found = _SHARED.get(key)
        if found is None:
            found = cls(corpus, **settings)
            full = (cls, corpus.fingerprint, len(corpus), json.dumps(found.settings, sort_keys=True, default=str))
            with _SHARED_LOCK:
                _SHARED[key] = found
                _SHARED.setdefault(full, found)
    return found
