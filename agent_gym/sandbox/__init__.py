"""Sandboxes where an agent's shell commands run: the protocol and its backends.

* :class:`Sandbox` / :class:`Result` / :class:`SandboxLimits`: the protocol every backend follows.
* :class:`LocalSandbox`: Linux namespaces with bubblewrap and a persistent bash session.
* :class:`DockerSandbox` / :class:`DockerPool`: one container per sandbox (``pip install
  'agent-gym[terminal]'``; the Docker SDK is imported only when a container is needed).
"""

from __future__ import annotations

from agent_gym.sandbox.base import Result, Sandbox, SandboxLimits
from agent_gym.sandbox.docker import DockerSandbox, docker_unavailable_reason
from agent_gym.sandbox.docker_pool import DockerPool
from agent_gym.sandbox.local import LocalSandbox, bwrap_available

__all__ = [
    "DockerPool",
    "DockerSandbox",
    "LocalSandbox",
    "Result",
    "Sandbox",
    "SandboxLimits",
    "bwrap_available",
    "docker_unavailable_reason",
]

