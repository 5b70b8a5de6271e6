"""``agent-gym check``: run Gymnasium's ``check_env`` over every registered agent_gym id.

Warnings count as failures. Prints one line per id and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

__all__ = ["add_parser", "check_id", "run"]


def check_id(env_id: str) -> str | None:
    """Make ``env_id`` and run ``check_env`` on it with warnings as errors.

    Args:
        env_id: A registered Gymnasium id.

    Returns:
        None if the check passed, else the failure as one line.
    """
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env = gym.make(env_id)
            try:
                check_env(env.unwrapped)
            finally:
                env.close()
    except Exception as exc:  # report every failure, keep checking the other ids
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``check`` subcommand."""
    parser = subparsers.add_parser(
        "check",
        help="run gymnasium's check_env on every registered id",
        description="Run gymnasium.utils.env_checker.check_env (warnings as errors) on registered agent_gym ids.",
    )
    parser.add_argument("ids", nargs="*", metavar="ENV_ID", help="ids to check (default: every agent_gym id)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Check the ids; returns 0 if all passed, 1 otherwise."""
    from agent_gym.cli.list_envs import registered_ids

    known = registered_ids()
    ids = list(getattr(args, "ids", None) or known)
    failures = 0
    for env_id in ids:
        error = f"unknown id; registered: {', '.join(known)}" if env_id not in known else check_id(env_id)
        if error is None:
            print(f"ok    {env_id}", flush=True)
        else:
            failures += 1
            print(f"FAIL  {env_id}: {error}", flush=True)
    print(f"{len(ids) - failures}/{len(ids)} passed")
    return 1 if failures or not ids else 0
