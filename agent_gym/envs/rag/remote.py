r"""A client of retrieval servers that speak the Search-R1 ``/retrieve`` protocol.

The protocol (used by Search-R1, SkyRL and rLLM retrieval servers, and served by
``agent-gym serve-retriever``)::

    POST /retrieve  {"queries": ["..."], "topk": 5, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 1.2}, ...]]}

:class:`RemoteRetriever` keeps one keep-alive connection per calling thread (standard
library ``http.client``, no extra dependency), retries refused
connections, timeouts and 5xx answers with a short backoff, and then raises
:class:`RetrieverError` naming the server. Full documents for ``open`` come from the
documents seen in results, else from ``POST /documents`` (an agent_gym extension:
``{"ids": [...]}`` -> ``{"documents": [{"id", "title", "text"} | null, ...]}``).
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.checks import check_float, check_int, check_timeout
from agent_gym.envs.rag.corpus import Document
from agent_gym.envs.rag.retrieval import Hit, make_snippet
from agent_gym.errors import RetrieverError

__all__ = ["RemoteRetriever", "parse_document"]

_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


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
        max_connections: Most connections kept open per process (one per calling thread);
            threads beyond that open a connection per request.
        snippet_chars: Characters of text shown per hit.
        token: Sent as ``Authorization: Bearer TOKEN`` (a server started with ``--token``);
            default ``$AGENT_GYM_RETRIEVER_TOKEN`` when set.

    Raises:
        ValueError: For a URL that is not http(s).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 2, backoff: float = 0.2,
                 max_connections: int = 64, snippet_chars: int = 200, token: str | None = None) -> None:
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
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"url: expected an http(s) URL of a /retrieve endpoint, got {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._documents_path = urllib.parse.urlsplit(self.documents_url).path
        self._local = threading.local()
        self._connections: list[http.client.HTTPConnection] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[str, Document] = collections.OrderedDict()
        self._documents_endpoint = True
        self.token = token if token is not None else os.environ.get("AGENT_GYM_RETRIEVER_TOKEN") or None
        self._headers = {**_HEADERS, "Authorization": f"Bearer {self.token}"} if self.token else _HEADERS

    @property
    def settings(self) -> dict[str, Any]:
        """Constructor keyword arguments besides the URL."""
        return {"timeout": self.timeout, "retries": self.retries, "backoff": self.backoff,
                "max_connections": self.max_connections, "snippet_chars": self.snippet_chars, "token": self.token}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.url, self.settings))

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r})"

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's keep-alive connection (a new one after a fork or a failure)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid() or local.conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            local.conn = cls(self._host, self._port, timeout=self.timeout)
            local.pid = os.getpid()
            with self._lock:
                if local.pid != self._pid:  # connections inherited through a fork are not ours to close
                    self._connections, self._pid = [], local.pid
                local.keep = len(self._connections) < self.max_connections
                if local.keep:
                    self._connections.append(local.conn)
        return local.conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _request(self, path: str, data: bytes) -> tuple[int, bytes]:
        """One POST on this thread's connection; a stale keep-alive connection is reopened once."""
        for fresh in (False, True):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                conn.request("POST", path, body=data, headers=self._headers)
                response = conn.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_connection()
                if reused and not fresh:  # the server closed an idle connection: try a new one at once
                    continue
                raise
            except BaseException:
                self._drop_connection()
                raise
            if response.will_close or not getattr(self._local, "keep", False):
                self._drop_connection()
            return response.status, body
        raise AssertionError("unreachable")

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        path = self._path if url == self.url else self._documents_path
        data = json.dumps(payload).encode()
        delay = self.backoff
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(delay)
                delay *= 2
            try:
                status, body = self._request(path, data)
            except TimeoutError:
                last = f"no answer within {self.timeout:g} s"
                continue
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            text = body[:200].decode("utf-8", "replace")
            if status >= 500:
                last = f"HTTP {status}: {text}"
                continue
            if status == 404 and url == self.documents_url:
                return None
            if status >= 400:
                raise RetrieverError(f"retrieval server {url} rejected the request with HTTP "
                                     f"{status}: {text}", server=url)
            try:
                return json.loads(body)
            except ValueError:
                raise RetrieverError(f"retrieval server {url} answered with a body that is not JSON: "
                                     f"{text!r}", server=url) from None
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
        """Close this process' connections (a later call opens new ones)."""
        with self._lock:
            connections = self._connections if self._pid == os.getpid() else []
            self._connections = []
        for conn in connections:
            conn.close()
        self._local = threading.local()


def _rebuild(url: str, settings: dict[str, Any]) -> RemoteRetriever:
    return RemoteRetriever(url, **settings)

