"""Utilities: the conformance checker for environment authors, and the package's concurrency plumbing.

* :func:`~agent_gym.utils.env_checker.check_agent_env`: run every check on an env or
  a registered id (Gymnasium's ``check_env`` and what trainers and rollouts rely on);
  ``agent-gym check ID`` runs it from the command line.
* :mod:`~agent_gym.utils.runtime`: event loops on threads, daemon worker pools, calls that
  give up after a timeout, coroutines run from synchronous code.

Names are imported on first use, so ``agent_gym.utils.runtime`` does not import the checker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["CheckResult", "EnvCheckReport", "check_agent_env"]

_LAZY = {name: "agent_gym.utils.env_checker" for name in __all__}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from agent_gym.utils.env_checker import CheckResult, EnvCheckReport, check_agent_env
