"""A remote OpenEnv environment stepped as an agent_gym env.

:class:`OpenEnvEnv` connects to an OpenEnv server (``openenv-core``'s WebSocket session
protocol at ``/ws``: ``reset`` / ``step`` / ``state`` / ``close`` messages, one env instance per
connection, spoken with a blocking ``websockets`` client, without an event-loop thread) and
presents it with agent_gym's contract: the observation is the conversation so far, the action
the assistant message (a ``str`` or a :class:`~agent_gym.types.PolicyOutput`), so ``collect``
and ``TrajectoryWrapper`` drive it unchanged and a rollout can run its envs on other machines.

Two kinds of servers:

* an agent_gym env served by ``agent-gym serve-env`` (its observations carry ``messages``): the
  conversation, rewards, ``terminated`` / ``truncated`` and the step info are the remote env's
  own, and ``reset(options={"task": ...})`` sends the task;
* any other OpenEnv env: the assistant message goes into the action field ``action_field``
  (``{"message": text}`` by default, or ``action_fn(text)`` builds the action dict); each
  observation becomes a user message, its field ``observation_field`` or, by default, the
  observation's JSON without ``done`` / ``reward`` / ``metadata``; the reward is OpenEnv's
  ``reward`` (the outcome, ``res_reward``), ``done`` terminates, ``max_steps`` truncates.

A server that fails or goes away (a refused connection, a closed WebSocket, an error message,
no answer within ``message_timeout``) raises :class:`~agent_gym.errors.EnvServerError` naming
the server, so the rollout ends that episode ``ENV_ERROR``, never a zero reward.

Requires the ``openenv`` extra (``pip install 'agent-gym[openenv]'``).

Example:
    >>> env = OpenEnvEnv("http://127.0.0.1:8200")  # doctest: +SKIP
    >>> trajectories = collect(lambda: OpenEnvEnv("http://10.0.0.5:8200"), policy, num_episodes=64)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from agent_gym.env.spaces import AssistantMessageSpace, ConversationSpace
from agent_gym.errors import EnvServerError, MissingExtraError
from agent_gym.types import PolicyOutput

__all__ = ["OpenEnvEnv"]

_BOOKKEEPING = ("done", "reward", "metadata")
_MAX_MESSAGE = 100 * 2**20  # observations may be large (OpenEnv's client allows 100 MB too)


def _observation(result: Mapping[str, Any]) -> dict[str, Any]:
    value = result.get("observation")
    return dict(value) if isinstance(value, Mapping) else {}


class OpenEnvEnv(gym.Env):
    """An OpenEnv server's environment as an agent_gym env (see the module docs).

    Action Space:
        :class:`~agent_gym.env.spaces.AssistantMessageSpace`: the assistant message.

    Observation Space:
        :class:`~agent_gym.env.spaces.ConversationSpace`: the conversation so far.

    Rewards:
        The remote env's: a served agent_gym env's step reward, or OpenEnv's ``reward`` field.

    Episode End:
        The remote env's end (``terminated``), its step limit or ``max_steps`` (``truncated``).

    Arguments:
        url: The server's ``http://`` or ``ws://`` address.
        action_field: Field of the action that receives the assistant message (other envs).
        action_fn: Builds the action dict from the message text instead (other envs).
        observation_field: Field whose value is the observation text (other envs; default: the
            observation's JSON).
        system_prompt: A system message leading the conversation (other envs).
        max_steps: Step limit (other envs; None: the remote env's own end only).
        reset_kwargs: More fields of every remote ``reset``.
        connect_timeout: Seconds to open the WebSocket.
        message_timeout: Seconds to wait for each answer.
        render_mode: ``"ansi"`` or None.
        token: Sent as ``Authorization: Bearer TOKEN`` (a server started with ``--token``); default
            ``$AGENT_GYM_ENV_TOKEN`` when set.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        url: str,
        *,
        action_field: str = "message",
        action_fn: Callable[[str], Mapping[str, Any]] | None = None,
        observation_field: str | None = None,
        system_prompt: str | None = None,
        max_steps: int | None = None,
        reset_kwargs: Mapping[str, Any] | None = None,
        connect_timeout: float = 10.0,
        message_timeout: float = 60.0,
        render_mode: str | None = None,
        token: str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"url: expected an http:// or ws:// address of an OpenEnv server, got {url!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps: expected an int >= 1 or None, got {max_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode: expected None or 'ansi', got {render_mode!r}")
        self.url = url.rstrip("/")
        self.action_field = action_field
        self.action_fn = action_fn
        self.observation_field = observation_field
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.reset_kwargs = dict(reset_kwargs or {})
        self.connect_timeout = connect_timeout
        self.message_timeout = message_timeout
        self.render_mode = render_mode
        self.token = token if token is not None else os.environ.get("AGENT_GYM_ENV_TOKEN") or None
        self.action_space = AssistantMessageSpace()
        self.observation_space = ConversationSpace()
        self._client: Any = None
        self._messages: list[dict[str, str]] = []
        self._served = False  # the server is an agent_gym env (its observations carry messages)
        self._steps = 0
        self._done = True

    # ------------------------------------------------------------------ connection
    def _connect(self) -> Any:
        if self._client is None:
            try:
                from websockets.sync.client import connect
            except ImportError as exc:
                raise MissingExtraError("openenv-core", "openenv") from exc
            scheme, rest = self.url.split("://", 1)
            ws_url = f"{'wss' if scheme in ('https', 'wss') else 'ws'}://{rest}/ws"
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
            self._client = self._call("connect", connect, ws_url, open_timeout=self.connect_timeout,
                                      max_size=_MAX_MESSAGE, compression=None, additional_headers=headers)
        return self._client

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every client failure is the server's, named with it
            self._drop()
            raise EnvServerError(f"OpenEnv server {self.url}: {what} failed ({type(exc).__name__}: {exc})",
                                 url=self.url) from exc

    def _request(self, kind: str, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One message of OpenEnv's WebSocket session protocol and its answer's ``data``."""
        socket = self._connect()
        message = {"type": kind} if data is None else {"type": kind, "data": dict(data)}

        def exchange() -> Any:
            socket.send(json.dumps(message, default=str))
            return json.loads(socket.recv(timeout=self.message_timeout))

        answer = self._call(kind, exchange)
        if not isinstance(answer, dict) or answer.get("type") == "error" or not isinstance(answer.get("data"), dict):
            detail = answer.get("data") if isinstance(answer, dict) else answer
            self._drop()
            raise EnvServerError(f"OpenEnv server {self.url}: {kind} failed ({str(detail)[:300]})", url=self.url)
        return answer["data"]

    def _drop(self) -> None:
        socket, self._client = self._client, None
        if socket is not None:
            try:
                socket.send(json.dumps({"type": "close"}))
                socket.close()
            except Exception:  # noqa: BLE001, S110 - the connection is already gone
                pass

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a remote episode; ``options["task"]`` goes to the server's ``reset(task=...)``."""
        super().reset(seed=seed)
        options = dict(options or {})
        kwargs = dict(self.reset_kwargs)
        if seed is not None:
            kwargs["seed"] = seed
        if options.get("task") is not None:
            kwargs["task"] = options["task"]
        if options.get("episode_id"):
            kwargs["episode_id"] = str(options["episode_id"])
        result = self._request("reset", kwargs)
        observation = _observation(result)
        self._served = isinstance(observation.get("messages"), list)
        self._steps = 0
        self._done = False
        info: dict[str, Any] = {"openenv_url": self.url}
        if self._served:
            self._messages = [dict(m) for m in observation["messages"]]
            info.update(observation.get("info") or {})
        else:
            self._messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            self._messages.append({"role": "user", "content": self._text(observation)})
            if options.get("task") is not None:
                info["task"] = options["task"]
        return tuple(dict(m) for m in self._messages), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Send the assistant message; returns the remote env's answer in agent_gym's terms."""
        if self._done:
            raise RuntimeError("OpenEnvEnv.step: expected reset() first (the episode ended or never began)")
        text = action.text if isinstance(action, PolicyOutput) else str(action)
        payload = dict(self.action_fn(text)) if self.action_fn is not None else {self.action_field: text}
        result = self._request("step", payload)
        observation = _observation(result)
        self._steps += 1
        reward = float(result.get("reward") or 0.0)
        if self._served and isinstance(observation.get("messages"), list):
            self._messages = [dict(m) for m in observation["messages"]]
            terminated, truncated = bool(observation.get("terminated")), bool(observation.get("truncated"))
            if result.get("done") and not (terminated or truncated):
                terminated = True
            info = dict(observation.get("info") or {})
        else:
            self._messages += [{"role": "assistant", "content": text},
                               {"role": "user", "content": self._text(observation)}]
            terminated = bool(result.get("done"))
            truncated = not terminated and self.max_steps is not None and self._steps >= self.max_steps
            info = {"toolcall_reward": 0.0, "res_reward": reward, "tool_calls": [],
                    "metadata": observation.get("metadata") or {}}
        self._done = terminated or truncated
        return tuple(dict(m) for m in self._messages), reward, terminated, truncated, info

    def state(self) -> dict[str, Any]:
        """The remote env's state in this session."""
        return self._request("state")

    def render(self) -> str | None:
        """The conversation as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self._messages)

    def close(self) -> None:
        """Close the session (the server releases its env instance)."""
        self._drop()
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a pickled env reconnects on its next reset
        return state

    # ------------------------------------------------------------------ helpers
    def _text(self, observation: Mapping[str, Any]) -> str:
        if self.observation_field is not None:
            value = observation.get(self.observation_field)
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        rest = {k: v for k, v in observation.items() if k not in _BOOKKEEPING}
        return json.dumps(rest, ensure_ascii=False, default=str)
