"""``ConversationEnv`` (``agent_gym/Conversation-v0``): multi-turn user conversations with stateful tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.checks import check_int
from agent_gym.core import AgentEnv, format_tool_call, normalize_text
from agent_gym.envs.conversation.domains import BUILTIN_CLASSES
from agent_gym.envs.conversation.state import (
    CheckedMethod,
    load_instance,
    method_names,
    public_state,
    resolve_class,
    state_diff,
)
from agent_gym.envs.conversation.tasks import builtin_tasks, check_task, load_tasks, visible_methods
from agent_gym.envs.conversation.users import DEFAULT_STOP_MARKER, SimulatedUser
from agent_gym.tools import FunctionTool, ParsedResponse, Tool, describe_tools
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput

__all__ = ["ConversationEnv"]

_FINISH_STATUS = {
    FinishReason.LENGTH: EpisodeStatus.TRUNCATION,
    FinishReason.PROMPT_TRUNCATION: EpisodeStatus.PROMPT_TRUNCATION,
    FinishReason.ERROR: EpisodeStatus.POLICY_ERROR,
}


class ConversationEnv(AgentEnv):
    """A user comes back turn after turn; the assistant acts on stateful tools; each turn's state is checked.

    ## Description
    Each task (see :mod:`agent_gym.envs.conversation.tasks` and ``task_schema.json``) names
    stateful tool classes and their initial state, the user's messages (``turns``) and, per
    turn, the reference calls a correct assistant makes. Every episode gets fresh instances
    of the classes, loaded from a deep copy of ``initial_state``; their public methods are the
    tools (``excluded`` methods hidden, a turn's ``new_tools`` offered from that turn on).
    The shipped tasks (180, over a file system, a shop and a calendar) include turns whose
    correct action is to ask the user for missing details or to refuse, and tools that
    appear mid-conversation.

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``). A message with
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks runs them; a message
    without tool calls is the assistant's reply and ends its turn (an ``<answer>`` tag is
    allowed and counts as a reply).

    ## Observation Space
    The conversation so far: a tuple of ``{"role", "content"}`` dicts (system, user,
    assistant, tool). Tool outputs (JSON for containers) or ``"Error: ..."`` come back as
    ``tool`` messages; the next user message (scripted or simulated) comes back as a ``user``
    message, with the new tools described in it when ``tools_in_prompt``.

    ## Rewards
    When a turn ends, the env replays the turn's reference calls on its own reference
    instances (fresh from ``initial_state``, all earlier turns replayed) and compares the
    public attributes of each instance with the episode's. The turn passes when every state
    is equal and each of the turn's ``expected_outputs`` occurs in the turn's assistant
    messages (normalised text). ``res_reward`` of that step = ``correct * passed / len(turns)``,
    so a fully solved episode earns ``correct``. With a simulated user the whole reference is
    checked once, at the end of the conversation, for ``correct * passed``.
    ``toolcall_reward`` shapes tool use as in :class:`~agent_gym.core.AgentEnv`.

    ## Starting State
    A task drawn with the env's seeded RNG (or ``options["task"]`` / ``options["task_index"]``);
    the observation is the system message and the first user message. ``info`` has ``task``,
    ``tools`` (schemas of the first turn's tools), ``tools_in_prompt``, ``episode_id``,
    ``turn`` (0) and ``num_turns``.

    ## Episode End
    Terminated (ENV_DONE) after the reply to the last scripted turn (``end_reason``
    ``"last_turn"``), when the simulated user writes its stop marker (``"user_stop"``), or when
    an end tool (default ``transfer_to_human``) succeeds (``"transfer"``). Truncated with
    MAX_STEPS after ``max_steps`` assistant messages (``"max_steps"``), after
    ``max_tool_calls_per_turn`` calls within one user turn (``"tool_call_limit"``) or
    ``max_user_turns`` simulated user messages (``"user_turn_limit"``); ENV_ERROR when the
    user policy fails (``"user_error"``); TRUNCATION / PROMPT_TRUNCATION / POLICY_ERROR for a
    ``PolicyOutput`` cut short or failed. The last step's ``info`` has ``status``,
    ``end_reason``, ``turn_scores`` and ``success`` (every turn passed).

    Every step's ``info`` has ``turn`` (the user turn the step belongs to); a step that ends a
    turn adds ``turn_ended``, ``turn_score``, ``turn_passed``, ``state_diff`` (readable lines,
    e.g. ``"OrderService.orders['O-2']['status']: expected 'cancelled', got 'pending'"``) and
    ``missing_outputs``; a step that brings new tools carries ``tools``.

    ## Arguments
    * ``tasks``: task dicts, or the path of a JSONL / JSON file of them; default: the shipped tasks.
    * ``classes``: ``{"Name": cls}`` for class names used by tasks (the shipped ``FileSystem``,
      ``OrderService`` and ``Calendar`` are known; dotted import paths always work).
    * ``user``: None (the scripted ``turns``), or a policy (or :class:`SimulatedUser`) playing the user.
    * ``stop_marker``: how the simulated user ends the conversation (default ``"###STOP###"``).
    * ``max_user_turns``: user messages of a simulated conversation (default: turns + 3).
    * ``max_tool_calls_per_turn``: tool calls within one user turn (default 16).
    * ``end_tools``: method names whose successful call ends the conversation.
    * ``max_steps`` (default 30), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_time_limit``, ``max_tool_output_chars``, ``max_tool_calls_per_step``, ``render_mode``:
      see :class:`~agent_gym.core.AgentEnv`.

    ## Version History
    * v0: first version.
    """

    default_system_prompt = (
        "You are a helpful assistant who serves a user over several turns of a conversation. Act on the user's "
        "behalf with the tools: call them with <tool_call> blocks, and each result comes back in a tool message. "
        "When you have done what the user asked, reply in plain text without a tool call: that ends your turn "
        "and the user answers. If a request is missing details you need, ask the user instead of guessing. "
        "Refuse requests that the tools or their rules do not allow."
    )

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | str | Path | None = None,
        *,
        classes: Mapping[str, type] | None = None,
        user: Any = None,
        stop_marker: str = DEFAULT_STOP_MARKER,
        max_user_turns: int | None = None,
        max_tool_calls_per_turn: int = 16,
        end_tools: Sequence[str] = ("transfer_to_human",),
        max_steps: int = 30,
        **kwargs: Any,
    ) -> None:
        if classes is not None and (not isinstance(classes, Mapping)
                                    or not all(isinstance(k, str) and isinstance(v, type)
                                               for k, v in classes.items())):
            raise TypeError(f"classes: expected a mapping of name -> class, got {classes!r:.80}")
        check_int("max_tool_calls_per_turn", max_tool_calls_per_turn, low=1)
        if max_user_turns is not None:
            check_int("max_user_turns", max_user_turns, low=1)
        if isinstance(end_tools, str) or not all(isinstance(n, str) for n in end_tools):
            raise TypeError(f"end_tools: expected a sequence of method names, got {end_tools!r}")
        self._classes: dict[str, type] = {**BUILTIN_CLASSES, **(classes or {})}
        if user is None or isinstance(user, SimulatedUser):
            self.user = user
        else:
            self.user = SimulatedUser(user, stop_marker=stop_marker)
        self.max_user_turns = max_user_turns
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.end_tools = frozenset(end_tools)
        if isinstance(tasks, (str, Path)):
            tasks = load_tasks(tasks)
        if "tools" in kwargs:
            raise TypeError("tools: ConversationEnv takes its tools from the task's classes; pass classes= instead")
        if classes:
            # The checks depend on the class map: a list is checked here, never taken from the
            # per-class cache of validated task tuples (filled by envs with other classes).
            tasks = list(self.default_tasks() if tasks is None else tasks)
        super().__init__(tasks, [], max_steps=max_steps, **kwargs)
        self._instances: dict[str, Any] = {}
        self._reference: dict[str, Any] = {}
        self._all_tools: dict[str, Tool] = {}
        self._ref_tools: dict[str, Tool] = {}
        self._methods: list[str] = []
        self._reset_turn_state()

    # ------------------------------------------------------------------ AgentEnv hooks

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Check every task against the conversation format (see :func:`check_task`)."""
        return [check_task(t, f"tasks[{i}]", self._classes) for i, t in enumerate(tasks)]

    def default_tasks(self) -> tuple[dict[str, Any], ...]:
        """The shipped tasks (one shared tuple, checked once per process)."""
        return builtin_tasks()

    def format_question(self, task: Mapping[str, Any]) -> str:
        """The first user message."""
        return task["turns"][0]["content"]

    def episode_tools(self, task: dict[str, Any]) -> list[Tool]:
        """Fresh instances of the task's classes (and reference copies); the first turn's tools."""
        self._instances, self._reference = {}, {}
        self._all_tools, self._ref_tools, self._methods = {}, {}, []
        limits = self._tool_limits
        for name in task["classes"]:
            cls = resolve_class(name, self._classes)
            config = task["initial_state"].get(name, {})
            agent_obj, ref_obj = load_instance(cls, config), load_instance(cls, config)
            self._instances[name], self._reference[name] = agent_obj, ref_obj
            for method in method_names(cls):
                self._methods.append(method)
                self._all_tools[method] = FunctionTool(CheckedMethod(getattr(agent_obj, method)), **limits)
                self._ref_tools[method] = FunctionTool(CheckedMethod(getattr(ref_obj, method)), time_limit=None)
        return [self._all_tools[m] for m in visible_methods(task, 0, self._methods)]

    def release_episode(self) -> None:
        """Drop the episode's instances and end the simulated user's session."""
        if self.user is not None and self._episode_id:
            self.user.close_session(self._user_session())
        self._instances, self._reference, self._all_tools, self._ref_tools = {}, {}, {}, {}

    # ------------------------------------------------------------------ public API

    @property
    def instances(self) -> Mapping[str, Any]:
        """The current episode's tool instances by class name (live objects; read, do not modify)."""
        return dict(self._instances)

    def states(self) -> dict[str, dict[str, Any]]:
        """The public state of each instance of the current episode (live values)."""
        return {name: public_state(obj) for name, obj in self._instances.items()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a conversation (see :meth:`AgentEnv.reset`); ``info`` adds ``turn`` and ``num_turns``."""
        obs, info = super().reset(seed=seed, options=options)
        self._reset_turn_state()
        assert self._task is not None
        self._dialogue = [("user", self._task["turns"][0]["content"])]
        info["turn"] = 0
        info["num_turns"] = len(self._task["turns"])
        return obs, info

    def step(self, action: str | PolicyOutput) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Run the message's tool calls, or end the assistant's turn and bring the next user message.

        Returns:
            ``(obs, reward, terminated, truncated, info)``; see the class docstring for ``info``.

        Raises:
            TypeError: If ``action`` is neither a ``str`` nor a ``PolicyOutput``.
            RuntimeError: If called before ``reset`` or after the episode ended.
        """
        text, finish_reason = self._begin_step(action)
        info: dict[str, Any] = {"toolcall_reward": 0.0, "res_reward": 0.0, "tool_calls": [], "turn": self._turn}
        end: tuple[bool, EpisodeStatus, str] | None = None  # (terminated, status, end_reason)
        if finish_reason in _FINISH_STATUS:
            if text or finish_reason == FinishReason.LENGTH:
                self._messages.append({"role": "assistant", "content": text})
            end = (False, _FINISH_STATUS[finish_reason], f"policy_{finish_reason}")
        else:
            self._messages.append({"role": "assistant", "content": text})
            self._turn_texts.append(text)
            parsed = self.parser.parse(text)
            if parsed.tool_calls or parsed.errors:
                if self._run_calls(parsed, info):
                    self._finish_turn(info)
                    end = (True, EpisodeStatus.ENV_DONE, "transfer")
                elif self._turn_calls >= self.max_tool_calls_per_turn:
                    end = (False, EpisodeStatus.MAX_STEPS, "tool_call_limit")
            else:
                self._dialogue.append(("assistant", text))
                self._finish_turn(info)
                end = self._next_user_message(info)
        if end is None and self._turns >= self.max_steps:
            end = (False, EpisodeStatus.MAX_STEPS, "max_steps")
        terminated = truncated = False
        if end is not None:
            terminated, truncated = end[0], not end[0]
            self._end_episode(info, end[1], end[2])
        self.attach_tools_info(info)
        reward = info["toolcall_reward"] + info["res_reward"]
        return self._observation(), reward, terminated, truncated, info

    def oracle_action(self) -> str:
        """The next message of the reference: this turn's calls not made yet, then a reply.

        The reply contains the turn's ``expected_outputs``.

        Raises:
            RuntimeError: Before ``reset`` or after the episode ended.
        """
        if self._task is None or self._done:
            raise RuntimeError("oracle_action() needs a running episode; call env.reset() first")
        turn = min(self._turn, len(self._task["turns"]) - 1)
        calls = self._task["reference"][turn] if self._turn < len(self._task["turns"]) else []
        if self._turn_calls < len(calls):
            chunk = calls[self._turn_calls: self._turn_calls + self.max_tool_calls_per_step]
            return "\n".join(format_tool_call(c["name"], c["arguments"]) for c in chunk)
        outputs = self._task["expected_outputs"][turn] if self._turn < len(self._task["turns"]) else []
        return " ".join(["Done.", *outputs]) if outputs else "Done."

    # ------------------------------------------------------------------ internals

    def _reset_turn_state(self) -> None:
        self._turn = 0  # index of the current user turn
        self._turn_calls = 0  # tool calls run in the current turn
        self._turn_texts: list[str] = []  # assistant messages of the current turn
        self._turn_scores: list[float] = []
        self._replayed = 0  # reference turns replayed on the reference instances
        self._all_texts: list[str] = []
        self._dialogue: list[tuple[str, str]] = []

    def _user_session(self) -> str:
        return f"{self._episode_id}/user"

    def _run_calls(self, parsed: ParsedResponse, info: dict[str, Any]) -> bool:
        """Run a message's tool calls within the per-message and per-turn limits; True if an end tool ran."""
        errors: list[str] = []
        useful = ended = False
        for error in parsed.errors:
            errors.append(error)
            self._messages.append({"role": "tool", "content": f"Error: {error}"})
        if parsed.errors:
            info["parse_errors"] = list(parsed.errors)
        for index, call in enumerate(parsed.tool_calls):
            record: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
            tool = self._episode_tools.get(call.name)
            kind: str | None = "too_many_calls"
            if ended:
                error = f"tool call {call.name!r} skipped: the conversation was handed over"
                kind = "tool_error"
            elif index >= self.max_tool_calls_per_step:
                error = (f"tool call {call.name!r} skipped: at most {self.max_tool_calls_per_step} "
                         f"calls are run per message")
            elif self._turn_calls >= self.max_tool_calls_per_turn:
                error = (f"tool call {call.name!r} skipped: at most {self.max_tool_calls_per_turn} "
                         f"calls are run per user turn")
            elif tool is None:
                error = f"unknown tool {call.name!r}; available tools: {', '.join(self._episode_tools) or 'none'}"
                kind = "unknown_tool"
            else:
                error = kind = None
            if error is not None:
                content = f"Error: {error}"
            else:
                assert tool is not None
                self._turn_calls += 1
                result = tool.run(call.arguments)
                error, content = result.error, result.content
                kind = getattr(result, "kind", None) or (None if error is None else "tool_error")
                if error is None:
                    useful = self.is_useful_call(call.name, call.arguments) or useful
                    ended = call.name in self.end_tools
            record.update(ok=error is None, error=error, kind=kind, output=content)
            info["tool_calls"].append(record)
            if error is not None:
                errors.append(error)
            self._messages.append({"role": "tool", "content": content})
        reward = self.rewards.tool_error * len(errors) + (self.rewards.tool_success if useful else 0.0)
        if errors:
            info["error"] = "; ".join(errors)
        info["toolcall_reward"] = reward
        return ended

    def _replay(self, upto: int) -> None:
        """Replay the reference calls of turns ``[self._replayed, upto)`` on the reference instances."""
        assert self._task is not None
        for turn in range(self._replayed, min(upto, len(self._task["reference"]))):
            for call in self._task["reference"][turn]:
                self._ref_tools[call["name"]].run(call["arguments"])
        self._replayed = max(self._replayed, upto)

    def _compare(self) -> list[str]:
        diff: list[str] = []
        for name, obj in self._instances.items():
            expected, actual = public_state(self._reference[name]), public_state(obj)
            if expected != actual:
                diff.extend(state_diff(expected, actual, name))
        return diff

    def _finish_turn(self, info: dict[str, Any]) -> None:
        """Score the turn that just ended (scripted users; a simulated user's conversation is scored at its end)."""
        assert self._task is not None
        self._all_texts.extend(self._turn_texts)
        info["turn_ended"] = True
        if self.user is not None or self._turn >= len(self._task["turns"]):
            return
        self._replay(self._turn + 1)
        diff = self._compare()
        replies = normalize_text(" ".join(self._turn_texts))
        missing = [s for s in self._task["expected_outputs"][self._turn] if normalize_text(s) not in replies]
        passed = not diff and not missing
        score = 1.0 if passed else 0.0
        self._turn_scores.append(score)
        info.update(turn_score=score, turn_passed=passed, state_diff=diff, missing_outputs=missing)
        info["res_reward"] = self.rewards.correct * score / len(self._task["turns"])

    def _score_conversation(self, info: dict[str, Any]) -> None:
        """Simulated user: check the state against the whole reference once the conversation ended."""
        assert self._task is not None
        self._all_texts.extend(self._turn_texts)
        self._turn_texts = []
        self._replay(len(self._task["turns"]))
        diff = self._compare()
        replies = normalize_text(" ".join(self._all_texts))
        missing = [s for turn in self._task["expected_outputs"] for s in turn if normalize_text(s) not in replies]
        passed = not diff and not missing
        score = 1.0 if passed else 0.0
        self._turn_scores = [score]
        info.update(turn_score=score, turn_passed=passed, state_diff=diff, missing_outputs=missing)
        info["res_reward"] = info.get("res_reward", 0.0) + self.rewards.correct * score

    def _start_turn(self, turn: int, content: str) -> None:
        """Append user message ``turn`` and offer the tools that arrive with it."""
        assert self._task is not None
        self._turn, self._turn_calls, self._turn_texts = turn, 0, []
        if turn < len(self._task["turns"]) and self._task["turns"][turn]["new_tools"]:
            self.set_episode_tools([self._all_tools[m] for m in visible_methods(self._task, turn, self._methods)])
            if self.tools_in_prompt:
                new = [self._all_tools[m].schema for m in self._task["turns"][turn]["new_tools"]]
                content = f"{content}\n\nNew tools are available:\n{describe_tools(new, include_format=False)}"
        self._messages.append({"role": "user", "content": content})
        self._dialogue.append(("user", content))

    def _next_user_message(self, info: dict[str, Any]) -> tuple[bool, EpisodeStatus, str] | None:
        """After a reply: the next scripted or simulated user message, or the end of the conversation."""
        assert self._task is not None
        turns = self._task["turns"]
        if self.user is None:
            if self._turn + 1 >= len(turns):
                return (True, EpisodeStatus.ENV_DONE, "last_turn")
            self._start_turn(self._turn + 1, turns[self._turn + 1]["content"])
            return None
        limit = self.max_user_turns if self.max_user_turns is not None else len(turns) + 3
        if self._turn + 1 >= limit:
            return (False, EpisodeStatus.MAX_STEPS, "user_turn_limit")
        reply = self.user.reply(self._task, self._dialogue, self._user_session())
        if reply.error is not None:
            info["error"] = reply.error
            return (False, EpisodeStatus.ENV_ERROR, "user_error")
        if reply.stop:
            if reply.text:
                self._dialogue.append(("user", reply.text))
            return (True, EpisodeStatus.ENV_DONE, "user_stop")
        next_turn = self._turn + 1
        self._start_turn(next_turn, reply.text or "(no message)")
        return None

    def _end_episode(self, info: dict[str, Any], status: EpisodeStatus, reason: str) -> None:
        assert self._task is not None
        if self.user is not None and reason in ("user_stop", "user_turn_limit", "transfer", "user_error"):
            self._score_conversation(info)
        info["status"] = status
        info["end_reason"] = reason
        info["turn_scores"] = list(self._turn_scores)
        expected = 1 if self.user is not None else len(self._task["turns"])
        info["success"] = len(self._turn_scores) == expected and all(s == 1.0 for s in self._turn_scores)
        self._done = True
