"""``AgentEnv``: the Gymnasium base environment of every agent_gym task.

An episode is a conversation. The observation is the whole conversation so far,
a tuple of ``{"role", "content"}`` dicts; the action is the next assistant
message, as ``str`` or :class:`~agent_gym.types.PolicyOutput`. ``step`` appends
the assistant message and the messages it caused: one ``tool`` message per tool
call (results or errors), or a ``user`` nudge when the message neither called a
tool nor answered. An ``<answer>`` ends the episode and is scored.

Subclasses supply tasks (``default_tasks``), tools (``default_tools``), the
prompt (``default_system_prompt``, ``format_question``) and scoring
(``score_answer``); everything else (spaces, seeding, task validation, parsing,
tool execution with limits, reward shaping, truncation, rendering, the oracle)
lives here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import orjson

from agent_gym.checks import check_bool, check_int, check_timeout
from agent_gym.grading import normalize_text
from agent_gym.rewards import RewardConfig
from agent_gym.spaces import AssistantMessageSpace, ConversationSpace
from agent_gym.tasks import checked_task_list, copy_task, format_tool_call, validate_task
from agent_gym.tools import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_TIME_LIMIT,
    HermesToolCallParser,
    ParsedResponse,
    Tool,
    ToolCallParser,
    ToolErrorKind,
    as_tool,
    describe_tools,
    skipped_call_result,
    unknown_tool_result,
)
from agent_gym.types import EpisodeStatus, FinishReason, Message, PolicyOutput

__all__ = ["AgentEnv", "RewardConfig", "format_tool_call", "normalize_text", "validate_task"]

_NUDGE = (
    "Your message contained neither a tool call nor a final answer. Call a tool with "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>, or give the final answer as <answer>...</answer>.'
)
_FINISH_STATUS = {
    FinishReason.LENGTH: EpisodeStatus.TRUNCATION,
    FinishReason.PROMPT_TRUNCATION: EpisodeStatus.PROMPT_TRUNCATION,
    FinishReason.ERROR: EpisodeStatus.POLICY_ERROR,
}


class AgentEnv(gym.Env[tuple[Message, ...], str]):
    """A multi-turn tool-using conversation with a task to solve: the base of every agent_gym env.

    ## Description
    Each episode poses one task (a dict with ``id``, ``question``, ``ground_truth``) to an
    assistant that may call tools before it answers. Subclasses supply the tasks
    (:meth:`default_tasks`, checked by :meth:`validate_tasks`), the tools (:meth:`default_tools`,
    or per episode :meth:`episode_tools` with :meth:`release_episode`), the prompt
    (``default_system_prompt``, :meth:`format_question`) and the scoring (:meth:`score_answer`);
    parsing, tool execution with limits, rewards, truncation, seeding and rendering live here.
    See ``docs/writing_envs.md``.

    ## Action Space
    The next assistant message: any ``str`` or a :class:`~agent_gym.types.PolicyOutput`
    whose ``text`` is used (an :class:`~agent_gym.spaces.AssistantMessageSpace`). A
    ``finish_reason`` of ``"length"``, ``"prompt_truncation"`` or ``"error"`` ends
    the episode as truncated with status TRUNCATION, PROMPT_TRUNCATION or POLICY_ERROR.

    ## Observation Space
    The whole conversation so far, a fresh tuple of fresh ``{"role", "content"}`` dicts with
    roles system, user, assistant and tool (a :class:`~agent_gym.spaces.ConversationSpace`).
    ``step`` appends the assistant message, then one ``tool`` message per tool call (its
    output or ``"Error: ..."``), or a ``user`` nudge for a message with no call and no answer.

    ## Rewards
    ``reward = toolcall_reward + res_reward`` (see :class:`RewardConfig`), both in ``info``.

    ## Starting State
    ``reset`` draws a task with ``self.np_random`` (or takes ``options["task"]``, checked by
    :meth:`validate_tasks`, or ``options["task_index"]``), releases the previous episode, sets
    up this episode's tools and returns the system and user messages. ``info`` has ``task``
    (a copy), ``tools`` (the episode's schemas for the policy; ``[]`` when ``tools_in_prompt``),
    ``tools_in_prompt`` and ``episode_id``.

    ## Episode End
    Terminated (status ENV_DONE) when the assistant gives an ``<answer>``;
    truncated (status MAX_STEPS) after ``max_steps`` assistant messages, or as above
    for a truncated or failed policy output. ``info["status"]`` is set only then.

    ## Arguments
    * ``tasks``: task dicts (``id``, ``question``, ``ground_truth``, optional ``solution``);
      default ``default_tasks()``.
    * ``tools``: tools or plain callables; default ``default_tools()``.
    * ``max_steps``: assistant messages per episode (default 10).
    * ``tools_in_prompt``: describe the tools in the system message (True) instead of
      handing their schemas to the policy through ``info["tools"]`` (False, default).
    * ``system_prompt``: replaces ``default_system_prompt``.
    * ``rewards``: a :class:`RewardConfig` or a mapping of its fields.
    * ``parser``: a :class:`~agent_gym.tools.ToolCallParser` (default hermes tags).
    * ``tool_time_limit`` / ``max_tool_output_chars``: limits for callables given as tools
      (constructor and per-episode tools alike).
    * ``max_tool_calls_per_step``: calls executed per message; extra calls are errors.
    * ``render_mode``: None or ``"ansi"``.

    ## Version History
    * Per-episode tools: the :meth:`episode_tools`, :meth:`release_episode` and
      :meth:`set_episode_tools` hooks; ``close()`` releases the last episode; a task given
      as ``options["task"]`` goes through :meth:`validate_tasks`.
    * First version.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    default_system_prompt: str = (
        "You are a helpful assistant that solves tasks step by step. You may think inside <think>...</think>. "
        "Use the available tools whenever they help; each tool result comes back in a tool message. "
        "When you know the final answer, reply with <answer>your final answer</answer>."
    )
    """System message of every episode (tool descriptions are appended when ``tools_in_prompt``)."""

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        max_steps: int = 10,
        tools_in_prompt: bool = False,
        system_prompt: str | None = None,
        rewards: RewardConfig | Mapping[str, float] | None = None,
        parser: ToolCallParser | None = None,
        tool_time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_tool_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_tool_calls_per_step: int = 8,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected None or one of {self.metadata['render_modes']}, "
                             f"got {render_mode!r}")
        check_int("max_steps", max_steps, low=1)
        check_int("max_tool_calls_per_step", max_tool_calls_per_step, low=1)
        check_bool("tools_in_prompt", tools_in_prompt)
        check_timeout("tool_time_limit", tool_time_limit)
        check_int("max_tool_output_chars", max_tool_output_chars, low=1)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt: expected str or None, got {type(system_prompt).__name__}")
        if parser is not None and not isinstance(parser, ToolCallParser):
            raise TypeError(f"parser: expected a ToolCallParser (with .parse(text)), got {type(parser).__name__}")
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.max_tool_calls_per_step = max_tool_calls_per_step
        self.tools_in_prompt = tools_in_prompt
        self.rewards = RewardConfig.coerce(rewards)
        self.parser: ToolCallParser = parser if parser is not None else HermesToolCallParser()

        self.tasks: list[dict[str, Any]] = self._checked_tasks(self.default_tasks() if tasks is None else tasks)

        self._tool_limits = {"time_limit": tool_time_limit, "max_output_chars": max_tool_output_chars}
        self.tools: dict[str, Tool] = self._convert_tools(self.default_tools() if tools is None else tools, "tools")
        self._schemas_json = orjson.dumps([t.schema for t in self.tools.values()])
        self._base_prompt = self.default_system_prompt if system_prompt is None else system_prompt
        self.system_prompt = self._prompt_for(self.tools, self._schemas_json)

        self.action_space = AssistantMessageSpace()
        self.observation_space = ConversationSpace()
        self._task: dict[str, Any] | None = None
        self._messages: list[dict[str, str]] = []
        self.last_parsed: ParsedResponse | None = None
        """The parse of the last step's assistant message (None when the step did not parse it)."""
        self._turns = 0
        self._done = False
        self.last_reward_time = 0.0
        self._seen_calls: set[str] = set()
        self._episode_id = ""
        # Tools of the current episode (the constructor's until an episode_tools hook returns others).
        self._episode_tools: dict[str, Tool] = self.tools
        self._episode_schemas_json = self._schemas_json
        self._episode_open = False  # release_episode is owed (set before episode_tools runs)
        self._tools_changed = False  # set_episode_tools ran since the last info carrying "tools"

    def _convert_tools(self, items: Any, where: str) -> dict[str, Tool]:
        """Turn tools or callables into a name -> Tool map with the env's limits; names must be unique."""
        if isinstance(items, (str, bytes, Mapping)) or not hasattr(items, "__iter__"):
            raise TypeError(f"{where}: expected a sequence of tools or callables, got {type(items).__name__}")
        tools: dict[str, Tool] = {}
        for item in items:
            tool = as_tool(item, **self._tool_limits)
            if tool.name in tools:
                raise ValueError(f"{where}: expected unique tool names, got {tool.name!r} twice")
            tools[tool.name] = tool
        return tools

    def _prompt_for(self, tools: Mapping[str, Tool], schemas_json: bytes) -> str:
        """The system message for an episode with ``tools``."""
        if self.tools_in_prompt and tools:
            return f"{self._base_prompt}\n\n{describe_tools(orjson.loads(schemas_json))}"
        return self._base_prompt

    def _checked_tasks(self, source: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Validate ``source`` with :meth:`validate_tasks`, once per env class for a shared tuple."""
        return checked_task_list(type(self), source, self.validate_tasks)

    # ------------------------------------------------------------------ hooks for subclasses

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Check every task (see :func:`validate_task`) and return them as dicts.

        Subclasses add their own checks (call ``super()``); raise ``ValueError`` naming the task.
        """
        return [validate_task(t, f"tasks[{i}]") for i, t in enumerate(tasks)]

    def default_tasks(self) -> Sequence[Mapping[str, Any]]:
        """Tasks used when none are given (subclasses override)."""
        return []

    def default_tools(self) -> Sequence[Tool | Callable[..., Any]]:
        """Tools used when none are given (subclasses override)."""
        return []

    def episode_tools(self, task: dict[str, Any]) -> Sequence[Tool | Callable[..., Any]] | None:
        """The tools of an episode on ``task``; None (the default) keeps the env's tools.

        Called by ``reset`` once the task is chosen (after :meth:`release_episode` freed the
        previous episode). Return fresh objects that hold the episode's state, e.g. the bound
        methods of a new sandbox or database handle: nothing leaks into the next episode or
        into another env. Items are converted like constructor tools (same time and output
        limits; unique names). Their schemas may differ per episode and reach ``info["tools"]``.

        Args:
            task: The validated task of the new episode (do not modify it).

        Returns:
            Tools or callables, or None for the tools given to (or defaulted by) ``__init__``.
        """
        return None

    def release_episode(self) -> None:
        """Free the resources of the current episode (sandbox, database, processes...).

        Called at the start of the next ``reset`` and by ``close()``, once per episode
        (also when :meth:`episode_tools` raised). Must be safe to call twice and when
        nothing was allocated; the default does nothing.
        """

    def format_question(self, task: Mapping[str, Any]) -> str:
        """The first user message of an episode on ``task``."""
        return str(task["question"])

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """Score an answer in [0, 1]; the default compares normalised strings.

        Args:
            task: The current task.
            answer: Text inside ``<answer>``.
        """
        return 1.0 if normalize_text(answer) == normalize_text(str(task["ground_truth"])) else 0.0

    def is_useful_call(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a successful call earns the shaping bonus: by default, not an exact repeat."""
        try:
            key = name + "\0" + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):  # e.g. ints beyond 64 bits, non-str keys
            key = name + "\1" + json.dumps(arguments, sort_keys=True, default=str)
        if key in self._seen_calls:
            return False
        self._seen_calls.add(key)
        return True

    def oracle_answer(self, task: Mapping[str, Any]) -> str:
        """The text the oracle puts inside ``<answer>`` (default: the ground truth)."""
        return str(task["ground_truth"])

    # ------------------------------------------------------------------ public API

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """Fresh copies of the OpenAI function schemas of the current episode's tools.

        Before the first ``reset`` (and for envs without :meth:`episode_tools`) these are the
        schemas of the env's tools.
        """
        return orjson.loads(self._episode_schemas_json)

    @property
    def episode_tools_by_name(self) -> Mapping[str, Tool]:
        """The current episode's tools by name (read-only view; the env's tools before ``reset``)."""
        return MappingProxyType(self._episode_tools)

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
        self._set_tools(self._convert_tools(tools, "tools"))
        self._tools_changed = True

    def attach_tools_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Put ``info["tools"]`` into ``info`` if :meth:`set_episode_tools` ran since the last info had it.

        ``step`` does this itself; returns ``info``.
        """
        if self._tools_changed:
            self._tools_changed = False
            info["tools"] = [] if self.tools_in_prompt else orjson.loads(self._episode_schemas_json)
        return info

    def close(self) -> None:
        """Release the current episode's resources (see :meth:`release_episode`)."""
        self._release()
        super().close()

    @property
    def task(self) -> dict[str, Any] | None:
        """The current task (None before the first reset)."""
        return self._task

    @property
    def messages(self) -> tuple[Message, ...]:
        """A copy of the conversation so far (the current observation)."""
        return self._observation()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode on a task drawn with ``self.np_random`` or given as ``options["task"]``.

        Args:
            seed: Seeds ``self.np_random`` (task choice is deterministic from it).
            options: ``{"task": task_dict}`` to run a specific task, or ``{"task_index": i}``.

        Returns:
            The observation (system and user messages) and ``info`` with ``task``,
            ``tools`` (schemas for the policy; empty when ``tools_in_prompt``),
            ``tools_in_prompt`` and ``episode_id``.

        Raises:
            ValueError: If ``options["task"]`` is not a valid task or the index is out of range.
        """
        super().reset(seed=seed)
        self._release()
        options = options or {}
        if options.get("task") is not None:
            task = self._validate_option_task(options["task"])
        elif options.get("task_index") is not None:
            index = options["task_index"]
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.tasks):
                raise ValueError(f'options["task_index"]: expected an int in [0, {len(self.tasks)}), got {index!r}')
            task = self.tasks[index]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._task = None  # no running episode until the tools are in place
        self._episode_open = True
        items = self.episode_tools(task)
        if items is None:
            self._set_tools(self.tools, self._schemas_json)
            system_prompt = self.system_prompt
        else:
            self._set_tools(self._convert_tools(items, "episode_tools()"))
            system_prompt = self._prompt_for(self._episode_tools, self._episode_schemas_json)
        self._tools_changed = False
        self._task = task
        self._turns = 0
        self._done = False
        self._seen_calls = set()
        self._episode_id = f"{task['id']}-{int(self.np_random.integers(1 << 32)):08x}"
        self._messages = [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": self.format_question(task)},
        ]
        info = {
            "task": copy_task(task),
            "tools": [] if self.tools_in_prompt else orjson.loads(self._episode_schemas_json),
            "tools_in_prompt": self.tools_in_prompt,
            "episode_id": self._episode_id,
        }
        return self._observation(), info

    def step(self, action: str | PolicyOutput) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Append the assistant message, run its tool calls or score its answer.

        Args:
            action: The assistant message as ``str`` or ``PolicyOutput``.

        Returns:
            ``(obs, reward, terminated, truncated, info)``; ``info`` has ``toolcall_reward``,
            ``res_reward``, ``tool_calls`` (each failed call with its ``kind``), ``error`` and
            ``error_kinds`` (the :class:`~agent_gym.errors.ToolErrorKind` value of each joined
            error; a step with error observations only) and ``status`` (episode end only).

        Raises:
            TypeError: If ``action`` is neither a ``str`` nor a ``PolicyOutput``.
            RuntimeError: If called before ``reset`` or after the episode ended.
        """
        text, finish_reason = self._begin_step(action)
        info: dict[str, Any] = {"toolcall_reward": 0.0, "res_reward": 0.0, "tool_calls": []}
        terminated = truncated = False
        status: EpisodeStatus | None = None
        if finish_reason in _FINISH_STATUS:
            if text or finish_reason == FinishReason.LENGTH:
                self._messages.append({"role": "assistant", "content": text})
            truncated, status = True, _FINISH_STATUS[finish_reason]
        else:
            self._messages.append({"role": "assistant", "content": text})
            parsed = self.last_parsed = self.parser.parse(text)
            if parsed.answer is not None:
                info["res_reward"] = self._score(parsed.answer)
                terminated, status = True, EpisodeStatus.ENV_DONE
            else:
                self._act(parsed, info)
        if not (terminated or truncated) and self._turns >= self.max_steps:
            truncated, status = True, EpisodeStatus.MAX_STEPS
        if status is not None:
            info["status"] = status
            self._done = True
        if self._tools_changed:
            self.attach_tools_info(info)
        reward = info["toolcall_reward"] + info["res_reward"]
        return self._observation(), reward, terminated, truncated, info

    def oracle_action(self) -> str:
        """The next assistant message of the current task's reference solution.

        Turn ``k`` of ``task["solution"]`` becomes its tool call blocks; after the
        last turn (or at once, for a task without a solution) the oracle answers.

        Raises:
            RuntimeError: Before ``reset`` or after the episode ended.
        """
        if self._task is None or self._done:
            raise RuntimeError("oracle_action() needs a running episode; call env.reset() first")
        solution = self._task.get("solution") or []
        if self._turns < len(solution):
            return "\n".join(format_tool_call(c["name"], c.get("arguments", {})) for c in solution[self._turns])
        return f"<answer>{self.oracle_answer(self._task)}</answer>"

    def render(self) -> str | None:
        """Return the conversation as text in ``"ansi"`` mode (None without a render mode)."""
        if self.render_mode != "ansi":
            return None
        parts = [f"[{m['role']}]\n{m['content']}" for m in self._messages]
        return "\n\n".join(parts) + "\n"

    # ------------------------------------------------------------------ internals

    def _validate_option_task(self, task: Any) -> dict[str, Any]:
        """Check ``options["task"]`` with :meth:`validate_tasks` (the subclass's checks included)."""
        try:
            checked = self.validate_tasks([task])
        except ValueError as exc:
            text = str(exc)
            text = text[len("tasks[0]: "):] if text.startswith("tasks[0]: ") else text
            raise ValueError(f'options["task"]: {text}') from None
        if len(checked) != 1 or not isinstance(checked[0], dict):
            raise TypeError(f"{type(self).__name__}.validate_tasks: expected a list of one task dict back, "
                            f"got {checked!r:.80}")
        return checked[0]

    def _begin_step(self, action: str | PolicyOutput) -> tuple[str, FinishReason]:
        """Check that a step may run now, count it, and return the action's text and finish reason."""
        if self._task is None:
            raise RuntimeError("step() called before reset(); call env.reset() first")
        if self._done:
            raise RuntimeError("step() called after the episode ended; call env.reset() to start a new one")
        if isinstance(action, str):
            text, finish_reason = action, FinishReason.STOP
        elif isinstance(action, PolicyOutput):
            text, finish_reason = action.text, action.finish_reason
        else:
            raise TypeError(f"action: expected str or PolicyOutput, got {type(action).__name__}")
        self._turns += 1
        self.last_reward_time = 0.0
        self.last_parsed = None
        return text, finish_reason

    def _set_tools(self, tools: dict[str, Tool], schemas_json: bytes | None = None) -> None:
        self._episode_tools = tools
        self._episode_schemas_json = (orjson.dumps([t.schema for t in tools.values()])
                                      if schemas_json is None else schemas_json)

    def _release(self) -> None:
        """Call release_episode once for the episode set up by the last reset."""
        if self._episode_open:
            self._episode_open = False
            self._task = None
            self.release_episode()

    def _observation(self) -> tuple[Message, ...]:
        # A fresh tuple of fresh dicts: callers may keep or mutate what they were given.
        return tuple(map(dict.copy, self._messages))  # type: ignore[arg-type]

    def _score(self, answer: str) -> float:
        assert self._task is not None
        started = time.perf_counter()
        score = float(self.score_answer(self._task, answer))
        # Kept off ``info`` (no wall-clock values there); TrajectoryWrapper reads it for metrics.
        self.last_reward_time = time.perf_counter() - started
        return self.rewards.correct * min(max(score, 0.0), 1.0)

    def _act(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """Run the tool calls of a message without an answer; fill rewards and errors."""
        errors: list[str] = []
        kinds: list[str] = []  # the ToolErrorKind of each error, as info["error_kinds"]
        useful = False
        for error in parsed.errors:
            errors.append(error)
            kinds.append(ToolErrorKind.MALFORMED_CALL.value)
            self._messages.append({"role": "tool", "content": f"Error: {error}"})
        if parsed.errors:
            info["parse_errors"] = list(parsed.errors)
        for index, call in enumerate(parsed.tool_calls):
            record: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
            if index >= self.max_tool_calls_per_step:
                result = skipped_call_result(call.name, self.max_tool_calls_per_step)
            else:
                tool = self._episode_tools.get(call.name)
                if tool is None:
                    result = unknown_tool_result(call.name, self._episode_tools)
                else:
                    result = tool.run(call.arguments)
                    if result.error is None:
                        useful = self.is_useful_call(call.name, call.arguments) or useful
            error, content = result.error, result.content
            kind: str | None = None
            if error is not None:
                kind = ToolErrorKind(getattr(result, "kind", None) or "tool_error").value
                errors.append(error)
                kinds.append(kind)
            record["ok"] = error is None
            record["error"] = error
            record["kind"] = kind
            record["output"] = content
            info["tool_calls"].append(record)
            self._messages.append({"role": "tool", "content": content})
        reward = self.rewards.tool_error * len(errors)
        if useful:
            reward += self.rewards.tool_success
        if not parsed.tool_calls and not parsed.errors:
            errors.append("the message has no <tool_call> and no <answer>")
            kinds.append(ToolErrorKind.NO_ACTION.value)
            self._messages.append({"role": "user", "content": _NUDGE})
            reward += self.rewards.no_action
        if errors:
            info["error"] = "; ".join(errors)
            info["error_kinds"] = kinds
        info["toolcall_reward"] = reward
