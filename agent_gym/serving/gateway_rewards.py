"""Ending a gateway session with an env's reward: how ``serve-env --mcp --gateway URL`` pays an episode.

An MCP-speaking harness samples through ``agent-gym gateway`` (which records its tokens, one
session per episode) and acts through ``agent-gym serve-env ID --mcp`` (which runs the env and
grades). When the harness names its gateway session on its MCP requests (header
:data:`GATEWAY_SESSION_HEADER`), the env server ends that session with the episode's reward and
status once the episode ends, through the gateway's trainer route ``POST /sessions/{id}/reward``, so
the gateway's trajectory holds the harness's exact tokens and the env's reward.

A failed post never raises into the episode: :meth:`GatewayRewards.post` returns what happened
(``{"ok": False, "error": ...}``), which the episode's result shows to the harness.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import quote

__all__ = ["GATEWAY_SESSION_HEADER", "TASK_HEADER", "GatewayRewards"]

logger = logging.getLogger(__name__)

GATEWAY_SESSION_HEADER = "x-agent-gym-session"
"""Header of an MCP session's requests naming the gateway session that samples its episode's turns."""

TASK_HEADER = "x-agent-gym-task"
"""Header of an MCP session's requests naming the id of the env task its episode is reset on."""


class GatewayRewards:
    """Posts episode rewards to a gateway's ``/sessions/{id}/reward`` route with the trainer's token.

    Args:
        url: The gateway's base URL (``http://HOST:PORT``).
        token: The gateway's trainer token (``agent-gym gateway --trainer-token``).
        timeout: Seconds per request.
        retries: Further tries after a transport failure or a 5xx answer (not after a 4xx: the gateway
            refused the reward, e.g. the session is unknown or already finished).
    """

    def __init__(self, url: str, token: str, *, timeout: float = 10.0, retries: int = 2) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"GatewayRewards.url: expected an http(s) URL, got {url!r}")
        if not isinstance(token, str) or not token.strip():
            raise ValueError("GatewayRewards.token: expected the gateway's trainer token, got a blank one")
        if retries < 0:
            raise ValueError(f"GatewayRewards.retries: expected an int >= 0, got {retries!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self._headers = {"Authorization": f"Bearer {token}"}

    def post(self, session_id: str, reward: float, status: str) -> dict[str, Any]:
        """End gateway session ``session_id`` with ``reward`` and ``status``.

        Returns:
            ``{"ok": True, "session_id", "trajectory_reward", "steps"}`` (the gateway's answer), or
            ``{"ok": False, "session_id", "error"}``.
        """
        import httpx

        address = f"{self.url}/sessions/{quote(session_id, safe='')}/reward"
        body = {"reward": float(reward), "status": status}
        error = ""
        for attempt in range(self.retries + 1):
            try:
                answer = httpx.post(address, json=body, headers=self._headers, timeout=self.timeout)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code < 300:
                    reply = answer.json()
                    return {"ok": True, "session_id": session_id,
                            "trajectory_reward": reply.get("trajectory_reward"), "steps": reply.get("steps")}
                error = f"HTTP {answer.status_code}: {answer.text[:300]}"
                if answer.status_code < 500:
                    break
            if attempt < self.retries:
                time.sleep(0.2 * 2**attempt)
        logger.warning("gateway session %s: the reward was not delivered: %s", session_id, error)
        return {"ok": False, "session_id": session_id, "error": error}
