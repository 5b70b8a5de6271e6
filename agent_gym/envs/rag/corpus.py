"""Document collections for retrieval: loading, checking and fingerprinting.

A corpus is a sequence of :class:`Document` (``id``, ``title``, ``text`` and optional
``metadata``), read from a JSONL file (one JSON object per line) or built from a list of
dicts. A broken line raises :class:`CorpusError` naming the file and the line. The
fingerprint of a corpus (a SHA-256 of its ids, titles and texts) keys the on-disk index
cache, so an index is rebuilt exactly when the documents change.

Example:
    >>> corpus = Corpus.from_records([{"id": "d1", "title": "Kelmar", "text": "Kelmar is a city."}])
    >>> corpus["d1"].title
    'Kelmar'
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_gym.errors import CorpusError

__all__ = ["Corpus", "Document", "load_corpus", "read_jsonl_records"]


@dataclass(frozen=True)
class Document:
    """One retrievable document.

    Attributes:
        id: Unique id within the corpus.
        title: Short title (shown in search results).
        text: Full text.
        metadata: Optional extra fields (kept, never searched).
    """

    id: str
    title: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def contents(self) -> str:
        """Title and text in the Search-R1 wire format: a quoted title line, then the text."""
        return f'"{self.title}"\n{self.text}'


def _document(record: Any, where: str) -> Document:
    if not isinstance(record, Mapping):
        raise CorpusError(f"{where}: expected a JSON object with 'id', 'title', 'text', got {type(record).__name__}")
    if "text" not in record and "contents" in record:
        # Search-R1 / FlashRAG corpora: {"id", "contents": '"Title"\ntext'}.
        title, _, text = str(record["contents"]).partition("\n")
        record = {**record, "title": record.get("title", title.strip().strip('"')), "text": text}
    missing = [k for k in ("id", "text") if k not in record]
    if missing:
        raise CorpusError(f"{where}: expected keys 'id', 'title', 'text', missing {missing}")
    doc_id = record["id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id) == "":
        raise CorpusError(f"{where}: expected 'id' to be a non-empty str or int, got {doc_id!r:.60}")
    title = record.get("title", "")
    text = record["text"]
    if not isinstance(title, str) or not isinstance(text, str):
        raise CorpusError(f"{where}: expected 'title' and 'text' to be str, got "
                          f"{type(title).__name__} and {type(text).__name__}")
    extra = record.get("metadata")
    metadata = dict(extra) if isinstance(extra, Mapping) else {
        k: v for k, v in record.items() if k not in ("id", "title", "text", "contents")
    }
    return Document(str(doc_id), title, text, metadata)


def read_jsonl_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, decoded_object)`` for every non-blank line of a JSONL file.

    Raises:
        CorpusError: For a line that is not valid JSON (naming file and line) or an unreadable file.
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise CorpusError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise CorpusError(f"{path}:{number}: expected a JSON object per line, "
                                  f"got invalid JSON ({exc})") from None


class Corpus(Sequence[Document]):
    """An immutable, indexable collection of documents with unique ids.

    Args:
        documents: The documents, in index order.
        source: Where they came from (a path or ``"<memory>"``), used in messages.

    Raises:
        CorpusError: If the collection is empty or two documents share an id.
    """

    def __init__(self, documents: Iterable[Document], source: str = "<memory>") -> None:
        self._docs: tuple[Document, ...] = tuple(documents)
        self.source = source
        if not self._docs:
            raise CorpusError(f"{source}: expected at least one document, got none")
        self._by_id: dict[str, int] = {}
        for index, doc in enumerate(self._docs):
            if doc.id in self._by_id:
                raise CorpusError(f"{source}: expected unique document ids, got {doc.id!r} twice "
                                  f"(documents {self._by_id[doc.id]} and {index})")
            self._by_id[doc.id] = index
        self._fingerprint: str | None = None

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], source: str = "<memory>") -> Corpus:
        """Build from dicts with ``id``, ``title``, ``text`` (or Search-R1's ``contents``)."""
        return cls((_document(r, f"{source}[{i}]") for i, r in enumerate(records)), source)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> Corpus:
        """Read a JSONL file; a broken line raises :class:`CorpusError` naming the file and line."""
        return cls((_document(rec, f"{path}:{n}") for n, rec in read_jsonl_records(path)), str(path))

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, key: Any) -> Any:
        """A document by position (int or slice) or by id (str)."""
        if isinstance(key, str):
            return self._docs[self._by_id[key]]
        return self._docs[key]

    def __iter__(self) -> Iterator[Document]:
        return iter(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and doc_id in self._by_id

    def __repr__(self) -> str:
        return f"Corpus({len(self)} documents from {self.source})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_corpus, (self.source, self.fingerprint, [(d.id, d.title, d.text, dict(d.metadata))
                                                                   for d in self._docs]))

    def get(self, doc_id: str) -> Document | None:
        """The document with this id, or None."""
        index = self._by_id.get(doc_id)
        return None if index is None else self._docs[index]

    def position(self, doc_id: str) -> int:
        """Index of the document with this id (``KeyError`` if absent)."""
        return self._by_id[doc_id]

    @property
    def ids(self) -> list[str]:
        """Document ids in index order."""
        return [d.id for d in self._docs]

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex, 32 chars) of the ids, titles and texts, in order."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            for doc in self._docs:
                for part in (doc.id, doc.title, doc.text):
                    encoded = part.encode("utf-8", "surrogatepass")
                    digest.update(len(encoded).to_bytes(8, "little"))
                    digest.update(encoded)
            self._fingerprint = digest.hexdigest()[:32]
        return self._fingerprint


def _rebuild_corpus(source: str, fingerprint: str, rows: list[tuple[str, str, str, dict]]) -> Corpus:
    corpus = Corpus((Document(*row) for row in rows), source)
    corpus._fingerprint = fingerprint
    return corpus


_LOADED: dict[tuple[str, int, int], Corpus] = {}
_LOADED_LOCK = threading.Lock()


def load_corpus(source: Corpus | str | os.PathLike[str] | Iterable[Mapping[str, Any] | Document]) -> Corpus:
    """A :class:`Corpus` from a JSONL path, a list of dicts or documents, or a corpus.

    Files are read once per process (keyed by path, size and modification time), so many
    env instances over the same file share one corpus.

    Raises:
        CorpusError: For an unreadable file, a broken line or an empty corpus.
        TypeError: For another kind of source.
    """
    if isinstance(source, Corpus):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).resolve()
        try:
            stat = path.stat()
        except OSError as exc:
            raise CorpusError(f"corpus: cannot read {source}: {exc.strerror or exc}") from None
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        with _LOADED_LOCK:
            found = _LOADED.get(key)
        if found is None:
            found = Corpus.from_jsonl(path)
            with _LOADED_LOCK:
                if len(_LOADED) >= 16:
                    _LOADED.clear()
                _LOADED[key] = found
        return found
    if isinstance(source, (bytes, Mapping)) or not isinstance(source, Iterable):
        raise TypeError(f"corpus: expected a JSONL path, a list of documents or a Corpus, got {type(source).__name__}")
    items = list(source)
    docs = [item if isinstance(item, Document) else _document(item, f"corpus[{i}]") for i, item in enumerate(items)]
    return Corpus(docs)
