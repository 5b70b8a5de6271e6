"""One sub-episode: an agent with its own system prompt, tools and policy, run to its answer.

:func:`run_subagent` runs a :class:`SubagentEnv` under a
:class:`~agent_gym.wrappers.TrajectoryWrapper` (so its turns are recorded token-exact,
like any episode) on a thread of its own, with a deadline: a policy or tool that hangs
ends the sub-episode as ``TIMEOUT``, one that raises as ``POLICY_ERROR`` / ``ENV_ERROR``.
It never raises for what the agent or its policy did.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.checks import check_int, check_timeout
from agent_gym.core import AgentEnv
from agent_gym.errors import ConfigError
from agent_gym.tools import Tool
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput, StepTrajectory
from agent_gym.wrappers.trajectory import TrajectoryWrapper

__all__ = ["SubagentEnv", "SubagentRun", "SubagentSpec", "make_recorder", "run_subagent"]

DEFAULT_SUBAGENT_PROMPT = (
    "You are a helper agent. Work on the task you are given, using the tools when they help, and reply with "
    "your findings inside <answer>...</answer>."
)


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
        trajectory: Its trajectory (segments with ``role`` set; partial on a failure).
        error: Why it failed, None when it answered.
        sampled_tokens: Ids its policy sampled (over all its segments).
        reusable: False when it was left hanging (its env is still in use).
    """

    answer: str | None
    trajectory: StepTrajectory
    error: str | None = None
    sampled_tokens: int = 0
    reusable: bool = True


def _act(policy: Any, messages: Any, session_id: str, tools: Any) -> Any:
    """One blocking policy turn (``act``, else ``aact`` on a loop of its own)."""
    act = getattr(policy, "act", None)
    if callable(act):
        return act(list(messages), session_id=session_id, tools=tools)
    return asyncio.run(policy.aact(list(messages), session_id=session_id, tools=tools))


def _drive(wrapper: TrajectoryWrapper, policy: Any, session_id: str, task: dict[str, Any]) -> StepTrajectory:
    """Run the wrapped sub-episode to its end; failures end it with their status."""
    try:
        obs, info = wrapper.reset(options={"episode_id": session_id, "task": task})
    except Exception as exc:  # noqa: BLE001 - a failing env is the sub-episode's error
        return wrapper.finish(EpisodeStatus.ENV_ERROR, f"env.reset raised {type(exc).__name__}: {exc}")
    tools = info.get("policy_tools")
    while True:
        try:
            action = _act(policy, obs, session_id, tools)
        except Exception as exc:  # noqa: BLE001
            return wrapper.finish(EpisodeStatus.POLICY_ERROR, f"policy raised {type(exc).__name__}: {exc}")
        if isinstance(action, PolicyOutput) and action.finish_reason == FinishReason.ERROR:
            return wrapper.finish(EpisodeStatus.POLICY_ERROR, action.error or "policy returned an error")
        try:
            obs, _, terminated, truncated, info = wrapper.step(action)
        except Exception as exc:  # noqa: BLE001
            return wrapper.finish(EpisodeStatus.ENV_ERROR, f"env.step raised {type(exc).__name__}: {exc}")
        tools = info.get("policy_tools", tools)
        if terminated or truncated:
            return info["trajectory"]


def make_recorder(spec: SubagentSpec, wrap: Callable[[AgentEnv], Any] | None = None) -> TrajectoryWrapper:
    """The recorded env sub-episodes of ``spec`` run in (reusable from one sub-episode to the next).

    Args:
        spec: The subagent.
        wrap: Wraps its env before recording (e.g. to let it delegate in turn).
    """
    env: Any = SubagentEnv(
        [{"id": spec.role, "question": "(set per sub-episode)", "ground_truth": ""}], list(spec.tools), role=spec.role,
        system_prompt=spec.system_prompt, max_steps=spec.max_steps, parser=spec.parser,
    )
    return TrajectoryWrapper(wrap(env) if wrap is not None else env)


def run_subagent(
    spec: SubagentSpec, policy: Any, task: str, session_id: str, *, wrap: Callable[[AgentEnv], Any] | None = None,
    recorder: TrajectoryWrapper | None = None,
) -> SubagentRun:
    """Run one sub-episode on ``task`` and return its answer and trajectory.

    Args:
        spec: The subagent.
        policy: The policy to use when ``spec.policy`` is None.
        task: The task text (the sub-episode's user message).
        session_id: The sub-episode's id (its policy session).
        wrap: Wraps the sub-episode's env before recording (when no ``recorder`` is given).
        recorder: A :func:`make_recorder` env to run in (reused when the last run was not left hanging).

    Returns:
        The run; ``error`` says why it failed (status and reason); ``reusable`` whether
        ``recorder`` may run the next sub-episode.
    """
    wrapper = recorder if recorder is not None else make_recorder(spec, wrap)
    agent = spec.policy if spec.policy is not None else policy
    holder: list[StepTrajectory] = []
    question = {"id": spec.role, "question": task, "ground_truth": ""}
    thread = threading.Thread(target=lambda: holder.append(_drive(wrapper, agent, session_id, question)),
                              name=f"subagent-{session_id}", daemon=True)
    thread.start()
    thread.join(spec.timeout)
    hanging = not holder
    if hanging:  # still running: the sub-episode ends here, its thread is left to finish on its own
        trajectory = wrapper.finish(EpisodeStatus.TIMEOUT, f"subagent exceeded its timeout of {spec.timeout}s")
    else:
        trajectory = holder[0]
    try:
        agent.close_session(session_id)
    except Exception:  # noqa: BLE001, S110 - closing a session is best effort
        pass
    sampled = sum(int(s.response_masks.sum()) for s in trajectory.segments)
    base: Any = wrapper.unwrapped
    answer = base.final_answer if trajectory.status == EpisodeStatus.ENV_DONE.value else None
    error = None
    if answer is None:
        reason = trajectory.steps[-1].info.get("error") or trajectory.steps[-1].info.get("end_reason") or ""
        error = f"subagent {spec.role!r} ended with {trajectory.status} without an answer" + (
            f" ({reason})" if reason else "")
    return SubagentRun(answer=answer, trajectory=trajectory, error=error, sampled_tokens=sampled,
                       reusable=not hanging)
