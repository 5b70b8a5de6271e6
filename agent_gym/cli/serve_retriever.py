"""``agent-gym serve-retriever``: serve a corpus index in the Search-R1 ``/retrieve`` protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run"]


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
    parser.add_argument("--log-level", default="warning")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build (or load from the cache) the index and serve it until interrupted; returns the exit code."""
    from agent_gym.envs.rag.corpus import CorpusError, load_corpus
    from agent_gym.envs.rag.env import make_retriever
    from agent_gym.envs.rag.server import serve
    from agent_gym.envs.rag.tasks import builtin_corpus_path
    from agent_gym.errors import MissingExtraError

    try:
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
    print(f"serving {len(corpus)} documents ({args.retriever}) at http://{args.host}:{args.port}/retrieve",
          flush=True)
    serve(retriever, corpus, host=args.host, port=args.port, max_batch=args.max_batch, log_level=args.log_level)
    return 0
