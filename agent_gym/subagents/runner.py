"""One sub-episode: an agent with its own system prompt, tools and policy, run to its answer.

:func:`run_subagent` runs a :class:`SubagentEnv` through the one episode loop
(:func:`~agent_gym.rollout.episode.episode_loop`, driven on the caller's thread) and records its turns' ids with a
:class:`~agent_gym.wrappers.trajectory_builder.TrajectoryBuilder` (token-exact, one
prefix check per turn, like any episode), keeping only what the parent needs: the
answer, the segments and how the sub-episode ended. It never raises for what the agent
or its policy did: a policy that raises ends it as ``POLICY_ERROR``, an env that raises
as ``ENV_ERROR``, one past its time limit as ``TIMEOUT``.

The time limit (``SubagentSpec.timeout``) is kept one of two ways (``SubagentSpec.deadline``):

* ``"inline"``: the sub-episode runs on the caller's thread and the deadline is checked
  before each policy turn. A turn in progress is bounded by the policy itself (an
  agent_gym policy's client timeout, a local model's token budget), a tool call by the
  tool's own time limit (a blocking tool with a ``time_limit`` runs on a pooled thread and
  is abandoned at its limit). No thread hand-off per sub-episode.
* ``"thread"``: the sub-episode runs on a thread of its own and the caller stops waiting
  at the deadline (a hard limit for a policy that may block without end); the thread is
  left to finish on its own and records nothing more.
* ``"auto"`` (default): ``"inline"`` for agent_gym's own policies
  (:class:`~agent_gym.policy.base.AsyncPolicyBase`: their turns end, with an error past
  the client timeout), ``"thread"`` for any other policy object.

The segments' ``first_step`` / ``last_step`` index the sub-episode's own steps (its k-th
assistant message is step k), not the parent's.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.checks import check_choice, check_int, check_timeout
from agent_gym.env.core import AgentEnv
from agent_gym.errors import ConfigError
from agent_gym.policy.base import AsyncPolicyBase
from agent_gym.rollout.episode import ActCall, EndEpisode, EpisodeCall, ResetCall, TurnCall, drive, episode_loop
from agent_gym.tools import Tool
from agent_gym.types import EpisodeStatus, PolicyOutput, Segment
from agent_gym.utils.runtime import call_outcome
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

__all__ = [
    "SubagentEnv",
    "SubagentRun",
    "SubagentRunner",
    "SubagentSpec",
    "make_recorder",
    "make_subagent_env",
    "run_subagent",
]

DEFAULT_SUBAGENT_PROMPT = (
    "You are a helper agent. Work on the task you are given, using the tools when they help, and reply with "
    "your findings inside <answer>...</answer>."
)
DEADLINES = ("auto", "inline", "thread")


@dataclass
class SubagentSpec:
    """What a subagent is and the limits it runs under.

    Attributes:
        role: The subagent's role name (its segments' ``role``).
        system_prompt: Its system message.
        tools: Its tools (e.g. a read-only subset of the parent's), tools or callables.
        policy: Its policy; None uses the parent's.
        max_steps: Assistant messages per sub-episode.
        timeout: Seconds a sub-episode may take; past it, it ends as ``TIMEOUT``.
        max_depth: How deep subagents may nest (1: a subagent cannot delegate).
        max_count: Sub-episodes per parent episode.
        max_tokens: Sampled tokens over all sub-episodes of a parent episode (None: no limit);
            once spent, ``delegate`` answers with an error.
        parser: Its tool-call parser (an object or a parser name; None: hermes tags).
        deadline: How ``timeout`` is kept: ``"inline"``, ``"thread"`` or ``"auto"`` (see the module docs).
    """

    role: str = "subagent"
    system_prompt: str = DEFAULT_SUBAGENT_PROMPT
    tools: Sequence[Tool | Callable[..., Any]] = field(default_factory=list)
    policy: Any = None
    max_steps: int = 4
    timeout: float = 60.0
    max_depth: int = 1
    max_count: int = 4
    max_tokens: int | None = None
    parser: Any = None
    deadline: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or not self.role:
            raise ConfigError(f"role: expected a non-empty str, got {self.role!r}")
        check_int("max_steps", self.max_steps, low=1)
        check_int("max_depth", self.max_depth, low=1)
        check_int("max_count", self.max_count, low=0)
        if self.max_tokens is not None:
            check_int("max_tokens", self.max_tokens, low=1)
        if check_timeout("timeout", self.timeout) is None:
            raise ConfigError("timeout: a subagent needs a time limit, got None")
        check_choice("deadline", self.deadline, DEADLINES)

    def deadline_for(self, policy: Any) -> str:
        """``"inline"`` or ``"thread"``: how a sub-episode driven by ``policy`` keeps its time limit."""
        if self.deadline != "auto":
            return self.deadline
        return "inline" if isinstance(policy, AsyncPolicyBase) else "thread"


class SubagentEnv(AgentEnv):
    """The env of one sub-episode: the task as the question, the given tools, no grading.

    ``agent_role`` names the role (the segments' ``role``); ``final_answer`` is the text
    of the ``<answer>`` that ended the episode, None until then.
    """

    default_system_prompt = DEFAULT_SUBAGENT_PROMPT

    def __init__(self, *args: Any, role: str = "subagent", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_role = role
        self.final_answer: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a sub-episode (``options["task"]``: its task)."""
        self.final_answer = None
        return super().reset(seed=seed, options=options)

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """Keep the answer (the parent's tool output); a sub-episode has no reward of its own."""
        self.final_answer = answer
        return 0.0


@dataclass
class SubagentRun:
    """The outcome of one sub-episode.

    Attributes:
        answer: Its final answer, None when it ended without one.
        segments: Its segments (``role`` set; its own subagents' after its own, with their
            lineage; ``first_step`` / ``last_step`` index the sub-episode's steps); partial on a failure.
        status: How it ended (an ``EpisodeStatus`` value).
        steps: Its steps (assistant messages the env took).
        error: Why it failed, None when it answered.
        sampled_tokens: Ids its policy sampled (over all its segments).
        reusable: False when it was left running on its thread (its env is still in use).
    """

    answer: str | None
    segments: list[Segment]
    status: str
    steps: int = 0
    error: str | None = None
    sampled_tokens: int = 0
    reusable: bool = True


def _act(policy: Any, messages: Any, session_id: str, tools: Any) -> Any:
    """One blocking policy turn (``act``, else ``aact`` on a loop of its own)."""
    act = getattr(policy, "act", None)
    if callable(act):
        return act(list(messages), session_id=session_id, tools=tools)
    return asyncio.run(policy.aact(list(messages), session_id=session_id, tools=tools))


class _SubEpisode:
    """Drives one sub-episode and records its ids; ``close`` freezes it (later turns are dropped)."""

    def __init__(self, env: Any, role: str, session_id: str) -> None:
        self.env = env
        self.builder = TrajectoryBuilder(session_id, role=role)
        self.session_id = session_id
        self.lock = threading.Lock()
        self.closed = False
        self.steps = 0
        self.sampled = 0  # ids sampled by its policy and by its own subagents'
        self.status: EpisodeStatus | None = None
        self.reason = ""

    def close(self, status: EpisodeStatus, reason: str = "") -> bool:
        """End the sub-episode with ``status`` unless it already ended; True when this call ended it."""
        with self.lock:
            if self.closed:
                return False
            self.closed, self.status, self.reason = True, status, reason
            return True

    def drive(self, policy: Any, task: dict[str, Any], deadline: float | None) -> None:
        """Run to the end (``deadline``: ``time.monotonic()`` past which no new turn starts)."""
        options: dict[str, Any] = {"task": task}
        if getattr(self.env, "accepts_episode_id", False):
            options["episode_id"] = self.session_id
        ending = drive(episode_loop(None, options), functools.partial(self._execute, policy, deadline))
        reason = ending.reason
        if ending.done:
            reason = str(ending.info.get("error") or ending.info.get("end_reason") or "")
        self.close(ending.status, reason)  # no-op when it was ended from outside

    def _execute(self, policy: Any, deadline: float | None, call: EpisodeCall) -> Any:
        """Do one call of the episode loop (see :mod:`agent_gym.rollout.episode`)."""
        if isinstance(call, ResetCall):
            return self.env.reset(seed=call.seed, options=call.options)
        if isinstance(call, TurnCall):
            if self.closed:
                raise EndEpisode(self.status or EpisodeStatus.TIMEOUT, self.reason)
            if deadline is not None and time.monotonic() >= deadline:
                raise EndEpisode(EpisodeStatus.TIMEOUT, "the time limit passed before its next turn")
            return None
        if isinstance(call, ActCall):
            return _act(policy, call.obs, self.session_id, call.tools)
        action = call.action
        result = self.env.step(action)
        info = result[4]
        with self.lock:
            if self.closed:  # ended from outside (its deadline) while this turn ran
                raise EndEpisode(self.status or EpisodeStatus.TIMEOUT, self.reason)
            if isinstance(action, PolicyOutput):
                self.sampled += self.builder.add_output(self.steps, action).get("num_sampled_tokens", 0)
            for run in info.get("agent_segments") or []:  # its own subagents (nested delegation)
                spawned = bool(run.get("spawned", True))
                self.builder.add_child(run["segments"], spawn_step=self.steps, spawned=spawned)
                self.sampled += sum(int(s.response_masks.sum()) for s in run["segments"])
            self.steps += 1
        return result

    def segments(self) -> list[Segment]:
        """The segments recorded so far."""
        with self.lock:
            return self.builder.segments()


def make_subagent_env(spec: SubagentSpec, wrap: Callable[[AgentEnv], Any] | None = None) -> Any:
    """The env sub-episodes of ``spec`` run in (reusable from one sub-episode to the next).

    Args:
        spec: The subagent.
        wrap: Wraps its env (e.g. to let it delegate in turn).
    """
    env: Any = SubagentEnv(
        [{"id": spec.role, "question": "(set per sub-episode)", "ground_truth": ""}], list(spec.tools), role=spec.role,
        system_prompt=spec.system_prompt, max_steps=spec.max_steps, parser=spec.parser,
    )
    return wrap(env) if wrap is not None else env


make_recorder = make_subagent_env
"""Former name of :func:`make_subagent_env`."""


def run_subagent(
    spec: SubagentSpec, policy: Any, task: str, session_id: str, *, wrap: Callable[[AgentEnv], Any] | None = None,
    env: Any = None,
) -> SubagentRun:
    """Run one sub-episode on ``task`` and return its answer and segments.

    Args:
        spec: The subagent.
        policy: The policy to use when ``spec.policy`` is None.
        task: The task text (the sub-episode's user message).
        session_id: The sub-episode's id (its policy session).
        wrap: Wraps the sub-episode's env (when no ``env`` is given).
        env: A :func:`make_subagent_env` env to run in (reusable when the last run's ``reusable``).

    Returns:
        The run; ``error`` says why it failed (status and reason); ``reusable`` whether
        ``env`` may run the next sub-episode.
    """
    env = env if env is not None else make_subagent_env(spec, wrap)
    agent = spec.policy if spec.policy is not None else policy
    question = {"id": spec.role, "question": task, "ground_truth": ""}
    episode = _SubEpisode(env, spec.role, session_id)
    left_running = False
    if spec.deadline_for(agent) == "inline":
        episode.drive(agent, question, time.monotonic() + spec.timeout)
    else:
        # past the timeout the drive is abandoned on its worker thread and the episode closed here
        call_outcome(episode.drive, spec.timeout, agent, question, None)
        left_running = episode.close(EpisodeStatus.TIMEOUT, f"exceeded its timeout of {spec.timeout}s")
    try:
        agent.close_session(session_id)
    except Exception:  # noqa: BLE001, S110 - closing a session is best effort
        pass
    status = episode.status or EpisodeStatus.TIMEOUT
    segments = episode.segments()
    base: Any = env.unwrapped
    answer = base.final_answer if status == EpisodeStatus.ENV_DONE else None
    error = None
    if answer is None:
        error = f"subagent {spec.role!r} ended with {status.value} without an answer" + (
            f" ({episode.reason})" if episode.reason else "")
    return SubagentRun(answer=answer, segments=segments, status=status.value, steps=episode.steps, error=error,
                       sampled_tokens=episode.sampled, reusable=not left_running)


class SubagentRunner:
    """Runs the sub-episodes of one subagent, one after another, on one env kept between them.

    The env is built on first use and reused through ``reset``; it is rebuilt only after a
    sub-episode that was left running on it (past its time limit, ``deadline="thread"``) or
    that ended with ``ENV_ERROR`` (the env may be in a bad state).

    Args:
        spec: The subagent.
        policy: The policy to use when ``spec.policy`` is None (the parent's).
        wrap: Wraps its env (e.g. to let it delegate in turn).
    """

    def __init__(self, spec: SubagentSpec, policy: Any, wrap: Callable[[AgentEnv], Any] | None = None) -> None:
        self.spec = spec
        self.policy = policy
        self.wrap = wrap
        self.env_builds = 0
        self._env: Any = None

    def run(self, task: str, session_id: str) -> SubagentRun:
        """Run one sub-episode on ``task`` (see :func:`run_subagent`)."""
        if self._env is None:
            self._env = make_subagent_env(self.spec, self.wrap)
            self.env_builds += 1
        run = run_subagent(self.spec, self.policy, task, session_id, env=self._env)
        if not run.reusable:
            self._env = None  # a sub-episode left running still holds it
        elif run.status == EpisodeStatus.ENV_ERROR.value:
            self.close()
        return run

    def close(self) -> None:
        """Close the env (a later run builds a new one)."""
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001, S110 - closing a broken env is best effort
                pass
