"""``agent-gym serve-retriever``: serve a corpus index in the Search-R1 ``/retrieve`` protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["MAX_BODY_BYTES", "TOKEN_ENV", "add_parser", "build_app", "retriever_error", "run"]

TOKEN_ENV = "AGENT_GYM_RETRIEVER_TOKEN"
"""Environment variable read for the server's token when ``--token`` is not given."""

MAX_BODY_BYTES = 2**20
"""Default cap of a request body (searching is done on the event loop for fast indexes: keep requests small)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve-retriever`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "serve-retriever",
        help="serve a BM25 / dense / hybrid index over HTTP (Search-R1 /retrieve protocol)",
        description="Serve agent_gym's index of a corpus at POST /retrieve ({\"queries\", \"topk\", "
        "\"return_scores\"}), so that many rollout processes share one index: "
        "gym.make('agent_gym/RAG-v0', retriever='http://HOST:PORT/retrieve'). Without --corpus it "
        "serves the corpus shipped with RAG-v0.",
    )
    parser.add_argument("--corpus", default=None, help="JSONL corpus ({id, title, text} per line)")
    parser.add_argument("--retriever", choices=("bm25", "dense", "hybrid"), default="bm25")
    parser.add_argument("--model", default=None, help="sentence-transformers model name or path (dense, hybrid)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=256, help="most queries searched in one batch")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help=f"every route but /health needs 'Authorization: Bearer TOKEN' (default ${TOKEN_ENV}; "
                             "none: no token)")
    parser.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20, metavar="MB",
                        help=f"largest request body in MiB (default {MAX_BODY_BYTES / 2**20:g})")
    parser.add_argument("--log-level", default="warning")
    parser.set_defaults(func=run)
    return parser


def retriever_error(scope: Any, status: int, message: str) -> tuple[bytes, str]:
    """The retrieval server's error body (``{"error": {"message", "type", "code"}}``)."""
    import json

    kind = {401: "AuthenticationError", 413: "RequestTooLargeError"}.get(status, "BadRequestError")
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode(), "application/json"


def build_app(retriever: Any, corpus: Any, *, max_batch: int, token: str | None, max_body_bytes: int) -> Any:
    """The retrieval server's ASGI app behind its body cap and, with a token, the token check."""
    from agent_gym.envs.rag.server import create_app
    from agent_gym.serving.auth import TokenGuard
    from agent_gym.serving.limits import BodyLimit

    app: Any = BodyLimit(create_app(retriever, corpus, max_batch=max_batch), max_body_bytes, error=retriever_error)
    if token is not None:
        app = TokenGuard(app, token, open_paths=("/health",), error=retriever_error)
    return app


def run(args: argparse.Namespace) -> int:
    """Build (or load from the cache) the index and serve it until SIGINT/SIGTERM; returns the exit code."""
    from agent_gym.envs.rag.corpus import load_corpus
    from agent_gym.envs.rag.env import make_retriever
    from agent_gym.envs.rag.tasks import builtin_corpus_path
    from agent_gym.errors import CorpusError, MissingExtraError
    from agent_gym.serving.auth import resolve_token
    from agent_gym.serving.runner import run_server

    try:
        token = resolve_token(args.token, TOKEN_ENV)
        corpus = load_corpus(args.corpus or builtin_corpus_path())
        options: dict[str, Any] = {}
        if args.model:
            options = {"model": args.model} if args.retriever == "dense" else {"dense": {"model": args.model}}
            if args.retriever == "bm25":
                options = {}
        retriever = make_retriever(args.retriever, corpus, options)
    except (CorpusError, MissingExtraError, ValueError) as exc:
        print(f"agent-gym serve-retriever: {exc}", file=sys.stderr)
        return 2
    app = build_app(retriever, corpus, max_batch=args.max_batch, token=token.token,
                    max_body_bytes=int(args.max_body_mb * 2**20))
    return run_server(app, host=args.host, port=args.port,
                      name=f"agent-gym serve-retriever: {len(corpus)} documents ({args.retriever}), POST /retrieve",
                      auth=token.describe(), authenticated=token.token is not None, log_level=args.log_level)
