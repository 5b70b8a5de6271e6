"""Sandboxes where an agent's shell commands run: the protocol and its backends.

* :class:`Sandbox` / :class:`Result` / :class:`SandboxLimits`: the protocol every backend follows.
* :class:`LocalSandbox`: Linux namespaces with bubblewrap and a persistent bash session.
"""

from __future__ import annotations

from agent_gym.sandbox.base import Result, Sandbox, SandboxError, SandboxLimits, SandboxUnavailableError
from agent_gym.sandbox.local import LocalSandbox, bwrap_available

__all__ = [
    "LocalSandbox",
    "Result",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "bwrap_available",
]

