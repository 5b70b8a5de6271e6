"""``agent-gym serve-env``'s application: OpenEnv's server around an env that resets only to its own tasks.

A client of a served env picks a task the server was started with; it never hands the server
a task of its own unless the operator allows it:

* ``reset(seed=s)`` draws one of the env's tasks with the seed, ``reset(task_id="...")`` (or
  ``options={"task_id": ...}`` / ``{"task_index": i}``) names one;
* a ``task`` object whose ``id`` is one of the env's tasks runs **the server's copy** of that task
  (what ``OpenEnvEnv`` sends under ``collect`` when both sides hold the same task list);
* any other ``task`` is refused (403) unless the server runs with ``--allow-client-tasks``; even
  then it must be a JSON object without the keys the env reads as host paths (the env class's
  ``HOST_PATH_TASK_KEYS``, e.g. SWE-v0's ``repo_path`` or Terminal-v0's ``path``), so a client
  never makes the server read a file or directory of its own choosing.

``options`` may hold only ``task_id`` and ``task_index``. Every refusal is a 4xx (HTTP) or an
error message (WebSocket sessions); ``POST /step`` on the stateless HTTP route, which has no
episode, answers 409. Error bodies are written so that whatever a client sent (``NaN``, lone
surrogates) can be echoed without failing (:func:`safe_errors`), and a body holding a lone
surrogate escape is refused with 400 before OpenEnv's handlers echo it (:class:`NoLoneSurrogates`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from agent_gym.errors import ConfigError

__all__ = ["OPTION_KEYS", "NoLoneSurrogates", "create_env_server", "host_path_keys", "safe_errors",
           "served_environment_class", "served_reset_options"]

OPTION_KEYS = frozenset({"task_id", "task_index"})
"""The reset ``options`` a client may send."""


def host_path_keys(env: Any) -> tuple[str, ...]:
    """The task keys ``env`` reads as host paths (dotted for nested ones; its class's ``HOST_PATH_TASK_KEYS``)."""
    return tuple(getattr(type(env), "HOST_PATH_TASK_KEYS", ()) or ())


def _has_key(task: Mapping[str, Any], dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in task:
        return False
    if not rest:
        return True
    inner = task[head]
    return isinstance(inner, Mapping) and _has_key(inner, rest)


def _http_error(status: int, message: str) -> Exception:
    from fastapi import HTTPException

    return HTTPException(status_code=status, detail=message)


def served_reset_options(env: Any, *, seed: Any = None, task: Any = None, task_id: Any = None, options: Any = None,
                         client_tasks: bool = False) -> dict[str, Any]:
    """The ``options`` of ``env.reset`` for a client's reset request (see the module docs).

    Args:
        env: The unwrapped env (its ``tasks`` are the served tasks).
        seed: The client's seed.
        task: The client's task object.
        task_id: The client's task id.
        options: The client's reset options.
        client_tasks: Whether the operator allows tasks from clients.

    Raises:
        fastapi.HTTPException: 400 for a malformed request or an unknown task, 403 for a task the
            server does not take.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise _http_error(400, f"seed: expected an int in [0, 2**63), got {seed!r:.80}")
    opts = dict(options) if isinstance(options, Mapping) else {}
    if options is not None and not isinstance(options, Mapping):
        raise _http_error(400, f"options: expected an object, got {type(options).__name__}")
    unknown = sorted(str(k) for k in opts if k not in OPTION_KEYS)
    if unknown:
        raise _http_error(400, f"options: only {sorted(OPTION_KEYS)} may be sent, got {unknown}")
    if task_id is not None:
        if "task_id" in opts and opts["task_id"] != task_id:
            raise _http_error(400, "task_id: given twice with different values")
        opts["task_id"] = task_id
    tasks = list(getattr(env, "tasks", None) or [])
    ids: dict[str, int] = {}
    for index, served in enumerate(tasks):
        if isinstance(served, Mapping) and "id" in served:
            ids.setdefault(str(served["id"]), index)
    if "task_id" in opts:
        name = opts.pop("task_id")
        if not isinstance(name, str) or name not in ids:
            raise _http_error(400, f"task_id: expected the id of one of the server's {len(tasks)} tasks, "
                                   f"got {name!r:.80}")
        opts["task_index"] = ids[name]
    if "task_index" in opts:
        index = opts["task_index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tasks):
            raise _http_error(400, f"task_index: expected an int in [0, {len(tasks)}), got {index!r:.80}")
    if task is None:
        return opts
    if "task_index" in opts:
        raise _http_error(400, "task: expected either a task or a task id/index, got both")
    if isinstance(task, Mapping) and isinstance(task.get("id"), str) and task["id"] in ids:
        return {"task_index": ids[task["id"]]}  # one of the server's tasks: the server's copy runs
    if not client_tasks:
        raise _http_error(403, "task: this server resets only to its own tasks (send seed or task_id); the "
                               "operator can allow client tasks with --allow-client-tasks")
    if not isinstance(task, Mapping):
        raise _http_error(400, f"task: expected a JSON object, got {type(task).__name__}")
    named = [key for key in host_path_keys(env) if _has_key(task, key)]
    if named:
        raise _http_error(403, f"task: {named} name host paths; a client's task may not (the server reads no "
                               "file or directory a client chooses)")
    return {"task": dict(task)}


@functools.cache
def served_environment_class() -> type:
    """The OpenEnv environment class of ``agent-gym serve-env`` (agent_gym's, resetting as the module docs say)."""
    from agent_gym.integrations.openenv import openenv_types

    base = openenv_types()[3]

    class ServedEnvironment(base):  # type: ignore[misc, valid-type]
        """One served env instance (one per session), taking only the server's tasks from clients."""

        def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], client_tasks: bool = False) -> None:
            super().__init__(env_id, env_kwargs)
            self.client_tasks = client_tasks
            self._started = False

        def reset(self, seed: int | None = None, episode_id: str | None = None, task: Any = None,
                  task_id: str | None = None, options: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
            opts = served_reset_options(self.env.unwrapped, seed=seed, task=task, task_id=task_id, options=options,
                                        client_tasks=self.client_tasks)
            if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 256):
                raise _http_error(400, "episode_id: expected a string of at most 256 characters")
            try:
                observation = super().reset(seed=seed, episode_id=episode_id, options=opts)
            except (ValueError, TypeError) as exc:  # the env refused the task (the client's doing)
                raise _http_error(400, f"reset: {exc}") from None
            self._started = True
            return observation

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            if not self._started:
                raise _http_error(409, "step: no episode; reset first (HTTP /step runs on a fresh env: use the /ws "
                                       "session protocol for episodes)")
            return super().step(action, timeout_s, **kwargs)

    ServedEnvironment.__module__ = __name__
    return ServedEnvironment


def _plain(value: Any) -> Any:
    """``value`` as JSON-safe data: non-finite floats become their names, unknown objects their ``str``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def safe_errors(app: Any) -> Any:
    """Answer validation errors and HTTP errors of ``app`` with bodies any input can be echoed in.

    FastAPI's own handlers echo the client's input and fail (a 500) on ``NaN`` or lone surrogates.
    """
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response

    def answer(status: int, detail: Any, headers: Mapping[str, str] | None = None) -> Response:
        body = json.dumps({"detail": _plain(detail)}, ensure_ascii=True, allow_nan=False)
        return Response(body, status_code=status, media_type="application/json", headers=dict(headers or {}))

    async def invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return answer(422, exc.errors())

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return answer(exc.status_code, exc.detail, exc.headers)

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    return app


class NoLoneSurrogates:
    r"""ASGI middleware: a JSON body with a lone UTF-16 surrogate escape (``"\ud800"``) gets a 400.

    Such a string is valid JSON text but no Unicode text: answers that echo it cannot be encoded.
    Only bodies holding ``\u`` are parsed to find out.

    Args:
        app: The ASGI application.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one connection scope, an HTTP body checked first."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if b"\\u" in body:
            import orjson

            try:
                orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                if "surrogate" in str(exc):
                    from agent_gym.serving.auth import send_answer

                    detail = json.dumps({"detail": f"the body holds a lone surrogate escape ({exc}): not text"})
                    await send_answer(send, 400, detail.encode(), "application/json")
                    return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_env_server(env_id: str, *, max_sessions: int = 64, env_kwargs: Mapping[str, Any] | None = None,
                      client_tasks: bool = False) -> Any:
    """OpenEnv's FastAPI server for ``gym.make(env_id, **env_kwargs)`` resetting as the module docs say.

    Args:
        env_id: A registered agent_gym env id.
        max_sessions: Most concurrent WebSocket sessions (each gets its own env instance).
        env_kwargs: Keyword arguments of ``gym.make``.
        client_tasks: Take tasks from clients (still never their host-path keys).

    Raises:
        ConfigError: Unknown env id, or ``max_sessions`` < 1.
        MissingExtraError: ``openenv-core`` is not installed.
    """
    import gymnasium as gym

    from agent_gym.envs import register_envs
    from agent_gym.integrations.openenv import openenv_types

    register_envs()
    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
        raise ConfigError(f"env_id: expected a registered env id ({', '.join(known)}), got {env_id!r}")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(f"max_sessions: expected an int >= 1, got {max_sessions!r}")
    action_cls, observation_cls, _, _ = openenv_types()
    kwargs = dict(env_kwargs or {})
    gym.make(env_id, **kwargs).close()  # a bad kwarg fails here, not in the first session
    from openenv.core.env_server.http_server import create_fastapi_app

    factory = functools.partial(served_environment_class(), env_id, kwargs, client_tasks)
    app = safe_errors(create_fastapi_app(factory, action_cls, observation_cls, max_concurrent_envs=max_sessions))
    app.add_middleware(NoLoneSurrogates)
    return app
