"""Utilities for environment authors: the conformance checker.

* :func:`~agent_gym.utils.env_checker.check_agent_env`: run every check on an env or
  a registered id (Gymnasium's ``check_env`` and what trainers and rollouts rely on);
  ``agent-gym check ID`` runs it from the command line.
"""

from __future__ import annotations

from agent_gym.utils.env_checker import CheckResult, EnvCheckReport, check_agent_env

__all__ = ["CheckResult", "EnvCheckReport", "check_agent_env"]
