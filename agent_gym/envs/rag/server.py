"""A retrieval server in the Search-R1 ``/retrieve`` protocol over agent_gym's own indexes.

Many rollout processes share one index through it instead of each loading its own
(``agent-gym serve-retriever --corpus PATH --retriever bm25``). Endpoints:

* ``POST /retrieve`` ``{"queries": [...], "topk": k, "return_scores": true}`` ->
  ``{"result": [[{"document": {"id", "title", "text", "contents"}, "score"}, ...], ...]}``
  (without ``return_scores``, each entry is the document itself, as in Search-R1).
* ``POST /documents`` ``{"ids": [...]}`` -> ``{"documents": [document | null, ...]}``.
* ``GET /health`` -> ``{"status": "ok", "documents": N, "retriever": kind}``.

Concurrent requests are batched: the queries of every request that arrived while the
previous batch ran go together into the next ``search_batch`` call (no added wait when
the server is idle). A batch expected to be quick (under ``INLINE_SECONDS`` at the last
batch's time per query, as BM25 batches are) runs directly on the event loop, which saves the
hand-over to a worker thread and back; slower batches (dense encoders) run on a worker
thread so that the server keeps accepting requests meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

from agent_gym.envs.rag.corpus import Corpus, Document
from agent_gym.envs.rag.retrieval import Hit, LocalRetriever

__all__ = ["INLINE_SECONDS", "MAX_QUERIES_PER_REQUEST", "MAX_TOPK", "RetrievalApp", "create_app", "serve"]

MAX_QUERIES_PER_REQUEST = 4096
"""Queries accepted in one request."""

MAX_TOPK = 1000
"""Largest ``topk`` accepted."""

INLINE_SECONDS = 0.002
"""A batch expected to take less than this many seconds runs on the event loop (else on a thread)."""


def _document(doc: Document) -> dict[str, Any]:
    return {"id": doc.id, "title": doc.title, "text": doc.text, "contents": doc.contents}


class _Batcher:
    """Collects queries from concurrent requests and runs them in batches on one thread."""

    def __init__(self, retriever: Any, max_batch: int, *, snippets: bool = True) -> None:
        self.retriever = retriever
        self.max_batch = max_batch
        self.snippets = snippets  # False: the replies are built from the corpus, so skip cutting snippets
        self.queue: asyncio.Queue[tuple[list[str], int, asyncio.Future[list[list[Hit]]]]] = asyncio.Queue()
        self.batches = 0
        self.queries = 0
        self.per_query = float("inf")  # seconds per query in the last batch; the first batch runs on a thread

    async def submit(self, queries: list[str], k: int) -> list[list[Hit]]:
        future: asyncio.Future[list[list[Hit]]] = asyncio.get_running_loop().create_future()
        await self.queue.put((queries, k, future))
        return await future

    def _search(self, queries: list[str], k: int) -> list[list[Hit]]:
        results: list[list[Hit] | None] = [None] * len(queries)
        live = [i for i, q in enumerate(queries) if q.strip()]
        if live:
            live_queries = [queries[i] for i in live]
            if self.snippets:
                found = self.retriever.search_batch(live_queries, k)
            else:
                found = self.retriever.search_batch(live_queries, k, snippets=False)
            for i, hits in zip(live, found, strict=True):
                results[i] = hits
        return [r if r is not None else [] for r in results]

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            size = len(batch[0][0])
            while size < self.max_batch and not self.queue.empty():
                item = self.queue.get_nowait()
                batch.append(item)
                size += len(item[0])
            queries = [q for item in batch for q in item[0]]
            k = max(item[1] for item in batch)
            self.batches += 1
            self.queries += len(queries)
            began = time.perf_counter()
            try:
                if self.per_query * len(queries) < INLINE_SECONDS:
                    results = self._search(queries, k)
                else:
                    results = await loop.run_in_executor(None, self._search, queries, k)
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self.per_query = (time.perf_counter() - began) / max(len(queries), 1)
            start = 0
            for item_queries, item_k, future in batch:
                part = [hits[:item_k] for hits in results[start:start + len(item_queries)]]
                start += len(item_queries)
                if not future.done():
                    future.set_result(part)


class RetrievalApp:
    """The server as a plain ASGI application (no framework: a request costs a few tens of microseconds).

    Args:
        retriever: Any object with ``search_batch(queries, k)`` and ``document(doc_id)``.
        corpus: The documents (default: ``retriever.corpus`` when it has one).
        max_batch: Most queries run in one ``search_batch`` call.
    """

    def __init__(self, retriever: Any, corpus: Corpus | None = None, *, max_batch: int = 256) -> None:
        self.retriever = retriever
        self.corpus = corpus if corpus is not None else getattr(retriever, "corpus", None)
        own_corpus = isinstance(retriever, LocalRetriever) and self.corpus is retriever.corpus
        self.batcher = _Batcher(retriever, max_batch, snippets=not own_corpus)
        self._task: asyncio.Task | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Serve one ASGI connection scope (HTTP request or lifespan)."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        if self._task is None:  # servers that skip the lifespan protocol
            self._task = asyncio.create_task(self.batcher.run())
        if path == "/health" and method == "GET":
            status, body = 200, self.health()
        elif path in ("/retrieve", "/documents") and method == "POST":
            try:
                payload = orjson.loads(b"".join(chunks))
            except orjson.JSONDecodeError as exc:
                status, body = _bad(f"expected a JSON body, got invalid JSON ({exc})")
            else:
                handler = self.retrieve if path == "/retrieve" else self.documents
                status, body = await handler(payload)
        elif path in ("/health", "/retrieve", "/documents"):
            status, body = 405, {"error": {"message": f"method {method} not allowed on {path}", "code": 405}}
        else:
            status, body = 404, {"error": {"message": f"no route {path}; use POST /retrieve", "code": 404}}
        data = orjson.dumps(body)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.create_task(self.batcher.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._task is not None:
                    self._task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._task
                await send({"type": "lifespan.shutdown.complete"})
                return

    def health(self) -> dict[str, Any]:
        """The ``/health`` body."""
        return {"status": "ok", "documents": None if self.corpus is None else len(self.corpus),
                "retriever": getattr(self.retriever, "kind", type(self.retriever).__name__),
                "batches": self.batcher.batches, "queries": self.batcher.queries}

    def _lookup(self, doc_id: str) -> Document | None:
        return self.corpus.get(doc_id) if self.corpus is not None else self.retriever.document(doc_id)

    async def retrieve(self, body: Any) -> tuple[int, Any]:
        """Answer a ``/retrieve`` request body: ``(status, reply)``."""
        if not isinstance(body, dict):
            return _bad(f"expected a JSON object with 'queries' and 'topk', got {type(body).__name__}")
        queries = body.get("queries", body.get("query"))
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return _bad("queries: expected a list of strings")
        if len(queries) > MAX_QUERIES_PER_REQUEST:
            return _bad(f"queries: expected at most {MAX_QUERIES_PER_REQUEST} per request, got {len(queries)}")
        k = body.get("topk", 3)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOPK:
            return _bad(f"topk: expected an int from 1 to {MAX_TOPK}, got {k!r}")
        scores = bool(body.get("return_scores", False))
        results = await self.batcher.submit(queries, k) if queries else []
        out = []
        for hits in results:
            ranked = []
            for hit in hits:
                doc = self._lookup(hit.doc_id)
                item = _document(doc) if doc is not None else {"id": hit.doc_id, "title": hit.title,
                                                               "text": hit.snippet, "contents": hit.snippet}
                ranked.append({"document": item, "score": hit.score} if scores else item)
            out.append(ranked)
        return 200, {"result": out}

    async def documents(self, body: Any) -> tuple[int, Any]:
        """Answer a ``/documents`` request body: ``(status, reply)``."""
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_QUERIES_PER_REQUEST:
            return _bad(f"ids: expected a list of at most {MAX_QUERIES_PER_REQUEST} document ids")
        found = [self._lookup(i) for i in ids]
        return 200, {"documents": [None if d is None else _document(d) for d in found]}


def _bad(message: str) -> tuple[int, Any]:
    return 400, {"error": {"message": message, "type": "BadRequestError", "code": 400}}


def create_app(retriever: Any, corpus: Corpus | None = None, *, max_batch: int = 256) -> RetrievalApp:
    """The ASGI application serving ``retriever`` (see :class:`RetrievalApp`)."""
    return RetrievalApp(retriever, corpus, max_batch=max_batch)


def serve(retriever: Any, corpus: Corpus | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          max_batch: int = 256, log_level: str = "warning") -> None:
    """Run the server with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(retriever, corpus, max_batch=max_batch), host=host, port=port, log_level=log_level,
                access_log=False)
