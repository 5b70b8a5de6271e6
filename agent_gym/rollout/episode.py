"""The policy-drives-env loop of one episode, written once: :func:`episode_loop`.

Every place that plays an episode (the :class:`~agent_gym.rollout.runner.EpisodeRunner`,
a subagent's sub-episode, the oracle conversations of the tiny agent's data) runs this loop:
reset, then turns of *act* (the policy) and *step* (the env) until the env ends the episode
or something fails. The loop does no I/O itself: it is a generator that yields what it needs
done (:class:`ResetCall`, :class:`TurnCall`, :class:`ActCall`, :class:`StepCall`) and is sent
the results. An executor runs the calls: :func:`drive` on the caller's thread, :func:`adrive`
with awaitables (the runner's threads and event loop). An executor's exception is thrown into
the loop at the call that raised it, which turns it into how the episode ended (an
:class:`Ending`): ``ENV_ERROR`` for ``reset``/``step``, ``POLICY_ERROR`` for the policy. An
executor ends an episode early (a time or turn budget) by raising :class:`EndEpisode`.

Example:
    >>> from agent_gym.rollout.episode import drive, episode_loop
    >>> ending = drive(episode_loop(seed=0), execute)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput

__all__ = [
    "ActCall",
    "EndEpisode",
    "Ending",
    "EpisodeCall",
    "ResetCall",
    "StepCall",
    "TurnCall",
    "adrive",
    "drive",
    "episode_loop",
    "error_text",
]


def error_text(exc: BaseException) -> str:
    """``"TypeName: message"`` of an exception (how failures are recorded)."""
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class ResetCall:
    """Reset the env; send back ``(obs, info)``.

    Attributes:
        seed: The reset seed.
        options: The reset options.
    """

    seed: int | None
    options: dict[str, Any] | None


@dataclass(frozen=True)
class TurnCall:
    """A policy turn is about to start; send back None, or raise :class:`EndEpisode` to end here.

    Attributes:
        turn: The turn's index (0 for the first).
    """

    turn: int


@dataclass(frozen=True)
class ActCall:
    """Ask the policy for the next assistant message; send back the action.

    Attributes:
        obs: The observation (the conversation the policy sees).
        tools: The tool schemas to give the policy (None: none, or described in the prompt).
        turn: The turn's index.
    """

    obs: Any
    tools: Any
    turn: int


@dataclass(frozen=True)
class StepCall:
    """Step the env with the action; send back the 5-tuple.

    Attributes:
        action: The policy's action (a ``PolicyOutput`` or a str).
        turn: The turn's index.
    """

    action: Any
    turn: int


EpisodeCall = ResetCall | TurnCall | ActCall | StepCall
"""What :func:`episode_loop` asks its executor to do."""


@dataclass
class Ending:
    """How an episode ended.

    Attributes:
        status: Its status.
        reason: Why (empty when the env ended it normally).
        info: The last info the env returned (the reset's when no step ran).
        done: Whether the env ended it (terminated or truncated).
        turns: Steps the env took.
        failed_call: ``"reset"``, ``"act"`` or ``"step"`` when that call raised, else None.
        exception: The exception that ended it, if one did.
    """

    status: EpisodeStatus
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    turns: int = 0
    failed_call: str | None = None
    exception: BaseException | None = None

    @property
    def env_failed(self) -> bool:
        """Whether the env raised (it may be left in a bad state)."""
        return self.failed_call in ("reset", "step")


class EndEpisode(Exception):  # noqa: N818 - a signal from an executor, not an error
    """Raised by an executor to end the episode at the current call.

    Args:
        status: The episode's status.
        reason: Why it ended.
    """

    def __init__(self, status: EpisodeStatus, reason: str = "") -> None:
        super().__init__(reason)
        self.status = EpisodeStatus(status)
        self.reason = reason


class _Tools:
    """The tool schemas the policy gets, as the env's infos change them."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.in_prompt = bool(info.get("tools_in_prompt"))
        if "policy_tools" in info:  # a TrajectoryWrapper says which
            self.current = info["policy_tools"]
        else:
            self.current = None if self.in_prompt else (info.get("tools") or None)

    def update(self, info: dict[str, Any]) -> None:
        """Take a step's info: the tool set may change during an episode."""
        if "policy_tools" in info:
            self.current = info["policy_tools"]
        elif "tools" in info:  # the episode's tools changed; [] means they were removed
            self.current = None if self.in_prompt else list(info["tools"] or [])


def episode_loop(
    seed: int | None = None, options: dict[str, Any] | None = None
) -> Generator[EpisodeCall, Any, Ending]:
    """The loop of one episode, as a generator of calls (see the module docs).

    Args:
        seed: The reset seed.
        options: The reset options (``task``, ``episode_id``, ...).

    Returns:
        (as the generator's return value) how the episode ended. Never raises for what the env
        or the policy did; a ``BaseException`` thrown in (a cancellation) propagates.
    """
    try:
        obs, info = yield ResetCall(seed, options)
    except EndEpisode as end:
        return Ending(end.status, end.reason)
    except Exception as exc:  # noqa: BLE001 - a failing env ends this episode only
        return Ending(EpisodeStatus.ENV_ERROR, f"env.reset raised {error_text(exc)}", failed_call="reset",
                      exception=exc)
    tools = _Tools(info)
    turn = 0
    while True:
        try:
            yield TurnCall(turn)
            action = yield ActCall(obs, tools.current, turn)
        except EndEpisode as end:
            return Ending(end.status, end.reason, info, turns=turn)
        except Exception as exc:  # noqa: BLE001 - a failing policy ends this episode only
            return Ending(EpisodeStatus.POLICY_ERROR, f"policy raised {error_text(exc)}", info, turns=turn,
                          failed_call="act", exception=exc)
        if isinstance(action, PolicyOutput) and action.finish_reason == FinishReason.ERROR:
            return Ending(EpisodeStatus.POLICY_ERROR, action.error or "policy returned an error", info, turns=turn)
        try:
            obs, _, terminated, truncated, info = yield StepCall(action, turn)
        except EndEpisode as end:
            return Ending(end.status, end.reason, info, turns=turn + 1)
        except Exception as exc:  # noqa: BLE001
            return Ending(EpisodeStatus.ENV_ERROR, f"env.step raised {error_text(exc)}", info, turns=turn,
                          failed_call="step", exception=exc)
        turn += 1
        tools.update(info)
        if terminated or truncated:
            status = info.get("status") or (EpisodeStatus.ENV_DONE if terminated else EpisodeStatus.MAX_STEPS)
            return Ending(EpisodeStatus(str(status)), info=info, done=True, turns=turn)


def drive(loop: Generator[EpisodeCall, Any, Ending], execute: Callable[[EpisodeCall], Any]) -> Ending:
    """Run ``loop`` to its end on this thread, each call done by ``execute``.

    Args:
        loop: An :func:`episode_loop`.
        execute: Does a call and returns its result (its ``Exception`` goes to the loop).

    Returns:
        How the episode ended.
    """
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                call = loop.send(value) if error is None else loop.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                value, error = execute(call), None
            except Exception as exc:  # noqa: BLE001 - handed to the loop
                value, error = None, exc
    finally:
        loop.close()


async def adrive(loop: Generator[EpisodeCall, Any, Ending],
                 execute: Callable[[EpisodeCall], Awaitable[Any]]) -> Ending:
    """Run ``loop`` to its end, each call awaited from ``execute`` (see :func:`drive`).

    A cancellation of the awaiting task propagates (the loop is closed).
    """
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                call = loop.send(value) if error is None else loop.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                value, error = await execute(call), None
            except Exception as exc:  # noqa: BLE001 - handed to the loop
                value, error = None, exc
    finally:
        loop.close()
