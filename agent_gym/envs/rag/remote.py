r"""A client of retrieval servers that speak the Search-R1 ``/retrieve`` protocol.

The protocol (used by Search-R1, SkyRL and rLLM retrieval servers, and served by
``agent-gym serve-retriever``)::

    POST /retrieve  {"queries": ["..."], "topk": 5, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 1.2}, ...]]}

:class:`RemoteRetriever` keeps a pooled HTTP connection per process, retries refused
connections, timeouts and 5xx answers with a short backoff, and then raises
:class:`RetrieverError` naming the server. Full documents for ``open`` come from the
documents seen in results, else from ``POST /documents`` (an agent_gym extension:
``{"ids": [...]}`` -> ``{"documents": [{"id", "title", "text"} | null, ...]}``).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.checks import check_float, check_int, check_timeout
from agent_gym.envs.rag.corpus import Document
from agent_gym.envs.rag.retrieval import Hit, make_snippet
from agent_gym.errors import AgentGymError, MissingExtraError

__all__ = ["RemoteRetriever", "RetrieverError", "parse_document"]


class RetrieverError(AgentGymError):
    """A retrieval server could not be reached or gave an unusable answer.

    Raised out of ``env.step`` (the rollout records the episode as ENV_ERROR with this
    message): a failing server is not the model's fault.

    Attributes:
        server: The server's URL.
    """

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


def parse_document(raw: Mapping[str, Any]) -> Document:
    """A :class:`Document` from a result's ``document`` object (``contents`` or ``title``/``text``)."""
    doc_id = str(raw.get("id", raw.get("doc_id", "")))
    if "text" in raw:
        return Document(doc_id, str(raw.get("title", "")), str(raw["text"]))
    contents = str(raw.get("contents", ""))
    first, sep, rest = contents.partition("\n")
    if sep and first.startswith('"') and first.endswith('"') and len(first) >= 2:
        return Document(doc_id, first[1:-1], rest)
    return Document(doc_id, str(raw.get("title", "")), contents)


class RemoteRetriever:
    """Search through a retrieval server (``retriever="http://host:port/retrieve"`` in the env).

    Args:
        url: The server's ``/retrieve`` URL.
        timeout: Seconds for one request (connect and read).
        retries: Extra attempts after a refused connection, a timeout or a 5xx answer.
        backoff: Seconds before the first retry (doubles each time).
        max_connections: Size of the per-process connection pool.
        snippet_chars: Characters of text shown per hit.

    Raises:
        ValueError: For a URL that is not http(s).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 2, backoff: float = 0.2,
                 max_connections: int = 64, snippet_chars: int = 200) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url: expected an http(s) URL of a /retrieve endpoint, got {url!r}")
        self.url = url
        self.timeout = check_timeout("timeout", timeout, allow_none=False)
        self.retries = check_int("retries", retries, low=0)
        self.backoff = check_float("backoff", backoff, low=0.0)
        self.max_connections = check_int("max_connections", max_connections, low=1)
        self.snippet_chars = check_int("snippet_chars", snippet_chars, low=20)
        base = url.rsplit("/retrieve", 1)[0] if url.rstrip("/").endswith("/retrieve") else url.rstrip("/")
        self.documents_url = base + "/documents"
        self._client: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[str, Document] = collections.OrderedDict()
        self._documents_endpoint = True

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments besides the URL."""
        return {"timeout": self.timeout, "retries": self.retries, "backoff": self.backoff,
                "max_connections": self.max_connections, "snippet_chars": self.snippet_chars}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.url, self.settings))

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r})"

    def _http(self) -> Any:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                httpx = _import_httpx()
                limits = httpx.Limits(max_connections=self.max_connections,
                                      max_keepalive_connections=self.max_connections)
                self._client = httpx.Client(timeout=self.timeout, limits=limits)
                self._pid = os.getpid()
            return self._client

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        httpx = _import_httpx()

        delay = self.backoff
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(delay)
                delay *= 2
            try:
                response = self._http().post(url, json=payload)
            except httpx.TimeoutException:
                last = f"no answer within {self.timeout:g} s"
                continue
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code == 404 and url == self.documents_url:
                return None
            if response.status_code >= 400:
                raise RetrieverError(f"retrieval server {url} rejected the request with HTTP "
                                     f"{response.status_code}: {response.text[:200]}", server=url)
            try:
                return response.json()
            except ValueError:
                raise RetrieverError(f"retrieval server {url} answered with a body that is not JSON: "
                                     f"{response.text[:200]!r}", server=url) from None
        raise RetrieverError(f"retrieval server {url} is unavailable after {self.retries + 1} attempts "
                             f"({last})", server=url)

    def _remember(self, doc: Document) -> None:
        with self._lock:
            self._seen[doc.id] = doc
            self._seen.move_to_end(doc.id)
            while len(self._seen) > 20000:
                self._seen.popitem(last=False)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The server's best ``k`` hits for ``query``.

        Raises:
            RetrieverError: If the server is down or answers wrongly (after retries).
        """
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        """One request for several queries.

        Raises:
            RetrieverError: If the server is down or answers wrongly (after retries).
        """
        check_int("k", k, low=1)
        queries = [str(q) for q in queries]
        body = self._post(self.url, {"queries": queries, "topk": k, "return_scores": True})
        results = body.get("result") if isinstance(body, Mapping) else None
        if not isinstance(results, list) or len(results) != len(queries):
            raise RetrieverError(f"retrieval server {self.url} answered without a 'result' list of "
                                 f"{len(queries)} entries: {str(body)[:200]}", server=self.url)
        out = []
        for ranked in results:
            hits = []
            for item in ranked if isinstance(ranked, list) else []:
                if not isinstance(item, Mapping):
                    continue
                raw = item.get("document", item)
                if not isinstance(raw, Mapping):
                    continue
                doc = parse_document(raw)
                self._remember(doc)
                score = item.get("score", 0.0)
                hits.append(Hit(doc.id, doc.title, float(score) if isinstance(score, (int, float)) else 0.0,
                                make_snippet(doc.text, self.snippet_chars)))
            out.append(hits[:k])
        return out

    def document(self, doc_id: str) -> Document | None:
        """The document with this id: seen in a result, else asked from ``/documents``; None if unknown.

        Raises:
            RetrieverError: If the server is down.
        """
        with self._lock:
            found = self._seen.get(doc_id)
        if found is not None or not self._documents_endpoint:
            return found
        body = self._post(self.documents_url, {"ids": [doc_id]})
        if body is None:
            self._documents_endpoint = False
            return None
        docs = body.get("documents") if isinstance(body, Mapping) else None
        if not isinstance(docs, list) or not docs or not isinstance(docs[0], Mapping):
            return None
        doc = parse_document(docs[0])
        self._remember(doc)
        return doc

    def close(self) -> None:
        """Close the connection pool (a later call opens a new one)."""
        with self._lock:
            if self._client is not None and self._pid == os.getpid():
                self._client.close()
            self._client = None


def _rebuild(url: str, settings: dict[str, Any]) -> RemoteRetriever:
    return RemoteRetriever(url, **settings)


def _import_httpx() -> Any:
    """Import httpx (the ``rag`` extra) or raise an error naming the extra."""
    try:
        import httpx
    except ImportError as exc:
        raise MissingExtraError("httpx", "rag") from exc
    return httpx
