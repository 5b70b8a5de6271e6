"""Who may do what on the gateway: a session's API key samples, the trainer's token does the rest.

* A session created by the trainer (``POST /sessions``, ``Gateway.session()``) gets an API key of
  its own (``sk-agw-...``). That key samples in that session - the model routes, under
  ``/sessions/{id}/v1`` or ``/v1`` - and nothing else: it cannot create, list, read, reward or
  end sessions, nor sample in another session.
* The trainer's token creates, lists, reads and finishes sessions (rewards, statuses) and may
  sample in any session (naming it by path or ``x-session-id``).
* A session a client created by using it (``auto_create``, the ``--auto-sessions`` opt-in) has
  no key: naming it is enough to sample in it; finishing it still needs the trainer's token.

Keys and tokens come as ``Authorization: Bearer ...`` or ``x-api-key`` and are compared in
constant time. A request without the credential a route needs gets 401
(``AuthenticationError``); a session key on a trainer route gets 403
(``PermissionDeniedError``), each in the dialect of the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request

from agent_gym.errors import RequestError
from agent_gym.gateway.session import GatewaySession
from agent_gym.gateway.store import SessionStore
from agent_gym.serving.auth import new_token, request_token, tokens_equal

__all__ = ["AccessRules", "gateway_error", "request_key"]

_KINDS = {401: "AuthenticationError", 403: "PermissionDeniedError", 413: "RequestTooLargeError"}


def request_key(request: Request) -> str | None:
    """The key or token a request carries (``Authorization: Bearer`` or ``x-api-key``)."""
    return request_token(request.headers.get("authorization"), request.headers.get("x-api-key"))


def gateway_error(scope: Mapping[str, Any], status: int, message: str) -> tuple[bytes, str]:
    """An error answered before the app runs (a body too large), in the request's dialect."""
    import orjson

    anthropic = str(scope.get("path", "")).endswith("/v1/messages") or any(
        name == b"anthropic-version" for name, _ in scope.get("headers") or ())
    exc = RequestError(message, status=status, kind=_KINDS.get(status, "BadRequestError"))
    return orjson.dumps(exc.anthropic_body() if anthropic else exc.openai_body()), "application/json"


class AccessRules:
    """The gateway's credentials and the checks of its routes (see the module docs).

    Args:
        store: The sessions.
        trainer_token: The trainer's token (a random one by default).
    """

    def __init__(self, store: SessionStore, trainer_token: str | None = None) -> None:
        if trainer_token is not None and (not isinstance(trainer_token, str) or not trainer_token.strip()):
            raise ValueError(f"trainer_token: expected a non-blank string, got {trainer_token!r}")
        self.store = store
        self.trainer_token = trainer_token or new_token("tr-agw")

    def is_trainer(self, key: str | None) -> bool:
        """Whether ``key`` is the trainer's token."""
        return tokens_equal(key, self.trainer_token)

    def require_trainer(self, request: Request) -> None:
        """Refuse a request without the trainer's token (401, or 403 for a session's key).

        Raises:
            RequestError: The request is not the trainer's.
        """
        key = request_key(request)
        if self.is_trainer(key):
            return
        if self.store.by_key(key) is not None:
            raise RequestError("a session's API key can only sample; this route needs the trainer's token",
                               status=403, kind="PermissionDeniedError")
        raise RequestError("this route needs the trainer's token (Authorization: Bearer TOKEN, as the gateway "
                           "printed it or was given it)", status=401, kind="AuthenticationError")

    def authorized(self, session: GatewaySession, key: str | None) -> GatewaySession:
        """``session`` when ``key`` may sample in it.

        Raises:
            RequestError: 401 naming the session.
        """
        if session.api_key is None or self.is_trainer(key) or tokens_equal(key, session.api_key):
            return session
        raise RequestError(f"session {session.id!r} needs its API key (Authorization: Bearer KEY, the api_key "
                           "its creation returned)", status=401, kind="AuthenticationError", param="api_key")

    def find_session(self, request: Request, path_id: str | None) -> GatewaySession:
        """The session a model request samples in, checked against its credential.

        Found from the path prefix, then the API key, then the ``x-session-id`` header, then (for
        sessions created by use) the key naming the session.

        Raises:
            RequestError: No session named (400), an unknown one (404) or a missing or wrong key (401).
        """
        store = self.store
        key = request_key(request)
        if path_id is not None:
            return self.authorized(store.get(path_id, create=True), key)
        owned = store.by_key(key)
        if owned is not None:
            return owned
        header = request.headers.get("x-session-id")
        if header:
            return self.authorized(store.get(header, create=True), key)
        if key and not self.is_trainer(key) and (store.auto_create or store.known(key)):
            return self.authorized(store.get(key, create=True), key)
        if key and not self.is_trainer(key):
            raise RequestError("unknown API key: expected the api_key of a session (POST /sessions returns it)",
                               status=401, kind="AuthenticationError", param="api_key")
        raise RequestError("expected a session: a /sessions/{id} path prefix, an API key naming a session, "
                           "or an x-session-id header; got none", param="session_id")

    def may_list_models(self, request: Request, path_id: str | None) -> None:
        """Let ``GET /v1/models`` through for any credential that may sample.

        Raises:
            RequestError: 401 without one (404 for an unknown session path).
        """
        if path_id is not None:
            self.find_session(request, path_id)
            return
        key = request_key(request)
        if self.store.auto_create or self.is_trainer(key) or self.store.by_key(key) is not None:
            return
        raise RequestError("GET /v1/models needs a session's API key", status=401, kind="AuthenticationError")
