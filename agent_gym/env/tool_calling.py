"""The tool side of :class:`~agent_gym.env.core.AgentEnv`.

The gate and hooks around each tool call, the loop that runs a message's calls, and the
episode's tools (schemas, replacing and adding tools).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agent_gym.env.tools import ToolCallLog, call_key
from agent_gym.errors import ToolErrorKind
from agent_gym.parsers import ParsedResponse, ToolCall
from agent_gym.parsers.instructions import no_action_error, nudge_text
from agent_gym.tools import Tool, ToolResult, skipped_call_result, unknown_tool_result

if TYPE_CHECKING:
    from agent_gym.env.rewards import RewardConfig
    from agent_gym.env.tools import ToolBox
    from agent_gym.parsers import ToolCallParser
    from agent_gym.types import EpisodeStatus

__all__ = ["ToolCalling"]


class ToolCalling:
    """Tool calls and the episode's tools: a part of :class:`~agent_gym.env.core.AgentEnv`.

    ``AgentEnv`` sets the attributes and defines the methods declared for type checkers below.
    """

    if TYPE_CHECKING:
        _toolbox: ToolBox
        _task: dict[str, Any] | None
        _ending: tuple[EpisodeStatus, str] | None
        _seen_calls: set[str]
        parser: ToolCallParser
        rewards: RewardConfig
        max_tool_calls_per_step: int
        tools_in_prompt: bool
        system_prompt: str

        def add_message(self, role: str, content: str) -> None:  # noqa: D102
            ...

        def _prompt(self) -> str:
            ...

        def _end_from_scope(self, status: EpisodeStatus, reason: str) -> None:
            ...

    # ------------------------------------------------------------------ hooks: tool calls

    def gate_tool_call(self, call: ToolCall, index: int) -> ToolResult | None:
        """Decide whether a tool call runs: None runs it, a failed ``ToolResult`` refuses it.

        A refused call is not run; its result is its observation and its error counts like a
        failed call's. The default refuses calls past ``max_tool_calls_per_step`` in the
        message and every call once :meth:`end_episode` was asked for (e.g. after a
        ``submit`` or a hand-over). Override to add limits (call ``super()`` first), e.g.
        with :func:`~agent_gym.tools.skipped_call_result`.

        Args:
            call: The parsed call.
            index: Its position among the message's calls.
        """
        if self._ending is not None:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"tool call {call.name!r} skipped: the episode "
                                                                f"ended ({self._ending[1]}) before it")
        if index >= self.max_tool_calls_per_step:
            return skipped_call_result(call.name, self.max_tool_calls_per_step)
        return None

    def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """Called after each tool call that ran (successful or not); the default does nothing.

        Count calls, notice a tool that ends the episode (then call :meth:`end_episode`), ...

        Args:
            call: The call.
            result: What the tool returned (its ``content`` is the observation).
        """

    def is_useful_call(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a successful call earns the shaping bonus: by default, not an exact repeat.

        However many calls are useful, an episode's bonuses never exceed ``rewards.bonus_cap``.
        """
        key = call_key(name, arguments)
        if key in self._seen_calls:
            return False
        self._seen_calls.add(key)
        return True

    def run_tool_calls(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """Run the tool calls of a message and record them; a message with none gets a nudge.

        Each call passes :meth:`gate_tool_call`, runs (unknown names are errors) and goes to
        :meth:`on_tool_result`; its output (or ``"Error: ..."``) becomes a ``tool`` message
        and a record in ``info["tool_calls"]``. Sets ``info["toolcall_reward"]`` to the
        message's raw shaping (``step`` then pays it from the episode's budget, see
        :class:`RewardConfig`) and, for error observations, ``info["error"]`` and
        ``info["error_kinds"]``.

        Args:
            parsed: The parsed message.
            info: The step's info.
        """
        log = ToolCallLog(info)
        for message in log.malformed(parsed.errors):
            self.add_message("tool", message)
        for index, call in enumerate(parsed.tool_calls):
            result = self.gate_tool_call(call, index)
            if result is None:
                tool = self._toolbox.current.get(call.name)
                if tool is None:
                    result = unknown_tool_result(call.name, self._toolbox.current)
                else:
                    result = tool.run(call.arguments)
                    if result.error is None and self.is_useful_call(call.name, call.arguments):
                        log.useful = True
                    self.on_tool_result(call, result)
            self.add_message("tool", log.add(call, result))
        if not parsed.tool_calls and not parsed.errors:
            log.nothing_to_do(no_action_error(self.parser))
            self.add_message("user", nudge_text(self.parser))
        log.settle(self.rewards)

    # ------------------------------------------------------------------ the episode's tools

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
        self._toolbox.open_scopes(self._end_from_scope)

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
