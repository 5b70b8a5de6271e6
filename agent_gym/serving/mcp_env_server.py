"""An agent_gym env's tools served over MCP (streamable HTTP): one MCP session is one episode.

``agent-gym serve-env ID --mcp`` serves :func:`create_mcp_env_app`. An MCP-speaking agent harness
connects, and its session's first request resets a fresh ``gym.make(ID)`` env on one of the env's
tasks. The session lists the episode's tools plus two of the server's own:

* ``episode_task()``: the task (the env's system and user messages, the task id); not a step.
* ``episode_submit(answer)``: the final answer; the step that scores it ends the episode and its
  result carries the reward (structured content: ``reward``, ``episode_reward``, ``res_reward``,
  ``status``, ``end_reason``).

Every call of an env tool is one env step, an assistant message holding that call written in the
env's call format, so the env's limits, shaping and error observations apply as for a model: the
result's text is the tool message, ``isError`` says the call failed, and the structured content
has the step's ``reward``, ``terminated``, ``truncated`` (and ``status`` at the end). After the
episode ended, calls are errors; a new episode is a new MCP session. Sessions idle for longer than
``session_idle_timeout`` are closed (their env too).

A session may name, on its requests, the env task to reset on (header ``x-agent-gym-task``: a task
id of the env) and the ``agent-gym gateway`` session that samples its turns (header
``x-agent-gym-session``). With ``gateway=`` (``--gateway URL``) the server ends that gateway session
with the episode's reward and status when the episode ends (``TIMEOUT`` for an episode closed
unfinished), so the gateway's record holds the harness's exact tokens and the env's reward; the
outcome of that post is the ``gateway`` entry of the final result's structured content.

Requires the ``mcp`` extra with the 2.x server API (``mcp.server.lowlevel.Server`` taking its
handlers as arguments).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio

from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.serving.gateway_rewards import GATEWAY_SESSION_HEADER, TASK_HEADER, GatewayRewards

__all__ = ["SUBMIT_TOOL", "TASK_TOOL", "EnvSessions", "create_mcp_env_app"]

TASK_TOOL = "episode_task"
"""The server's tool that returns the episode's task."""

SUBMIT_TOOL = "episode_submit"
"""The server's tool that submits the final answer (the step that ends the episode and pays its reward)."""

_OWN_TOOLS = (
    {"name": TASK_TOOL, "description": "The task of this episode: the instructions and the question to solve.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": SUBMIT_TOOL, "description": "Submit the final answer of this episode; this ends the episode and "
                                         "returns its reward.",
     "inputSchema": {"type": "object", "properties": {"answer": {"type": "string", "description": "The answer."}},
                     "required": ["answer"]}},
)


class _Episode:
    """One session's env and episode."""

    def __init__(self, env: Any, gateway_session: str | None) -> None:
        self.env = env
        self.gateway_session = gateway_session
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        self.task_id = ""
        self.total = 0.0
        self.ended: dict[str, Any] | None = None
        self.last_used = time.monotonic()


class EnvSessions:
    """The episodes of the sessions of one MCP env server.

    Args:
        env_id: A registered env id.
        env_kwargs: ``gym.make`` keyword arguments.
        max_sessions: Most episodes held at once (the idlest is closed to make room).
        session_idle_timeout: Seconds after which an idle session's episode is closed.
        gateway: Ends the gateway session a session names with its episode's reward (None: sessions
            naming one are told the server has no gateway).
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, max_sessions: int = 64,
                 session_idle_timeout: float = 1800.0, gateway: GatewayRewards | None = None) -> None:
        import gymnasium as gym

        import agent_gym  # noqa: F401 - registers the ids

        if env_id not in gym.registry:
            raise ConfigError(f"env id {env_id!r} is not registered")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.max_sessions = max_sessions
        self.session_idle_timeout = session_idle_timeout
        self.gateway = gateway
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()

    def episode(self, session: str, *, task_id: str | None = None, gateway_session: str | None = None) -> _Episode:
        """The session's episode, reset on the session's first request.

        Args:
            session: The MCP session.
            task_id: The id of the env task to reset on (None: a random one of the env's tasks).
            gateway_session: The gateway session that samples this episode's turns (paid at its end).

        Raises:
            ValueError: ``task_id`` is not the id of one of the env's tasks.
        """
        with self._lock:
            episode = self._episodes.get(session)
            stale = self._stale(exclude=session)
        for old in stale:
            self._close(old)
        if episode is not None:
            episode.last_used = time.monotonic()
            return episode
        import gymnasium as gym

        env = gym.make(self.env_id, **self.env_kwargs)
        options: dict[str, Any] = {}
        if task_id is not None:
            tasks: list[dict[str, Any]] = getattr(env.unwrapped, "tasks", [])
            index = next((i for i, t in enumerate(tasks) if str(t.get("id")) == task_id), None)
            if index is None:
                env.close()
                raise ValueError(f"{TASK_HEADER}: {self.env_id} has no task with id {task_id!r:.200}")
            options["task_index"] = index
        episode = _Episode(env, gateway_session)
        obs, info = env.reset(options=options)
        episode.messages = [dict(m) for m in obs]
        episode.task_id = str(info.get("task", {}).get("id", ""))
        with self._lock:
            self._episodes.setdefault(session, episode)
            winner = self._episodes[session]
        if winner is not episode:
            env.close()
        return winner

    def _stale(self, exclude: str) -> list[_Episode]:
        now = time.monotonic()
        stale = [k for k, e in self._episodes.items()
                 if k != exclude and now - e.last_used > self.session_idle_timeout]
        idle = sorted((e.last_used, k) for k, e in self._episodes.items() if k != exclude and k not in stale)
        while len(self._episodes) - len(stale) >= self.max_sessions and idle:
            stale.append(idle.pop(0)[1])
        return [self._episodes.pop(k) for k in stale]

    def _close(self, episode: _Episode) -> None:
        """Close an episode's env; one that had not ended ends ``TIMEOUT`` (its gateway session too)."""
        with episode.lock:
            if episode.ended is None:
                self._end(episode, {"status": "TIMEOUT", "end_reason": "mcp_session_closed",
                                    "episode_reward": episode.total, "res_reward": 0.0})
            else:
                episode.env.close()

    def _end(self, episode: _Episode, ended: dict[str, Any]) -> None:
        """End an episode (holding its lock): close its env and pay its gateway session, if it names one."""
        episode.ended = ended
        episode.env.close()
        if episode.gateway_session is None:
            return
        if self.gateway is None:
            ended["gateway"] = {"ok": False, "session_id": episode.gateway_session,
                                "error": "this server has no gateway to pay (serve-env --gateway URL)"}
            return
        # An infrastructure failure is paid nothing a trainer would learn from: its status masks it.
        reward = episode.total if ended["status"] in ("ENV_DONE", "MAX_STEPS", "TRUNCATION") else 0.0
        ended["gateway"] = self.gateway.post(episode.gateway_session, reward, ended["status"])

    def close(self) -> None:
        """Close every episode's env."""
        with self._lock:
            episodes, self._episodes = list(self._episodes.values()), {}
        for episode in episodes:
            self._close(episode)

    def tools(self, session: str, **link: str | None) -> list[dict[str, Any]]:
        """The session's tools as MCP wire dicts (the episode's, then the server's own).

        ``link``: :meth:`episode`'s ``task_id`` and ``gateway_session``.
        """
        episode = self.episode(session, **link)
        with episode.lock:
            schemas = episode.env.unwrapped.tool_schemas
        tools = [{"name": s["function"]["name"], "description": s["function"].get("description", ""),
                  "inputSchema": s["function"].get("parameters") or {"type": "object", "properties": {}}}
                 for s in schemas]
        return tools + [dict(t) for t in _OWN_TOOLS]

    def call(self, session: str, name: str, arguments: Mapping[str, Any], **link: str | None) -> dict[str, Any]:
        """Run one call of the session's episode; returns a ``CallToolResult`` wire dict.

        ``link``: :meth:`episode`'s ``task_id`` and ``gateway_session``.
        """
        try:
            episode = self.episode(session, **link)
        except ValueError as exc:
            return _result(str(exc), None, error=True)
        with episode.lock:
            if name == TASK_TOOL:
                text = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in episode.messages)
                return _result(text, {"task_id": episode.task_id, "messages": episode.messages})
            if episode.ended is not None:
                return _result(f"the episode ended ({episode.ended['status']}); start a new MCP session for a new "
                               "episode", dict(episode.ended), error=True)
            env = episode.env.unwrapped
            if name == SUBMIT_TOOL:
                answer = arguments.get("answer")
                if not isinstance(answer, str):
                    return _result("episode_submit: expected a string 'answer'", None, error=True)
                action = f"<answer>{answer}</answer>"
            else:
                action = env.parser.format_calls([(name, dict(arguments))])
            try:
                obs, reward, terminated, truncated, info = episode.env.step(action)
            except Exception as exc:  # noqa: BLE001 - a failing env ends its episode, not the server
                self._end(episode, {"status": "ENV_ERROR", "end_reason": f"env.step raised {type(exc).__name__}",
                                    "episode_reward": episode.total, "res_reward": 0.0})
                assert episode.ended is not None
                return _result(f"the environment failed: {type(exc).__name__}: {exc}", dict(episode.ended),
                               error=True)
            episode.total += float(reward)
            state: dict[str, Any] = {"reward": float(reward), "terminated": bool(terminated),
                                     "truncated": bool(truncated)}
            if terminated or truncated:
                self._end(episode, {"status": str(getattr(info.get("status"), "value", info.get("status"))),
                                    "end_reason": info.get("end_reason"), "episode_reward": episode.total,
                                    "res_reward": float(info.get("res_reward", 0.0))})
                assert episode.ended is not None
                state.update(episode.ended)
            if name == SUBMIT_TOOL:
                return _result(f"submitted; reward {episode.total:g} ({state.get('status', 'running')})", state)
            calls = info.get("tool_calls") or []
            output = calls[0]["output"] if calls else str(obs[-1]["content"])
            return _result(output, state, error=bool(calls) and not calls[0]["ok"])


def _result(text: str, structured: Any, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": error}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def _session_of(ctx: Any) -> str:
    """The MCP session of a request: its ``Mcp-Session-Id`` header (else the server-side session object)."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return str(session_id) if session_id else f"connection-{id(getattr(ctx, 'session', None))}"


def _link_of(ctx: Any) -> dict[str, str | None]:
    """The task id and gateway session a request names (headers; used on the session's first request)."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    if headers is None:
        return {"task_id": None, "gateway_session": None}
    return {"task_id": headers.get(TASK_HEADER) or None, "gateway_session": headers.get(GATEWAY_SESSION_HEADER) or None}


def create_mcp_env_app(env_id: str, *, env_kwargs: Mapping[str, Any] | None = None, max_sessions: int = 64,
                       session_idle_timeout: float = 1800.0, host: str = "127.0.0.1", path: str = "/mcp",
                       gateway: GatewayRewards | None = None) -> tuple[Any, EnvSessions]:
    """The streamable HTTP app serving ``env_id``'s tools at ``path``, and its :class:`EnvSessions`.

    ``gateway``: pays the gateway sessions that MCP sessions name (see the module's docstring).

    Raises:
        ConfigError: An unknown env id.
        MissingExtraError: ``mcp`` (2.x) is not installed.
    """
    try:
        from mcp import types
        from mcp.server.lowlevel import Server
    except ImportError as exc:
        raise MissingExtraError("mcp", "mcp") from exc
    sessions = EnvSessions(env_id, env_kwargs, max_sessions=max_sessions, session_idle_timeout=session_idle_timeout,
                           gateway=gateway)

    async def list_tools(ctx: Any, params: Any) -> Any:
        tools = await anyio.to_thread.run_sync(lambda: sessions.tools(_session_of(ctx), **_link_of(ctx)))
        return types.ListToolsResult.model_validate({"tools": tools})

    async def call_tool(ctx: Any, params: Any) -> Any:
        arguments = dict(params.arguments or {})
        result = await anyio.to_thread.run_sync(
            lambda: sessions.call(_session_of(ctx), params.name, arguments, **_link_of(ctx)))
        return types.CallToolResult.model_validate(result)

    try:
        server = Server(f"agent-gym {env_id}", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    except TypeError as exc:  # 1.x: handlers are registered with decorators
        raise MissingExtraError("mcp>=2 (serve-env --mcp uses the 2.x server API)", "mcp") from exc
    app = server.streamable_http_app(streamable_http_path=path, host=host, max_sessions=max_sessions,
                                     session_idle_timeout=session_idle_timeout)
    return app, sessions
