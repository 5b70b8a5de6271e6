"""``AgentEnv``: the Gymnasium base environment of every agent_gym task.

An episode is a conversation: the observation is the whole conversation so far, the action
the next assistant message (``str`` or :class:`~agent_gym.types.PolicyOutput`). ``AgentEnv``
owns the step loop; subclasses say what an episode is about through its public hooks only
(tasks, tools, prompt, what a message does, the gate in front of each tool call, the end of
an episode and its grade, extra ``info`` keys). See ``docs/writing_envs.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym

from agent_gym.checks import check_bool, check_choice, check_int, check_timeout
from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.env.spaces import DEFAULT_ROLES, AssistantMessageSpace, ConversationSpace
from agent_gym.env.tasks import checked_task_list, choose_task, copy_task, validate_task
from agent_gym.env.tool_calling import ToolCalling
from agent_gym.env.tools import ToolBox
from agent_gym.errors import ConfigError
from agent_gym.grading import normalize_text
from agent_gym.parsers import (
    ParsedResponse,
    ResponseParser,
    ToolCallParser,
    as_parser,
    make_parser,
)
from agent_gym.parsers.instructions import adapt_prompt, describe_tools_for
from agent_gym.tools import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_TIME_LIMIT,
    Tool,
)
from agent_gym.types import FINISH_REASON_STATUS, Action, EpisodeStatus, FinishReason, Observation, PolicyOutput

__all__ = ["AgentEnv"]

class AgentEnv(ToolCalling, gym.Env[Observation, Action]):
    """A multi-turn tool-using conversation with a task to solve: the base of every agent_gym env.

    ## Description
    Each episode poses one task (a dict with ``id``, ``question``, ``ground_truth``) to an
    assistant that may call tools before it answers. Subclasses supply the tasks
    (:meth:`default_tasks`, checked by :meth:`validate_tasks`), the tools (:meth:`default_tools`,
    or per episode :meth:`episode_tools` with :meth:`release_episode`), the prompt
    (``default_system_prompt``, :meth:`format_question`) and the scoring (:meth:`score_answer`,
    :meth:`grade_episode`); parsing, tool execution with limits, rewards, the step limit,
    seeding and rendering live here. See ``docs/writing_envs.md``.

    ## Action Space
    The next assistant message: any ``str`` or a :class:`~agent_gym.types.PolicyOutput`
    whose ``text`` is used (an :class:`~agent_gym.env.spaces.AssistantMessageSpace`). A
    ``finish_reason`` of ``"length"``, ``"prompt_truncation"`` or ``"error"`` ends
    the episode as truncated with status TRUNCATION, PROMPT_TRUNCATION or POLICY_ERROR.

    ## Observation Space
    The whole conversation so far, a fresh tuple of fresh ``{"role", "content"}`` dicts with
    roles system, user, assistant and tool (a :class:`~agent_gym.env.spaces.ConversationSpace`).
    ``step`` appends the assistant message, then one ``tool`` message per tool call (its
    output or ``"Error: ..."``), or a ``user`` nudge for a message with no call and no answer.

    ## Rewards
    ``reward = toolcall_reward + res_reward``, both in ``info``: ``res_reward`` is the
    outcome (``rewards.correct`` times the answer's or the end grade's score),
    ``toolcall_reward`` the shaping of tool use, paid from a per-episode budget so that an
    episode's shaping lies in ``[-rewards.penalty_cap, rewards.bonus_cap]`` whatever its
    length, below what solving pays (see :class:`RewardConfig`).

    ## Starting State
    ``reset`` draws a task with ``self.np_random`` (or takes ``options["task"]``, checked by
    :meth:`validate_tasks`, or ``options["task_index"]``), releases the previous episode, sets
    up this episode's tools and returns the system and user messages. ``info`` has ``task``
    (a copy), ``tools`` (the episode's schemas for the policy; ``[]`` when ``tools_in_prompt``),
    ``tools_in_prompt`` and ``episode_id``.

    ## Episode End
    Terminated (status ENV_DONE) when the assistant gives an ``<answer>``; truncated with
    status MAX_STEPS after ``max_steps`` assistant messages (the one step limit: the
    registered ids set no ``max_episode_steps``), or as above for a truncated or failed
    policy output; truncated with status ENV_ERROR when the end grade could not grade
    (:meth:`grade_episode`). The last step's ``info`` has ``status`` and ``end_reason``
    (``"answer"``, ``"max_steps"``, ``"policy_length"``, ... or a subclass's reason).

    ## Arguments
    * ``tasks``: task dicts (``id``, ``question``, ``ground_truth``, optional ``solution``);
      default ``default_tasks()``.
    * ``tools``: tools or plain callables; default ``default_tools()``.
    * ``max_steps``: assistant messages per episode (default 10).
    * ``tools_in_prompt``: describe the tools in the system message (True) instead of
      handing their schemas to the policy through ``info["tools"]`` (False, default).
    * ``system_prompt``: replaces ``default_system_prompt``.
    * ``rewards``: a :class:`RewardConfig` or a mapping of its fields.
    * ``parser``: a :class:`~agent_gym.parsers.ToolCallParser` (or any object with ``parse``) or a tool-call parser name
      (default hermes tags).
    * ``tool_parser`` / ``reasoning_parser``: the model's formats by vLLM's names
      (``hermes``, ``llama3_json``, ``mistral``, ``openai``, ``deepseek_v3``, ``qwen3_coder``,
      ``pythonic``; ``deepseek_r1``, ``qwen3``, ``openai``), see :func:`agent_gym.parsers.make_parser`.
    * ``tool_time_limit`` / ``max_tool_output_chars``: limits for callables given as tools
      (constructor and per-episode tools alike).
    * ``max_tool_calls_per_step``: calls executed per message; extra calls are errors.
    * ``render_mode``: None or ``"ansi"``.

    ## Version History
    * Tools with an ``episode_scope`` (e.g. :class:`~agent_gym.tools.mcp.MCPTools`) get their
      state per episode: opened by ``reset``, closed when the episode is released.
    * :meth:`grade_episode` returns a :class:`~agent_gym.env.grade.Grade`; one that could not grade
      (``Grade.infra_failure``) ends the episode ENV_ERROR (a float or None still works).
    * Shaping bounded per episode: ``toolcall_reward`` is paid from a budget of
      ``rewards.bonus_cap`` (default: one useful step's bonus) and ``rewards.penalty_cap``,
      instead of growing with the number of calls.
    * The step loop's hooks (:meth:`handle_message`, :meth:`gate_tool_call`,
      :meth:`on_tool_result`, :meth:`end_episode`, :meth:`grade_episode`,
      :meth:`episode_info`); ``info["end_reason"]`` on the last step; one step limit.
    * Per-episode tools: the :meth:`episode_tools`, :meth:`release_episode` and
      :meth:`set_episode_tools` hooks; ``close()`` releases the last episode; a task given
      as ``options["task"]`` goes through :meth:`validate_tasks`.
    * First version.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    default_system_prompt: ClassVar[str] = (
        "You are a helpful assistant that solves tasks step by step. You may think inside <think>...</think>. "
        "Use the available tools whenever they help; each tool result comes back in a tool message. "
        "When you know the final answer, reply with <answer>your final answer</answer>."
    )
    """System message of every episode (tool descriptions are appended when ``tools_in_prompt``)."""

    tools_not_accepted: ClassVar[str | None] = None
    """None when ``tools=`` replaces :meth:`default_tools` (the rule of every env that can).

    An env whose tools cannot be replaced sets what to pass instead; ``tools=`` then raises
    :class:`~agent_gym.errors.ConfigError` with that text."""

    own_calls_block: ClassVar[bool] = True
    """Whether this class's own code may block in ``reset`` or ``step`` (wait on I/O, run long).

    A class that sets it False promises that its hooks (:meth:`episode_tools`, :meth:`handle_message`,
    :meth:`score_answer`, :meth:`grade_episode`, ...) only compute, bounded by construction. The
    promise is read from the class that makes it, never inherited: a subclass that changes
    any hook makes its own (see :meth:`calls_can_block`)."""

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        max_steps: int = 10,
        tools_in_prompt: bool = False,
        system_prompt: str | None = None,
        rewards: RewardConfig | Mapping[str, float] | None = None,
        parser: ResponseParser | str | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tool_time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_tool_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_tool_calls_per_step: int = 8,
        render_mode: str | None = None,
    ) -> None:
        if tools is not None and self.tools_not_accepted is not None:
            raise ConfigError(f"tools: {type(self).__name__} takes no tools= ({self.tools_not_accepted}), "
                              f"got {type(tools).__name__}")
        check_choice("render_mode", render_mode, [None, *self.metadata["render_modes"]])
        check_int("max_steps", max_steps, low=1)
        check_int("max_tool_calls_per_step", max_tool_calls_per_step, low=1)
        check_bool("tools_in_prompt", tools_in_prompt)
        check_timeout("tool_time_limit", tool_time_limit)
        check_int("max_tool_output_chars", max_tool_output_chars, low=1)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt: expected str or None, got {type(system_prompt).__name__}")
        if isinstance(parser, str):
            parser, tool_parser = None, parser if tool_parser is None else tool_parser
        if parser is not None and not isinstance(parser, ResponseParser):
            raise TypeError(f"parser: expected a ToolCallParser (with .parse(text)), got {type(parser).__name__}")
        if parser is not None and (tool_parser is not None or reasoning_parser is not None):
            raise ConfigError("parser: expected either a parser object or tool_parser/reasoning_parser names, got both")
        if parser is None and (tool_parser is not None or reasoning_parser is not None):
            parser = make_parser(tool_parser, reasoning_parser)
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.max_tool_calls_per_step = max_tool_calls_per_step
        self.tools_in_prompt = tools_in_prompt
        self.tool_time_limit = tool_time_limit
        """Time limit of the callables given as tools (seconds; None: none)."""
        self.max_tool_output_chars = max_tool_output_chars
        """Output limit of the callables given as tools (characters)."""
        self.rewards = RewardConfig.coerce(rewards)
        self.parser: ToolCallParser = as_parser(parser)

        self.tasks: list[dict[str, Any]] = self._checked_tasks(self.default_tasks() if tasks is None else tasks)

        # The env's own tools and the current episode's (the own ones until episode_tools returns others).
        self._toolbox = ToolBox(self.default_tools() if tools is None else tools, time_limit=tool_time_limit,
                                max_output_chars=max_tool_output_chars)
        self.tools: dict[str, Tool] = self._toolbox.own
        self._base_prompt = self.default_system_prompt if system_prompt is None else system_prompt
        self.system_prompt = self._prompt()

        self.action_space = AssistantMessageSpace()
        self.observation_space = ConversationSpace()
        self._task: dict[str, Any] | None = None
        self._messages: list[dict[str, str]] = []
        self.last_parsed: ParsedResponse | None = None
        """The parse of the last step's assistant message (None when the step did not parse it)."""
        self._turns = 0
        self._done = False
        self._ending: tuple[EpisodeStatus, str] | None = None  # asked for by end_episode, applied by step
        self.last_reward_time = 0.0
        self._seen_calls: set[str] = set()
        self._shaping = self.rewards.budget()  # the episode's shaping so far, within the caps
        self._episode_id = ""
        self._episode_open = False  # release_episode is owed (set before episode_tools runs)

    def _prompt(self) -> str:
        """The system message for an episode with the current tools."""
        base = adapt_prompt(self._base_prompt, self.parser)  # the parser's call format, not hermes' words
        if self.tools_in_prompt and self._toolbox.current:
            return f"{base}\n\n{describe_tools_for(self._toolbox.schemas(), self.parser)}"
        return base

    def _checked_tasks(self, source: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Validate ``source`` with :meth:`validate_tasks`, once per env class for a shared tuple."""
        return checked_task_list(type(self), source, self.validate_tasks)

    # ------------------------------------------------------------------ hooks: tasks, tools, prompt

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
        """Set up an episode on ``task`` and return its tools; None (the default) keeps the env's tools.

        Called by ``reset`` once the task is chosen (after :meth:`release_episode` freed the
        previous episode): the place for per-episode state. Return fresh objects that hold the
        episode's state, e.g. the bound methods of a new sandbox or database handle: nothing
        leaks into the next episode or into another env. Items are converted like constructor
        tools (same time and output limits; unique names). Their schemas may differ per
        episode and reach ``info["tools"]``.

        Args:
            task: The validated task of the new episode (do not modify it).

        Returns:
            Tools or callables, or None for the tools given to (or defaulted by) ``__init__``.
        """
        return None

    def release_episode(self) -> None:
        """Free or forget what the current episode held (sandbox, database, processes, records...).

        Called at the start of the next ``reset`` and by ``close()``, once per episode
        (also when :meth:`episode_tools` raised). Must be safe to call twice and when
        nothing was allocated; the default does nothing.
        """

    def format_question(self, task: Mapping[str, Any]) -> str:
        """The first user message of an episode on ``task``."""
        return str(task["question"])

    # ------------------------------------------------------------------ hooks: the step loop

    def handle_message(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """Act on the assistant's message (already appended to the conversation).

        The default: an ``<answer>`` is scored (:meth:`score_answer`, into
        ``info["res_reward"]``) and ends the episode (ENV_DONE, reason ``"answer"``);
        otherwise the message's tool calls run (:meth:`run_tool_calls`; a message with
        neither gets a nudge). Override to give messages another meaning (e.g. a reply
        that ends the user's turn); use :meth:`run_tool_calls`, :meth:`add_message` and
        :meth:`end_episode`. Called for every step whose policy output was not cut short.

        Args:
            parsed: The parsed message (also ``self.last_parsed``).
            info: The step's info, to fill in.
        """
        if parsed.answer is not None:
            info["res_reward"] = self._score(parsed.answer)
            self.end_episode(EpisodeStatus.ENV_DONE, "answer")
        else:
            self.run_tool_calls(parsed, info)

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """Score an answer in [0, 1]; the default compares normalised strings.

        Args:
            task: The current task.
            answer: Text inside ``<answer>``.
        """
        return 1.0 if normalize_text(answer) == normalize_text(str(task["ground_truth"])) else 0.0

    def pay_shaping(self, amount: float) -> float:
        """Pay ``amount`` of shaping reward from the episode's budget; return what was paid (within its caps).

        What a step's ``toolcall_reward`` goes through; a subclass adds shaping it computes elsewhere
        (e.g. a rubric's shaping part in :meth:`grade_episode`) with it, so every shaping stays bounded.
        """
        return self._shaping.pay(amount)

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade | float | None:
        """Grade the episode once it ended, whatever ended it; the default grades nothing.

        Called once per episode, in the last step, before ``info`` gets ``status`` and
        ``end_reason``. Return a :class:`~agent_gym.env.grade.Grade`: :meth:`Grade.scored(score)
        <agent_gym.env.grade.Grade.scored>` adds ``rewards.correct * score`` (``score`` clipped to
        [0, 1]) to that step's ``res_reward`` (and its time to ``last_reward_time``);
        :meth:`Grade.ungraded() <agent_gym.env.grade.Grade.ungraded>` adds nothing;
        :meth:`Grade.infra_failure(reason) <agent_gym.env.grade.Grade.infra_failure>` (grading could
        not grade: not the agent's doing) adds nothing and ends the episode ENV_ERROR, truncated,
        with that ``end_reason``, so that trainers mask it. A plain float or None (what overrides
        returned before :class:`~agent_gym.env.grade.Grade`) still works: it counts as
        ``Grade.scored`` or ``Grade.ungraded``. May add keys to ``info`` (e.g. test results).

        Args:
            status: How the episode ended.
            reason: Why (``"answer"``, ``"max_steps"``, ``"policy_length"``, a subclass's reason).
            info: The last step's info.

        Returns:
            The grade (:meth:`Grade.ungraded() <agent_gym.env.grade.Grade.ungraded>` by default).
        """
        return Grade.ungraded()

    def episode_info(self) -> Mapping[str, Any]:
        """Keys added to the info of ``reset`` and of every step (those the step set win).

        The default adds none; e.g. the documents retrieved so far.
        """
        return {}

    def oracle_answer(self, task: Mapping[str, Any]) -> str:
        """The text the oracle puts inside ``<answer>`` (default: the ground truth)."""
        return str(task["ground_truth"])

    # ------------------------------------------------------------------ services for the hooks

    def add_message(self, role: str, content: str) -> None:
        """Append a message to the conversation (e.g. the next user message).

        Raises:
            ValueError: For a role other than system, user, assistant or tool.
        """
        if role not in DEFAULT_ROLES:
            raise ValueError(f"role: expected one of {sorted(DEFAULT_ROLES)}, got {role!r}")
        self._messages.append({"role": role, "content": str(content)})

    def end_episode(self, status: EpisodeStatus, reason: str) -> None:
        """End the episode with ``status`` at the end of the current step (the next one, between steps).

        The step then calls :meth:`grade_episode` (whose grade may change the status, see
        :class:`~agent_gym.env.grade.Grade`), returns ``terminated`` for ENV_DONE and ``truncated``
        otherwise, and sets ``info["status"]`` and ``info["end_reason"]``. Tool
        calls after this are refused (:meth:`gate_tool_call`). The first request of a step wins.

        Args:
            status: An :class:`~agent_gym.types.EpisodeStatus`.
            reason: A short word for ``info["end_reason"]`` (e.g. ``"submit"``).

        Raises:
            RuntimeError: Without a running episode.
        """
        if self._task is None or self._done:
            raise RuntimeError("end_episode() needs a running episode; call env.reset() first")
        if not isinstance(reason, str) or not reason:
            raise TypeError(f"reason: expected a non-empty str, got {reason!r}")
        if self._ending is None:
            self._ending = (EpisodeStatus(status), reason)

    # ------------------------------------------------------------------ public API

    def close(self) -> None:
        """Release the current episode's resources (see :meth:`release_episode`)."""
        self._release()
        super().close()

    def calls_can_block(self) -> bool:
        """Whether ``reset`` or ``step`` may block: False only when neither the class nor a tool can.

        False when the env's own class (not a base class) sets :attr:`own_calls_block` to False and
        no tool of the env or of its current episode may block (:meth:`ToolBox.can_block
        <agent_gym.env.tools.ToolBox.can_block>`). A rollout runner calls ``reset`` and ``step`` of
        such an env on its event loop instead of a worker thread.
        """
        return bool(type(self).__dict__.get("own_calls_block", True)) or self._toolbox.can_block()

    @property
    def task(self) -> dict[str, Any] | None:
        """The current task (None before the first reset)."""
        return self._task

    @property
    def episode_id(self) -> str:
        """The current episode's id (``"<task id>-<8 hex digits>"``; "" before the first reset)."""
        return self._episode_id

    @property
    def step_count(self) -> int:
        """Assistant messages (steps) of the current episode so far."""
        return self._turns

    @property
    def episode_running(self) -> bool:
        """True between a ``reset`` and the step that ends its episode."""
        return self._task is not None and not self._done

    @property
    def messages(self) -> Observation:
        """A copy of the conversation so far (the current observation)."""
        return self._observation()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on a task drawn with ``self.np_random`` or given as ``options["task"]``.

        Args:
            seed: Seeds ``self.np_random`` (task choice is deterministic from it).
            options: ``{"task": task_dict}`` to run a specific task, or ``{"task_index": i}``.

        Returns:
            The observation (system and user messages) and ``info`` with ``task``,
            ``tools`` (schemas for the policy; empty when ``tools_in_prompt``),
            ``tools_in_prompt``, ``episode_id`` and the keys of :meth:`episode_info`.

        Raises:
            ValueError: If ``options["task"]`` is not a valid task or the index is out of range.
        """
        super().reset(seed=seed)
        self._release()
        task = choose_task(self.tasks, options or {}, self.np_random, self.validate_tasks, type(self).__name__)
        self._task = None  # no running episode until the tools are in place
        self._episode_open = True
        self._episode_id = f"{task['id']}-{int(self.np_random.integers(1 << 32)):08x}"
        items = self.episode_tools(task)
        self._toolbox.use(None if items is None else self._toolbox.convert(items, "episode_tools()"))
        self._toolbox.open_scopes(self._end_from_scope)
        system_prompt = self.system_prompt if items is None else self._prompt()
        self._task = task
        self._turns = 0
        self._done = False
        self._ending = None
        self._seen_calls = set()
        self._shaping = self.rewards.budget()
        self._messages = [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": self.format_question(task)},
        ]
        info = {
            "task": copy_task(task),
            "tools": [] if self.tools_in_prompt else self._toolbox.schemas(),
            "tools_in_prompt": self.tools_in_prompt,
            "episode_id": self._episode_id,
        }
        return self._observation(), self._with_episode_info(info)

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Append the assistant message and act on it (see :meth:`handle_message`).

        Args:
            action: The assistant message as ``str`` or ``PolicyOutput``.

        Returns:
            ``(obs, reward, terminated, truncated, info)``; ``info`` has ``toolcall_reward``
            (the step's shaping: the raw value the hooks set, paid from the episode's budget,
            see :class:`RewardConfig`), ``res_reward`` (the outcome), ``tool_calls`` (each
            failed call with its ``kind``), ``error`` and ``error_kinds`` (the
            :class:`~agent_gym.errors.ToolErrorKind` value of each joined error; a step with
            error observations only), ``status`` and ``end_reason`` (episode end only) and
            the keys of :meth:`episode_info`.

        Raises:
            TypeError: If ``action`` is neither a ``str`` nor a ``PolicyOutput``.
            RuntimeError: If called before ``reset`` or after the episode ended.
        """
        text, finish_reason = self._begin_step(action)
        info: dict[str, Any] = {"toolcall_reward": 0.0, "res_reward": 0.0, "tool_calls": []}
        if finish_reason in FINISH_REASON_STATUS:
            if text or finish_reason == FinishReason.LENGTH:
                self.add_message("assistant", text)
            self.end_episode(FINISH_REASON_STATUS[finish_reason], f"policy_{finish_reason}")
        else:
            self.add_message("assistant", text)
            self.last_parsed = self.parser.parse(text)
            self.handle_message(self.last_parsed, info)
        info["toolcall_reward"] = self.pay_shaping(info["toolcall_reward"])
        if self._ending is None and self._turns >= self.max_steps:
            self.end_episode(EpisodeStatus.MAX_STEPS, "max_steps")
        terminated = truncated = False
        if self._ending is not None:
            terminated = self._finish(*self._ending, info) == EpisodeStatus.ENV_DONE
            truncated = not terminated
        self.attach_tools_info(info)
        reward = info["toolcall_reward"] + info["res_reward"]
        return self._observation(), reward, terminated, truncated, self._with_episode_info(info)

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
            calls = [(c["name"], c.get("arguments", {})) for c in solution[self._turns]]
            return self.parser.format_calls(calls)
        return f"<answer>{self.oracle_answer(self._task)}</answer>"

    def render(self) -> str | None:
        """Return the conversation as text in ``"ansi"`` mode (None without a render mode)."""
        if self.render_mode != "ansi":
            return None
        parts = [f"[{m['role']}]\n{m['content']}" for m in self._messages]
        return "\n\n".join(parts) + "\n"

    # ------------------------------------------------------------------ internals

    def _begin_step(self, action: Action) -> tuple[str, str]:
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

    def _finish(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> EpisodeStatus:
        """End the episode in this step: grade it, record why; returns the final status (the grade's, if any)."""
        started = time.perf_counter()
        grade = Grade.coerce(self.grade_episode(status, reason, info))
        if grade.score is not None:
            info["res_reward"] += self.rewards.outcome(grade.score)
            self.last_reward_time += time.perf_counter() - started
        if grade.status is not None:
            status = grade.status
        info["status"] = status
        info["end_reason"] = reason if grade.reason is None else grade.reason
        self._done = True
        self._ending = None
        return status

    def _with_episode_info(self, info: dict[str, Any]) -> dict[str, Any]:
        for key, value in self.episode_info().items():
            info.setdefault(key, value)
        return info

    def _release(self) -> None:
        """Call release_episode once for the episode set up by the last reset."""
        if self._episode_open:
            self._episode_open = False
            self._task = None
            try:
                self.release_episode()
            finally:
                self._toolbox.close_scopes()

    def _end_from_scope(self, status: EpisodeStatus, reason: str) -> None:
        """End the running episode for a tool's episode scope (e.g. its server failed); a no-op between episodes."""
        if self.episode_running:
            self.end_episode(status, reason)

    def _observation(self) -> Observation:
        # A fresh tuple of fresh dicts: callers may keep or mutate what they were given.
        return tuple(map(dict.copy, self._messages))  # type: ignore[arg-type]

    def _score(self, answer: str) -> float:
        assert self._task is not None
        started = time.perf_counter()
        score = self.score_answer(self._task, answer)
        self.last_reward_time = time.perf_counter() - started  # read by TrajectoryWrapper; never in info
        return self.rewards.outcome(score)
