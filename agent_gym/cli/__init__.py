"""The ``agent-gym`` command line: ``list``, ``check``, ``play``, ``serve``, ``rollout``, ``eval`` and more.

Each subcommand lives in its own module exposing ``add_parser(subparsers)`` and
``run(args) -> int``; modules are imported only when their command runs, so
``agent-gym list`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

SUBCOMMANDS: dict[str, str] = {
    "list": "agent_gym.cli.list_envs",
    "check": "agent_gym.cli.check",
    "play": "agent_gym.cli.play",
    "serve": "agent_gym.cli.serve",
    "rollout": "agent_gym.cli.rollout",
    "serve-retriever": "agent_gym.cli.serve_retriever",
    "report": "agent_gym.cli.report",
    "gateway": "agent_gym.cli.gateway",
    "serve-env": "agent_gym.cli.serve_env",
    "eval": "agent_gym.cli.eval",
    "serve-reward": "agent_gym.cli.serve_reward",
    "judge-check": "agent_gym.cli.judge_check",
}
"""Subcommand name -> module implementing it."""


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="agent-gym",
        description="Gymnasium environments for multi-turn LLM agents.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns:
        The process exit code.
    """
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    module = importlib.import_module(SUBCOMMANDS[args.command])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
