"""A policy client that keeps the body of every request it sends (for tests of what goes on the wire)."""

from __future__ import annotations

import json
from typing import Any

from agent_gym.policy import VLLMClient

__all__ = ["BodyRecorder"]


class BodyRecorder(VLLMClient):
    """A :class:`~agent_gym.policy.VLLMClient` that keeps a JSON copy of every request body it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: list[dict[str, Any]] = []

    async def post(self, session_id, path, make_body, *, server=None, **options):
        async def recorded(target: str) -> dict[str, Any]:
            body = await make_body(target)
            self.bodies.append(json.loads(json.dumps(body)))
            return body

        return await super().post(session_id, path, recorded, server=server, **options)
