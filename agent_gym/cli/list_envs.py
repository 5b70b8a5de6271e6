"""``agent-gym list``: the registered agent_gym environment ids, one line each."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "describe_env", "registered_ids", "run"]

_PREFIX = "agent_gym/"


def registered_ids() -> list[str]:
    """Every Gymnasium id registered by agent_gym, sorted."""
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the ids)

    return sorted(env_id for env_id in gym.registry if env_id.startswith(_PREFIX))


def describe_env(env_id: str) -> str:
    """One line describing ``env_id`` (from ``ENV_INFOS``, else the class docstring)."""
    import gymnasium as gym

    from agent_gym.envs import ENV_INFOS

    for info in ENV_INFOS:
        if info.id == env_id:
            return info.description
    spec = gym.spec(env_id)
    entry: Any = spec.entry_point
    if isinstance(entry, str):
        return f"(entry point {entry})"
    doc = (getattr(entry, "__doc__", "") or "").strip()
    return doc.splitlines()[0] if doc else ""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``list`` subcommand."""
    parser = subparsers.add_parser("list", help="list the registered environment ids",
                                   description="List the registered agent_gym environment ids.")
    return parser


def run(args: argparse.Namespace) -> int:
    """Print each id with its description; returns 0."""
    ids = registered_ids()
    width = max((len(i) for i in ids), default=0)
    for env_id in ids:
        print(f"{env_id:<{width}}  {describe_env(env_id)}")
    return 0
