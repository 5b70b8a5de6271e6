"""``SandboxedEnv``: the base of the envs whose episodes run in a sandbox (Terminal-v0, SWE-v0).

Each episode gets a fresh sandbox (:meth:`SandboxedEnv.open_sandbox`); the model works in it with
a ``bash`` tool (a persistent shell) and ends the episode with ``submit()``; the subclass grades
the sandbox's state in :meth:`~agent_gym.env.core.AgentEnv.grade_episode`. The sandbox is closed when
the episode is released, and a pickled copy holds no sandbox (processes cannot be copied).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.env.core import AgentEnv
from agent_gym.sandbox import SandboxLimits
from agent_gym.tools import Tool, as_tool
from agent_gym.types import EpisodeStatus

__all__ = ["SandboxedEnv"]


class SandboxedEnv(AgentEnv, abc.ABC):
    """An :class:`~agent_gym.env.core.AgentEnv` whose episodes run in a sandbox, with ``bash`` and ``submit`` tools.

    Subclasses set ``command_timeout`` (seconds per ``bash`` call) and ``limits`` (the sandbox's
    :class:`~agent_gym.sandbox.SandboxLimits`) in ``__init__`` and implement :meth:`open_sandbox`;
    they may add tools (:meth:`sandbox_tools`), cap a command's time (:meth:`command_time_limit`),
    name more attributes bound to the sandbox (:attr:`episode_handles`) and word the tools for
    the model (:attr:`bash_description`, :attr:`submit_description`). Grading stays theirs
    (:meth:`~agent_gym.env.core.AgentEnv.grade_episode`).

    Episodes: ``reset`` opens the sandbox (:meth:`episode_tools`); ``submit()`` ends the episode
    (ENV_DONE, ``end_reason`` ``"submit"``; the calls after it in the same message are refused), after
    which ``bash`` runs nothing; the next ``reset`` or ``close()`` closes the sandbox
    (:meth:`release_episode`). A copy made with :mod:`pickle` has no sandbox until its next ``reset``.
    """

    sandbox: Any = None
    """The current episode's sandbox (None before the first reset, after ``close()`` and in a copy)."""

    submitted: bool = False
    """True once the episode's work was submitted (``submit()``, or grading began): ``bash`` then runs nothing."""

    command_timeout: float
    """Seconds a ``bash`` call may take (see :meth:`command_time_limit`)."""

    limits: SandboxLimits
    """Limits of the episode's sandbox; a tool's output is cut at ``limits.output_bytes`` (plus room for notes)."""

    episode_handles: ClassVar[tuple[str, ...]] = ("sandbox",)
    """Attributes that hold the episode's sandbox or objects bound to it: set to None when the episode
    is released and left out of a pickled copy."""

    bash_description: ClassVar[str] = ("Run a command in the persistent bash shell of the sandbox (it starts in the "
                                       "task's working directory).\n\nReturns: The output (stdout and stderr) and "
                                       "the exit code.")
    """What the model is told the ``bash`` tool does."""

    submit_description: ClassVar[str] = ("Submit the current state of the sandbox for grading; this ends the "
                                         "episode.\n\nReturns: A confirmation.")
    """What the model is told the ``submit`` tool does."""

    # ------------------------------------------------------------------ hooks

    @abc.abstractmethod
    def open_sandbox(self, task: Mapping[str, Any]) -> Any:
        """A new sandbox for an episode on ``task``, the task laid out in it (closed again if that fails).

        Args:
            task: The validated task of the new episode.

        Raises:
            SandboxError: When the sandbox cannot be set up.
        """

    def sandbox_tools(self) -> Sequence[Tool | Callable[..., Any]]:
        """The episode's tools, once :attr:`sandbox` is open: by default ``bash`` and ``submit``."""
        return [self.bash_tool(), self.submit_tool()]

    def command_time_limit(self) -> float:
        """Seconds the next ``bash`` call may take: ``command_timeout`` by default."""
        return self.command_timeout

    # ------------------------------------------------------------------ episodes

    def episode_tools(self, task: dict[str, Any]) -> Sequence[Tool | Callable[..., Any]] | None:
        """Open the episode's sandbox (:meth:`open_sandbox`) and return :meth:`sandbox_tools`."""
        self.submitted = False
        self.sandbox = self.open_sandbox(task)
        return self.sandbox_tools()

    def release_episode(self) -> None:
        """Close the episode's sandbox (every process killed, every file dropped); safe twice."""
        sandbox = self.sandbox
        for name in self.episode_handles:
            setattr(self, name, None)
        if sandbox is not None:
            sandbox.close()

    @property
    def tool_output_limit(self) -> int:
        """Characters of a sandbox tool's output the model sees: the sandbox's output limit plus room for notes."""
        return self.limits.output_bytes + 1000

    def bash_tool(self) -> Tool:
        """:meth:`bash` as a tool (its own timeout runs in the sandbox, so the tool layer adds none)."""
        return as_tool(self.bash, time_limit=None, max_output_chars=self.tool_output_limit,
                       description=self.bash_description)

    def submit_tool(self) -> Tool:
        """:meth:`submit` as a tool."""
        return as_tool(self.submit, time_limit=None, max_output_chars=self.tool_output_limit,
                       description=self.submit_description)

    def bash(self, command: str) -> str:
        """Run a command in the persistent bash shell of the sandbox.

        Args:
            command: The shell command(s) to run; multi-line scripts and heredocs are fine.

        Returns:
            The output (stdout and stderr) and the exit code.
        """
        if self.sandbox is None:
            return "[no sandbox: this environment was copied or closed; call reset()]"
        if self.submitted:
            return "[the work was already submitted]"
        result = self.sandbox.run(command, timeout=self.command_time_limit())
        return result.transcript()

    def submit(self) -> str:
        """Submit the work for grading; this ends the episode (ENV_DONE, ``end_reason`` ``"submit"``).

        Returns:
            A confirmation.
        """
        self.submitted = True
        if self.episode_running:
            self.end_episode(EpisodeStatus.ENV_DONE, "submit")
        return "Submitted; the tests run now."

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self.episode_handles:
            state[name] = None  # processes cannot be copied; a copy needs a reset
        return state
