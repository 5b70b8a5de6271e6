"""``agent-gym judge-check``: self-test an LLM judge (agreement with a rule grader, position bias, master keys)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``judge-check`` subcommand on an ``argparse`` subparsers object."""
    from agent_gym.cli.serve_reward import add_judge_arguments

    parser = subparsers.add_parser(
        "judge-check",
        help="self-test an LLM judge: agreement with an env's rule grader, position bias, master-key answers",
        description="Judge the shipped tasks of an env with the judge at JUDGE: Cohen's kappa against the env's "
        "rule grader (reference and wrong answers), the flip rate of pairwise verdicts when the answers swap "
        "places, and the pass rate of answers with no content ('', ':', 'Thought process:', the question echoed, "
        "\"I don't know\"), which must be 0. Exits 1 when a master key passed.",
    )
    parser.add_argument("judge", metavar="JUDGE", nargs="+",
                        help="the judge's server(s), HOST:PORT or URL, or 'embedded': the embedded model judged "
                        "in-process by its verdict probabilities (no server)")
    add_judge_arguments(parser)
    parser.add_argument("--env", default="agent_gym/ToolUse-v0", metavar="ID",
                        help="the env whose tasks and rule grader are used (default agent_gym/ToolUse-v0)")
    parser.add_argument("--tasks", type=int, default=20, metavar="N", help="tasks to judge (default 20)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the check; 0 when no master key passed, 1 when one did, 2 for a bad argument."""
    from agent_gym.errors import ConfigError
    from agent_gym.judges.check import format_check, judge_check
    from agent_gym.judges.specs import default_judge

    try:
        judge = default_judge(args.judge, tokenizer=args.judge_tokenizer, model=args.judge_model,
                              max_tokens=args.judge_max_tokens, timeout=args.judge_timeout,
                              max_retries=args.judge_retries)
    except (ConfigError, ValueError, TypeError, OSError) as exc:
        print(f"agent-gym judge-check: {exc}", file=sys.stderr)
        return 2
    try:
        result = judge_check(judge, args.env, tasks=args.tasks)
    except ConfigError as exc:
        print(f"agent-gym judge-check: {exc}", file=sys.stderr)
        return 2
    finally:
        judge.close()
    print(json.dumps(result, indent=2) if args.json else format_check(result))
    return 0 if result["ok"] else 1
