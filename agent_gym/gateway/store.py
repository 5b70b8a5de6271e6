"""The sessions of one gateway: created with their API keys, found, finished and written.

:class:`SessionStore` opens :class:`~agent_gym.gateway.session.GatewaySession` objects (each
with an API key of its own unless a client created it by use), finds them by id or key, checks
rewards against the gateway's range when a session is finished, and streams finished sessions to
a :class:`~agent_gym.export.TrajectoryWriter`.
"""

from __future__ import annotations

import builtins
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from agent_gym.errors import RequestError
from agent_gym.gateway.session import GatewaySession
from agent_gym.parsers import ResponseParser, as_parser
from agent_gym.serving.auth import new_token, tokens_equal
from agent_gym.types import StepTrajectory

__all__ = ["DEFAULT_REWARD_RANGE", "SessionStore"]

DEFAULT_REWARD_RANGE = (-10.0, 10.0)
"""Rewards a session accepts by default (each value; ``SessionStore(reward_range=...)`` changes it)."""

_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class SessionStore:
    """The sessions of one gateway.

    Args:
        parser: Tool-call parser of new sessions (default hermes tags).
        gamma: Discount of ``mc_return``.
        writer: A :class:`~agent_gym.export.TrajectoryWriter` receiving each finished session.
        auto_create: Create a session on first use of an unknown id (else such requests get 404).
        keep_finished: How many finished sessions stay readable through ``/trajectory``.
        strict_tool_calls: Answer a turn whose tool call is malformed with a 422 error instead of
            its text (the turn is recorded either way).
        reward_range: ``(low, high)``: every reward a session is finished with must lie within it
            (default :data:`DEFAULT_REWARD_RANGE`; None: any finite number).
    """

    def __init__(
        self,
        *,
        parser: ResponseParser | None = None,
        gamma: float = 1.0,
        writer: Any = None,
        auto_create: bool = False,
        keep_finished: int = 10000,
        strict_tool_calls: bool = False,
        reward_range: tuple[float, float] | None = DEFAULT_REWARD_RANGE,
    ) -> None:
        if reward_range is not None:
            low, high = (float(v) for v in reward_range)
            if not low <= high or abs(low) == float("inf") or abs(high) == float("inf"):
                raise ValueError(f"reward_range: expected finite (low, high) with low <= high, got {reward_range!r}")
            reward_range = (low, high)
        self.reward_range = reward_range
        self.parser = as_parser(parser)
        self.strict_tool_calls = strict_tool_calls
        self.finish_hooks: builtins.list[Callable[[str], None]] = []  # called with the id of each finished session
        self.gamma = gamma
        self.writer = writer
        self.auto_create = auto_create
        self.keep_finished = keep_finished
        self._open: dict[str, GatewaySession] = {}
        self._finished: OrderedDict[str, GatewaySession] = OrderedDict()
        self._keys: dict[str, GatewaySession] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()

    def create(
        self, session_id: str | None = None, task: Any = None, *, group_id: str = "", env_id: str = "", idx: int = 0,
        open_access: bool = False,
    ) -> GatewaySession:
        """Open a new session (a random id by default) with its own API key.

        Args:
            session_id: The id; a random one by default.
            task: Anything JSON-like describing the task (stored in the trajectory).
            group_id: Shared by the sessions sampling the same task (an advantage group).
            env_id: Names the agent or env driving the session.
            idx: Index of the episode in the caller's batch.
            open_access: No key: a client samples in it by naming it (sessions created by use).

        Raises:
            RequestError: The id is malformed or already used (409), or a label has the wrong type (400).
        """
        session_id = session_id or uuid.uuid4().hex
        if not isinstance(session_id, str) or not _ID_PATTERN.match(session_id):
            raise RequestError(f"session_id: expected 1-128 characters of [A-Za-z0-9._:-], got {session_id!r}",
                               param="session_id")
        for name, value in (("group_id", group_id), ("env_id", env_id)):
            if not isinstance(value, str):
                raise RequestError(f"{name}: expected a string, got {value!r}", param=name)
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise RequestError(f"idx: expected an int >= 0, got {idx!r}", param="idx")
        with self._lock:
            if session_id in self._open or session_id in self._finished:
                raise RequestError(f"session {session_id!r} already exists", status=409, kind="ConflictError")
            key = None if open_access else new_token("sk-agw")
            session = GatewaySession(
                session_id, task=task, parser=self.parser, gamma=self.gamma, group_id=group_id, env_id=env_id, idx=idx,
                api_key=key, reward_range=self.reward_range,
            )
            self._open[session_id] = session
            if key is not None:
                self._keys[key] = session
            return session

    def get(self, session_id: str, *, create: bool = False) -> GatewaySession:
        """The session ``session_id`` (open or finished).

        Raises:
            RequestError: Unknown id (404), unless ``create`` and the store auto-creates.
        """
        with self._lock:
            session = self._open.get(session_id) or self._finished.get(session_id)
        if session is not None:
            return session
        if create and self.auto_create:
            try:
                return self.create(session_id, open_access=True)
            except RequestError as exc:
                if exc.status == 409:  # created concurrently
                    return self.get(session_id)
                raise
        raise RequestError(f"unknown session {session_id!r}: create it first (POST /sessions)", status=404,
                           kind="NotFoundError", param="session_id")

    def known(self, session_id: str) -> bool:
        """Whether ``session_id`` names a session (open or finished)."""
        return session_id in self._open or session_id in self._finished

    def by_key(self, key: str | None) -> GatewaySession | None:
        """The session whose API key is ``key`` (open or finished), else None."""
        if not key:
            return None
        session = self._keys.get(key)
        if session is None or session.api_key is None or not tokens_equal(key, session.api_key):
            return None
        return session

    def finish(self, session: GatewaySession, policy: Any = None, **kwargs: Any) -> StepTrajectory:
        """Finish ``session`` (see :meth:`GatewaySession.finish`), write it and release its policy state."""
        trajectory = session.finish(**kwargs)
        with self._lock:
            self._open.pop(session.id, None)
            self._finished[session.id] = session
            while len(self._finished) > self.keep_finished:
                _, dropped = self._finished.popitem(last=False)
                if dropped.api_key is not None:
                    self._keys.pop(dropped.api_key, None)
        if policy is not None:
            for policy_session in session.policy_sessions:
                policy.close_session(policy_session)
        for hook in self.finish_hooks:
            hook(session.id)
        if self.writer is not None:
            with self._write_lock:
                self.writer.write(trajectory)
        return trajectory

    def list(self) -> builtins.list[dict[str, Any]]:  # the method shadows the builtin in the class body
        """``[{"session_id", "status", "steps"}]`` of every session held."""
        with self._lock:
            sessions = list(self._open.values()) + list(self._finished.values())
        return [{"session_id": s.id, "status": s.finished.status if s.finished else "open", "steps": len(s.steps)}
                for s in sessions]

    @property
    def open_ids(self) -> builtins.list[str]:
        """Ids of the sessions not finished yet."""
        with self._lock:
            return list(self._open)
