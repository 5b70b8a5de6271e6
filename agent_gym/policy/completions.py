"""The raw ``/v1/completions`` callable of the seed's engine API, one per server.

``await completions(request)`` posts a request dict to one server and returns the response
JSON. :class:`ServerCompletions` is the only implementation: the engine wrappers
(:mod:`agent_gym.integrations.engine`) hand it out before and after they build their policy, and
:class:`~agent_gym.policy.VLLMPolicy` exposes one per server as ``policy.completions``.
Requests go through a :class:`~agent_gym.policy.vllm_client.VLLMClient` (pooled connections
per event loop, retries of transient failures on the same server).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agent_gym.errors import PromptTooLong, ServerError
from agent_gym.policy.vllm_client import VLLMClient

__all__ = ["CompletionsFn", "ServerCompletions"]

CompletionsFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""An async callable taking a ``/v1/completions`` request dict and returning the response JSON."""


class ServerCompletions:
    """Async callable posting a raw ``/v1/completions`` request to one server.

    Args:
        client: The client whose connections, retries and ``/v1/models`` lookups are used.
        server: The server's ``"IP:PORT"`` name (one of ``client.server_addresses``).
        default_max_tokens: ``max_tokens`` of a request that does not set it (the API's own
            default is 16).
        model: ``model`` of a request that does not set it; None: the server's first model from
            ``/v1/models`` (left out while unknown).

    Example:
        >>> complete = ServerCompletions(client, "127.0.0.1:8000", default_max_tokens=64)  # doctest: +SKIP
        >>> answer = await complete({"prompt": [1, 2, 3], "return_token_ids": True})  # doctest: +SKIP
    """

    def __init__(self, client: VLLMClient, server: str, *, default_max_tokens: int, model: str | None = None) -> None:
        if server not in client.server_addresses:
            raise ValueError(f"server: expected one of {client.server_addresses}, got {server!r}")
        self.client = client
        self.server = server
        self.default_max_tokens = default_max_tokens
        self.model = model

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request`` to this server's ``/v1/completions`` and return the response JSON.

        Transient failures (connection errors, timeouts, HTTP 5xx and 429) are retried on the
        same server, as the client's options say.

        Raises:
            TypeError: ``request`` is not a dict.
            ValueError: ``request`` has no ``prompt``.
            ServerError: The request failed or was rejected (an over-long prompt with status 400).
        """
        if not isinstance(request, dict):
            raise TypeError(f"completions request: expected dict, got {type(request).__name__}")
        if "prompt" not in request:
            raise ValueError("completions request: expected a 'prompt' key, got none")

        async def make_body(server: str) -> dict[str, Any]:
            body = dict(request)
            body.setdefault("max_tokens", self.default_max_tokens)
            if "model" not in body:
                model = self.model or (await self.client.server_info(server)).get("model")
                if model:
                    body["model"] = model
            return body

        try:
            data, _ = await self.client.post(None, "/v1/completions", make_body, server=self.server)
        except PromptTooLong as exc:
            raise ServerError(f"server {self.server}: {exc}", server=self.server, status=400) from None
        return data

    def __repr__(self) -> str:
        return f"<completions {self.client.url(self.server, '/v1/completions')}>"
