"""``agent-gym check``: run the env checker (:func:`~agent_gym.utils.env_checker.check_agent_env`) on ids.

Without ids it checks every registered agent_gym id. An id of another package is
checked too once registered: give it as ``module:Name-v0`` and Gymnasium imports
``module`` (which registers it) first. Prints every check of every id and exits
non-zero if any failed.

Example:
    agent-gym check agent_gym/ToolUse-v0 --episodes 4
    agent-gym check my_package:my_envs/MyEnv-v0 --skip oracle
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "check_id", "run"]


def check_id(env_id: str, *, episodes: int = 10, seeds: tuple[int, ...] = (0, 1, 2),
             skip: tuple[str, ...] = ()) -> tuple[bool, str]:
    """Run the env checker on one id.

    Args:
        env_id: A registered Gymnasium id, or ``module:id`` (Gymnasium imports ``module`` first).
        episodes: Episodes of sampled actions.
        seeds: Reset seeds of the seeding, pickle and oracle checks.
        skip: Names of checks not to run.

    Returns:
        ``(passed, text)``: whether every check passed, and the report (or why the env
        could not be made) as text.
    """
    from agent_gym.utils.env_checker import check_agent_env

    try:
        report = check_agent_env(env_id, episodes=episodes, seeds=seeds, skip=skip, raise_on_failure=False)
    except Exception as exc:  # the env could not be made: report it, keep checking the other ids
        return False, f"could not make {env_id}: {type(exc).__name__}: {exc}"
    return report.ok, report.format()


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``check`` subcommand."""
    from agent_gym.utils.env_checker import CHECKS

    parser = subparsers.add_parser(
        "check",
        help="check environments with agent_gym's env checker",
        description="Check environments with agent_gym.utils.env_checker.check_agent_env: Gymnasium's check_env "
                    "(warnings as errors), docstring sections, seeded determinism, pickling, sampled and "
                    "adversarial actions, the oracle, close(). Checks: " + ", ".join(CHECKS) + ".",
    )
    parser.add_argument("ids", nargs="*", metavar="ENV_ID",
                        help="ids to check, or module:id for another package's env (default: every agent_gym id)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes of sampled actions (default 10)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="SEED",
                        help="reset seeds of the seeding, pickle and oracle checks (default 0 1 2)")
    parser.add_argument("--skip", action="append", default=[], choices=list(CHECKS), metavar="CHECK",
                        help="a check not to run (repeatable): " + ", ".join(CHECKS))
    return parser


def run(args: argparse.Namespace) -> int:
    """Check the ids; returns 0 if every check of every id passed, 1 otherwise."""
    import gymnasium as gym

    from agent_gym.cli.list_envs import registered_ids

    known = registered_ids()
    ids = list(getattr(args, "ids", None) or known)
    episodes = getattr(args, "episodes", 10)
    seeds = tuple(getattr(args, "seeds", None) or (0, 1, 2))
    skip = tuple(getattr(args, "skip", None) or ())
    failed = []
    for env_id in ids:
        if ":" not in env_id and env_id not in gym.registry:
            passed, text = False, f"unknown id; registered agent_gym ids: {', '.join(known)}"
        else:
            passed, text = check_id(env_id, episodes=episodes, seeds=seeds, skip=skip)
        print(f"{'ok  ' if passed else 'FAIL'}  {env_id}", flush=True)
        print("\n".join(f"    {line}" for line in text.splitlines()), flush=True)
        if not passed:
            failed.append(env_id)
    print(f"{len(ids) - len(failed)}/{len(ids)} envs passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed or not ids else 0
