"""Sandboxes where an agent's shell commands run: the protocol and its backends.

* :class:`Sandbox` / :class:`Result` / :class:`SandboxLimits`: the protocol every backend follows.
* :class:`LocalSandbox`: Linux namespaces with bubblewrap and a persistent bash session.
* :class:`DockerSandbox` / :class:`DockerPool`: one container per episode (extra ``terminal``:
  ``pip install 'agent-gym[terminal]'``); the ``docker`` SDK is imported only when used.
"""

from __future__ import annotations

from typing import Any

from agent_gym.sandbox.base import Result, Sandbox, SandboxError, SandboxLimits, SandboxUnavailableError
from agent_gym.sandbox.local import LocalSandbox, bwrap_available

__all__ = [
    "DockerPool",
    "DockerSandbox",
    "LocalSandbox",
    "Result",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "bwrap_available",
]


def __getattr__(name: str) -> Any:
    if name in ("DockerSandbox", "DockerPool"):
        from agent_gym.sandbox import docker

        return getattr(docker, name)
    raise AttributeError(f"module 'agent_gym.sandbox' has no attribute {name!r}")
