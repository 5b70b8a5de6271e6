"""``agent-gym serve``: run the reference vLLM-compatible server."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on an ``argparse`` subparsers object."""
    from agent_gym.reference_server.main import add_server_arguments

    parser = subparsers.add_parser(
        "serve",
        help="run the reference OpenAI-compatible server (vLLM dialect) on transformers",
        description="Reference OpenAI-compatible server (vLLM dialect) on transformers, for CPU "
        "development and tests. Without --model it serves agent_gym's built-in tiny model. Logprobs are raw "
        "(the model's log-softmax before temperature and truncation) unless --logprobs-mode processed_logprobs, "
        "as in vLLM.",
    )
    add_server_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the server described by ``args``; returns the exit code."""
    from agent_gym.reference_server.main import serve

    return serve(args)
