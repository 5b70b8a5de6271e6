"""The token-in HTTP APIs :class:`~agent_gym.policy.VLLMPolicy` can sample through.

Each API is a :class:`TokenAPI`: the endpoint path, a request builder turning the policy's
``/v1/completions`` body (vLLM sampling names, token-id prompt) into the API's body, and a
response parser returning the answer as one completion-style choice
(``token_ids``, ``logprobs.token_logprobs``, ``finish_reason``, ``stop_reason``, ``text``), so
one output builder reads every API.

* ``"completions"``: vLLM's OpenAI-compatible ``POST /v1/completions`` (the body as is).
* ``"vllm_generate"``: vLLM's token endpoint ``POST /inference/v1/generate``
  (:mod:`agent_gym.policy.vllm_generate`; what vime and SkyRL call).
* ``"sglang_generate"``: SGLang's native ``POST /generate``
  (:mod:`agent_gym.policy.sglang_generate`; what slime calls).

Example:
    >>> token_api("sglang_generate").path
    '/generate'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.policy import sglang_generate, vllm_generate

__all__ = ["TOKEN_APIS", "TokenAPI", "token_api"]


def _same(body: dict[str, Any]) -> dict[str, Any]:
    return body


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    return data["choices"][0]


@dataclass(frozen=True)
class TokenAPI:
    """One token-in API: where to post, how to build the body, how to read the answer.

    Attributes:
        name: The name ``VLLMPolicy(api=...)`` takes.
        path: The endpoint path.
        build: Maps a ``/v1/completions`` body (with a token-id ``prompt``) to this API's body.
        parse: Maps this API's response JSON to a completion-style choice dict.
        required_key: A key every successful response holds (a malformed answer lacks it).
        streams: Whether the API streams the way ``/v1/completions`` does.
    """

    name: str
    path: str
    build: Callable[[dict[str, Any]], dict[str, Any]]
    parse: Callable[[dict[str, Any]], dict[str, Any]]
    required_key: str
    streams: bool = False


TOKEN_APIS: dict[str, TokenAPI] = {
    "completions": TokenAPI("completions", "/v1/completions", _same, _first_choice, "choices", streams=True),
    "vllm_generate": TokenAPI(
        "vllm_generate", vllm_generate.PATH, vllm_generate.build_request, vllm_generate.parse_response, "choices"
    ),
    "sglang_generate": TokenAPI(
        "sglang_generate", sglang_generate.PATH, sglang_generate.build_request, sglang_generate.parse_response,
        "meta_info",
    ),
}
"""The APIs by name."""


def token_api(name: str) -> TokenAPI:
    """Return the :class:`TokenAPI` called ``name``.

    Raises:
        ConfigError: ``name`` is not one of :data:`TOKEN_APIS`.
    """
    try:
        return TOKEN_APIS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"api: expected one of {sorted(TOKEN_APIS)}, got {name!r}") from None
