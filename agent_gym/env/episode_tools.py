"""The episode tool-set API of :class:`~agent_gym.env.core.AgentEnv`: schemas, tools by name, replacing them.

:class:`EpisodeToolsMixin` gives the env these methods over its :class:`~agent_gym.env.tools.ToolBox`
(the env's own tools, then each episode's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from agent_gym.env.tools import ToolBox
from agent_gym.tools import Tool

__all__ = ["EpisodeToolsMixin"]


class EpisodeToolsMixin:
    """Tool-set methods of an env holding a ``ToolBox`` (``_toolbox``) and its current task (``_task``)."""

    _toolbox: ToolBox
    _task: dict[str, Any] | None
    tools_in_prompt: bool
    system_prompt: str
    _prompt: Callable[[], str]

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """Fresh copies of the OpenAI function schemas of the current episode's tools.

        Before the first ``reset`` (and for envs without :meth:`episode_tools`) these are the
        schemas of the env's tools.
        """
        return self._toolbox.schemas()

    @property
    def episode_tools_by_name(self) -> Mapping[str, Tool]:
        """The current episode's tools by name (read-only view; the env's tools before ``reset``)."""
        return MappingProxyType(self._toolbox.current)

    def set_episode_tools(self, tools: Sequence[Tool | Callable[..., Any]]) -> None:
        """Replace the tools of the running episode (e.g. a turn that introduces new tools).

        The new tools are converted like constructor tools and take effect for the next tool
        call. The info of the step during which this is called carries ``info["tools"]``, the
        new full list of schemas (``[]`` when ``tools_in_prompt``: the system message already
        sent is not rewritten, so describe new tools in the message that introduces them, e.g.
        with :func:`~agent_gym.tools.describe_tools`). A ``step`` override that calls this after
        ``super().step()`` returned passes its info to :meth:`attach_tools_info`.

        Args:
            tools: The episode's tools from now on (tools or callables).

        Raises:
            RuntimeError: Before ``reset`` (use :meth:`episode_tools` for an episode's first tools).
            TypeError, ValueError: For tools that cannot be converted or repeated names.
        """
        if self._task is None:
            raise RuntimeError("set_episode_tools() needs an episode; call env.reset() first")
        self._toolbox.use(self._toolbox.convert(tools, "tools"), changed=True)

    def add_env_tools(self, tools: Sequence[Tool | Callable[..., Any]]) -> None:
        """Add tools to the env's own tools (every episode's, unless :meth:`episode_tools` gives others).

        They take effect at the next ``reset``; with ``tools_in_prompt`` the system message
        describes them from then on.

        Raises:
            TypeError, ValueError: For tools that cannot be converted or names already taken.
        """
        self._toolbox.add_own(self._toolbox.convert(tools, "tools"))
        self.system_prompt = self._prompt()

    def attach_tools_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Put ``info["tools"]`` into ``info`` if :meth:`set_episode_tools` ran since the last info had it.

        ``step`` does this itself; returns ``info``.
        """
        if self._toolbox.take_change():
            info["tools"] = [] if self.tools_in_prompt else self._toolbox.schemas()
        return info
