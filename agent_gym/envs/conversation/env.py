"""``ConversationEnv`` (``agent_gym/Conversation-v0``): multi-turn user conversations with stateful tools."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.checks import check_int
from agent_gym.env.core import AgentEnv
from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.conversation.domains import BUILTIN_CLASSES
from agent_gym.envs.conversation.expectations import reply_problem
from agent_gym.envs.conversation.scoring import output_found, states_equal
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
from agent_gym.parsers import ParsedResponse, ResponseParser, ToolCall, format_tool_call
from agent_gym.tools import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_TIME_LIMIT,
    FunctionTool,
    Tool,
    ToolResult,
    describe_tools,
    skipped_call_result,
)
from agent_gym.types import EpisodeStatus

__all__ = ["ConversationEnv"]

# End reasons after which a simulated user's whole conversation is scored.
_SCORED_ENDS = frozenset({"user_stop", "user_turn_limit", "transfer", "user_error"})


class ConversationEnv(AgentEnv):
    """A user comes back turn after turn; the assistant acts on stateful tools; each turn's state is checked.

    ## Description
    Each task (see :mod:`agent_gym.envs.conversation.tasks` and ``task_schema.json``) names
    stateful tool classes and their initial state, the user's messages (``turns``) and, per
    turn, the calls a correct assistant makes (``solution``, played by ``oracle_action()``).
    Every episode gets fresh instances of the classes, loaded from a deep copy of
    ``initial_state``; their public methods are the tools (``excluded`` methods hidden, a
    turn's ``new_tools`` offered from that turn on).
    The shipped tasks (180, over a file system, a shop and a calendar) include turns whose
    correct action is to ask the user for a missing detail or to refuse (marked with an
    ``expect`` of kind ``clarify`` or ``refuse``, see :mod:`~agent_gym.envs.conversation.expectations`),
    and tools that appear mid-conversation.

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
    When a turn ends, the env replays the turn's ``solution`` calls on its own reference
    instances (fresh from ``initial_state``, all earlier turns replayed) and compares the
    public attributes of each instance with the episode's. The turn passes when every state
    is equal (``==``; with ``strict_state`` also the types, so ``100`` is not ``100.0``), each of
    the turn's ``expected_outputs`` occurs in the turn's reply to the user (the message without
    tool calls; case, Unicode form, thousands separators and spacing ignored: see
    :mod:`agent_gym.envs.conversation.scoring`) and, for a turn with an ``expect``, the turn meets it:

    * ``clarify`` (the right move is to ask): the reply that ends the turn asks a question
      (``?``) that names the missing detail (one of the expectation's ``terms``);
    * ``refuse``: the reply refuses (a phrase such as "can't" or "sorry") and states the
      reason (one of ``terms``);
    * both: the state at the end of the turn equals the state at its start, so a turn
      that performs the requested action fails even when the reply asks or refuses.

    A reply that does neither (``"ok, sure thing"``) fails such a turn. A turn without
    ``expect`` (task files written before it existed) is graded on the state and
    ``expected_outputs`` only. ``res_reward`` of that step = ``correct * passed / len(turns)``,
    so a fully solved episode earns ``correct``. With a simulated user the whole solution is
    checked once, at the end of the conversation, for ``correct * passed`` (state and
    ``expected_outputs``; ``expect`` is not graded, since the user may give a detail before
    being asked). ``toolcall_reward`` shapes tool use as in :class:`~agent_gym.env.core.AgentEnv`.

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

    Every step's ``info`` has ``turn`` (the user turn the step belongs to) and ``num_turns``; a
    step that ends a turn adds ``turn_ended``, ``turn_score``, ``turn_passed``, ``state_diff`` (readable lines,
    e.g. ``"OrderService.orders['O-2']['status']: expected 'cancelled', got 'pending'"``),
    ``missing_outputs``, ``expectation`` (``"clarify"``, ``"refuse"`` or None) and
    ``expectation_problems`` (why the turn missed it, e.g. ``"the reply asks no question; ..."``);
    a step that brings new tools carries ``tools``.

    ## Arguments
    * ``tasks``: task dicts, or the path of a JSONL / JSON file of them; default: the shipped tasks.
    * ``classes``: ``{"Name": cls}`` for class names used by tasks (the shipped ``FileSystem``,
      ``OrderService`` and ``Calendar`` are known; dotted import paths always work).
    * ``user``: None (the scripted ``turns``), or a policy (or :class:`SimulatedUser`) playing the user.
    * ``stop_marker``: how the simulated user ends the conversation (default ``"###STOP###"``).
    * ``max_user_turns``: user messages of a simulated conversation (default: turns + 3).
    * ``max_tool_calls_per_turn``: tool calls within one user turn (default 16).
    * ``end_tools``: method names whose successful call ends the conversation.
    * ``strict_state``: compare states with their types (``100`` differs from ``100.0``, as the
      benchmark's state hash does); default False: ``==``, since a model may write a JSON
      number either way without changing its meaning.
    * ``tools``: not accepted (:class:`~agent_gym.errors.ConfigError`): the tools are the methods
      of each task's classes (see :attr:`tools_not_accepted`).
    * ``max_steps`` (default 30), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser`` (the model's formats by vLLM's names),
      ``tool_time_limit``, ``max_tool_output_chars``, ``max_tool_calls_per_step``, ``render_mode``:
      see :class:`~agent_gym.env.core.AgentEnv`.

    ## Version History
    * v0: the oracle's data is ``solution`` (``reference`` is still read); ``tools=`` raises
      :class:`~agent_gym.errors.ConfigError`; turns whose right move is to ask or to refuse carry
      an ``expect`` that the reply must meet (before, any reply passed them); first version.
    """

    default_system_prompt = (
        "You are a helpful assistant who serves a user over several turns of a conversation. Act on the user's "
        "behalf with the tools: call them with <tool_call> blocks, and each result comes back in a tool message. "
        "When you have done what the user asked, reply in plain text without a tool call: that ends your turn "
        "and the user answers. If a request is missing details you need, ask the user instead of guessing. "
        "Refuse requests that the tools or their rules do not allow."
    )

    tools_not_accepted = "its tools are the methods of each task's classes; pass classes= to name your own classes"

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | str | Path | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        classes: Mapping[str, type] | None = None,
        user: Any = None,
        stop_marker: str = DEFAULT_STOP_MARKER,
        max_user_turns: int | None = None,
        max_tool_calls_per_turn: int = 16,
        end_tools: Sequence[str] = ("transfer_to_human",),
        strict_state: bool = False,
        max_steps: int = 30,
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
        self.strict_state = bool(strict_state)
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.end_tools = frozenset(end_tools)
        if isinstance(tasks, (str, Path)):
            tasks = load_tasks(tasks)
        if classes:
            # The checks depend on the class map: a list is checked here, never taken from the
            # per-class cache of validated task tuples (filled by envs with other classes).
            tasks = list(self.default_tasks() if tasks is None else tasks)
        self._instances: dict[str, Any] = {}
        self._reference: dict[str, Any] = {}
        self._all_tools: dict[str, Tool] = {}
        self._ref_tools: dict[str, Tool] = {}
        self._methods: list[str] = []
        self._reset_turn_state()
        super().__init__(tasks, tools, max_steps=max_steps, tools_in_prompt=tools_in_prompt,
                         system_prompt=system_prompt, rewards=rewards, parser=parser,
                         tool_parser=tool_parser, reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)

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
        self._reset_turn_state()
        self._dialogue.append(("user", task["turns"][0]["content"]))
        self._instances, self._reference = {}, {}
        self._all_tools, self._ref_tools, self._methods = {}, {}, []
        for name in task["classes"]:
            cls = resolve_class(name, self._classes)
            config = task["initial_state"].get(name, {})
            agent_obj, ref_obj = load_instance(cls, config), load_instance(cls, config)
            self._instances[name], self._reference[name] = agent_obj, ref_obj
            for method in method_names(cls):
                self._methods.append(method)
                self._all_tools[method] = FunctionTool(CheckedMethod(getattr(agent_obj, method)),
                                                       time_limit=self.tool_time_limit,
                                                       max_output_chars=self.max_tool_output_chars)
                self._ref_tools[method] = FunctionTool(CheckedMethod(getattr(ref_obj, method)), time_limit=None)
        self._snapshot_if_expected(task, 0)
        return [self._all_tools[m] for m in visible_methods(task, 0, self._methods)]

    def release_episode(self) -> None:
        """Drop the episode's instances and end the simulated user's session."""
        if self.user is not None and self.episode_id:
            self.user.close_session(self._user_session())
        self._instances, self._reference, self._all_tools, self._ref_tools = {}, {}, {}, {}

    def handle_message(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """Run the message's tool calls, or take it as the reply that ends the assistant's turn."""
        info["turn"] = self._turn
        self._turn_texts.append(parsed.text)
        if parsed.tool_calls or parsed.errors:
            self.run_tool_calls(parsed, info)
            if self._handed_over:
                self._finish_turn(info)
            elif self._turn_calls >= self.max_tool_calls_per_turn:
                self.end_episode(EpisodeStatus.MAX_STEPS, "tool_call_limit")
        else:
            self._dialogue.append(("assistant", parsed.text))
            self._turn_reply = parsed.content
            self._all_replies.append(parsed.content)
            self._finish_turn(info)
            self._next_user_message(info)

    def gate_tool_call(self, call: ToolCall, index: int) -> ToolResult | None:
        """The base limits, then at most ``max_tool_calls_per_turn`` calls per user turn."""
        refused = super().gate_tool_call(call, index)
        if refused is None and self._turn_calls >= self.max_tool_calls_per_turn:
            refused = skipped_call_result(call.name, self.max_tool_calls_per_turn, per="user turn")
        return refused

    def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """Count the turn's calls; a successful end tool hands the conversation over (ENV_DONE)."""
        self._turn_calls += 1
        if result.error is None and call.name in self.end_tools:
            self._handed_over = True
            self.end_episode(EpisodeStatus.ENV_DONE, "transfer")

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """Score a simulated user's whole conversation; add ``turn_scores`` and ``success`` to ``info``."""
        task = self.task
        assert task is not None
        grade = Grade.ungraded()
        if self.user is not None and reason in _SCORED_ENDS:
            grade = Grade.scored(self._score_conversation(info))
        info["turn_scores"] = list(self._turn_scores)
        expected = 1 if self.user is not None else len(task["turns"])
        info["success"] = len(self._turn_scores) == expected and all(s == 1.0 for s in self._turn_scores)
        return grade

    def episode_info(self) -> dict[str, Any]:
        """``turn`` (the current user turn) and ``num_turns`` (scripted turns of the task)."""
        return {"turn": self._turn, "num_turns": len((self.task or {}).get("turns", ()))}

    # ------------------------------------------------------------------ public API

    @property
    def instances(self) -> Mapping[str, Any]:
        """The current episode's tool instances by class name (live objects; read, do not modify)."""
        return dict(self._instances)

    def states(self) -> dict[str, dict[str, Any]]:
        """The public state of each instance of the current episode (live values)."""
        return {name: public_state(obj) for name, obj in self._instances.items()}

    def oracle_action(self) -> str:
        """The next message of the solution: this turn's calls not made yet, then a reply.

        The reply is the turn's ``expect["reply"]`` (the question or the refusal) when the turn
        has an expectation, else ``"Done."``, followed by the turn's ``expected_outputs``.

        Raises:
            RuntimeError: Before ``reset`` or after the episode ended.
        """
        task = self.task
        if task is None or not self.episode_running:
            raise RuntimeError("oracle_action() needs a running episode; call env.reset() first")
        turn = min(self._turn, len(task["turns"]) - 1)
        calls = task["solution"][turn] if self._turn < len(task["turns"]) else []
        if self._turn_calls < len(calls):
            chunk = calls[self._turn_calls: self._turn_calls + self.max_tool_calls_per_step]
            return "\n".join(format_tool_call(c["name"], c["arguments"]) for c in chunk)
        if self._turn >= len(task["turns"]):
            return "Done."
        expect = task["turns"][turn]["expect"]
        return " ".join([expect["reply"] if expect is not None else "Done.", *task["expected_outputs"][turn]])

    # ------------------------------------------------------------------ internals

    def _reset_turn_state(self) -> None:
        self._turn = 0  # index of the current user turn
        self._turn_calls = 0  # tool calls run in the current turn
        self._turn_texts: list[str] = []  # assistant messages of the current turn
        self._turn_scores: list[float] = []
        self._replayed = 0  # solution turns replayed on the reference instances
        self._all_texts: list[str] = []
        self._all_replies: list[str] = []  # the replies to the user (messages without tool calls)
        self._dialogue: list[tuple[str, str]] = []
        self._handed_over = False  # an end tool succeeded
        self._turn_reply = ""  # the reply (thought removed) that ended the current turn
        self._turn_start_state: dict[str, Any] | None = None  # state at the start of a turn with ``expect``

    def _user_session(self) -> str:
        return f"{self.episode_id}/user"

    def _replay(self, upto: int) -> None:
        """Replay the solution calls of turns ``[self._replayed, upto)`` on the reference instances."""
        task = self.task
        assert task is not None
        for turn in range(self._replayed, min(upto, len(task["solution"]))):
            for call in task["solution"][turn]:
                self._ref_tools[call["name"]].run(call["arguments"])
        self._replayed = max(self._replayed, upto)

    def _compare(self) -> list[str]:
        diff: list[str] = []
        for name, obj in self._instances.items():
            expected, actual = public_state(self._reference[name]), public_state(obj)
            if not states_equal(expected, actual, self.strict_state):
                diff.extend(state_diff(expected, actual, name, strict=self.strict_state))
        return diff

    def _finish_turn(self, info: dict[str, Any]) -> None:
        """Score the turn that just ended (scripted users; a simulated user's conversation is scored at its end)."""
        task = self.task
        assert task is not None
        self._all_texts.extend(self._turn_texts)
        info["turn_ended"] = True
        if self.user is not None or self._turn >= len(task["turns"]):
            return
        self._replay(self._turn + 1)
        diff = self._compare()
        replies = [self._turn_reply] if self._turn_reply else []
        missing = [s for s in task["expected_outputs"][self._turn] if not output_found(s, replies)]
        expect = task["turns"][self._turn]["expect"]
        problems = self._expectation_problems(expect) if expect is not None else []
        passed = not diff and not missing and not problems
        score = 1.0 if passed else 0.0
        self._turn_scores.append(score)
        info.update(turn_score=score, turn_passed=passed, state_diff=diff, missing_outputs=missing,
                    expectation=None if expect is None else expect["kind"], expectation_problems=problems)
        info["res_reward"] = self.rewards.correct * score / len(task["turns"])

    def _score_conversation(self, info: dict[str, Any]) -> float:
        """Simulated user: the state against the whole solution once the conversation ended (1.0 or 0.0)."""
        task = self.task
        assert task is not None
        self._all_texts.extend(self._turn_texts)
        self._turn_texts = []
        self._replay(len(task["turns"]))
        diff = self._compare()
        missing = [s for turn in task["expected_outputs"] for s in turn if not output_found(s, self._all_replies)]
        passed = not diff and not missing
        score = 1.0 if passed else 0.0
        self._turn_scores = [score]
        info.update(turn_score=score, turn_passed=passed, state_diff=diff, missing_outputs=missing,
                    expectation=None, expectation_problems=[])
        return score

    def _snapshot_if_expected(self, task: Mapping[str, Any], turn: int) -> None:
        """Keep a copy of the state at the start of a scripted turn that has an expectation."""
        expected = self.user is None and turn < len(task["turns"]) and task["turns"][turn]["expect"] is not None
        self._turn_start_state = copy.deepcopy(self.states()) if expected else None

    def _expectation_problems(self, expect: Mapping[str, Any]) -> list[str]:
        """Why the turn that just ended misses its ``expect``: the reply, then any change of the state."""
        problems = []
        problem = reply_problem(expect, self._turn_reply)
        if problem is not None:
            problems.append(problem)
        before = self._turn_start_state
        if before is not None:
            changed = [line for name, obj in self._instances.items()
                       for line in state_diff(before[name], public_state(obj), name)]
            if changed:
                problems.append(f"the state must not change on this turn; it did: {changed[0]}"
                                + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""))
        return problems

    def _start_turn(self, turn: int, content: str) -> None:
        """Append user message ``turn`` and offer the tools that arrive with it."""
        task = self.task
        assert task is not None
        self._turn, self._turn_calls, self._turn_texts, self._turn_reply = turn, 0, [], ""
        self._snapshot_if_expected(task, turn)
        if turn < len(task["turns"]) and task["turns"][turn]["new_tools"]:
            self.set_episode_tools([self._all_tools[m] for m in visible_methods(task, turn, self._methods)])
            if self.tools_in_prompt:
                new = [self._all_tools[m].schema for m in task["turns"][turn]["new_tools"]]
                content = f"{content}\n\nNew tools are available:\n{describe_tools(new, include_format=False)}"
        self.add_message("user", content)
        self._dialogue.append(("user", content))

    def _next_user_message(self, info: dict[str, Any]) -> None:
        """After a reply: the next scripted or simulated user message, or the end of the conversation."""
        task = self.task
        assert task is not None
        turns = task["turns"]
        if self.user is None:
            if self._turn + 1 >= len(turns):
                self.end_episode(EpisodeStatus.ENV_DONE, "last_turn")
            else:
                self._start_turn(self._turn + 1, turns[self._turn + 1]["content"])
            return
        limit = self.max_user_turns if self.max_user_turns is not None else len(turns) + 3
        if self._turn + 1 >= limit:
            self.end_episode(EpisodeStatus.MAX_STEPS, "user_turn_limit")
            return
        reply = self.user.reply(task, self._dialogue, self._user_session())
        if reply.error is not None:
            info["error"] = reply.error
            self.end_episode(EpisodeStatus.ENV_ERROR, "user_error")
        elif reply.stop:
            if reply.text:
                self._dialogue.append(("user", reply.text))
            self.end_episode(EpisodeStatus.ENV_DONE, "user_stop")
        else:
            self._start_turn(self._turn + 1, reply.text or "(no message)")
