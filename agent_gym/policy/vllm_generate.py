"""vLLM's token endpoint ``POST /inference/v1/generate``: request builder and response parser.

The request carries the prompt as ``token_ids`` and vLLM's ``SamplingParams`` as a JSON object
``sampling_params`` (``max_tokens``, ``logprobs``, ``stop_token_ids``, ...); the answer's
first choice holds the sampled ``token_ids``, their logprobs under ``logprobs.content[i].logprob``
(entries are ``{"token": "token_id:N", ...}`` in older servers and ``{"token_id": N, ...}`` in
newer ones: only ``logprob`` is read) and ``finish_reason`` (``stop``, ``length``, ``abort``,
``error``, ``repetition``). Recent vLLM servers register the endpoint only with
``--enable-scale-out`` (or ``--tokens-only``).

Example:
    >>> build_request({"prompt": [1, 2], "max_tokens": 4, "logprobs": 0, "model": "m"})
    {'token_ids': [1, 2], 'sampling_params': {'max_tokens': 4, 'logprobs': 0}, 'model': 'm'}
"""

from __future__ import annotations

from typing import Any

__all__ = ["PATH", "build_request", "parse_response"]

PATH = "/inference/v1/generate"

# Fields of a /v1/completions body that are not sampling parameters.
_NOT_SAMPLING = frozenset({"prompt", "model", "stream", "stream_options", "return_token_ids",
                           "return_tokens_as_token_ids", "echo", "add_special_tokens", "n"})

# finish_reason values that end a sample normally (vLLM's repetition detection stops it).
_FINISH = {None: "stop", "stop": "stop", "repetition": "stop", "length": "length", "abort": "abort",
           "cancelled": "abort"}


def build_request(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/inference/v1/generate`` body of a ``/v1/completions`` body with a token-id ``prompt``.

    Args:
        body: The completions body (``prompt`` a list of ids, vLLM sampling names).

    Returns:
        ``{"token_ids", "sampling_params", "model"?}``; ``logprobs`` defaults to 0 (only the
        sampled id's logprob), as the endpoint returns none without it.
    """
    sampling = {k: v for k, v in body.items() if k not in _NOT_SAMPLING}
    if sampling.get("logprobs") is None:
        sampling["logprobs"] = 0
    request: dict[str, Any] = {"token_ids": [int(t) for t in body["prompt"]], "sampling_params": sampling}
    if body.get("model"):
        request["model"] = body["model"]
    return request


def parse_response(data: dict[str, Any]) -> dict[str, Any]:
    """The answer as a completion-style choice (``token_ids``, ``logprobs``, ``finish_reason``, ...).

    Raises:
        KeyError, IndexError, TypeError, ValueError: The body is not a generate response.
    """
    choice = data["choices"][0]
    ids = choice.get("token_ids")
    token_ids = None if ids is None else [int(t) for t in ids]
    block = choice.get("logprobs")
    logprobs = None
    if isinstance(block, dict) and isinstance(block.get("content"), list):
        logprobs = [float(e["logprob"]) if e.get("logprob") is not None else 0.0 for e in block["content"]]
    finish = choice.get("finish_reason")
    out: dict[str, Any] = {
        "token_ids": token_ids,
        "text": str(choice.get("text") or ""),
        "finish_reason": _FINISH.get(finish, finish),
        "stop_reason": choice.get("stop_reason"),
    }
    if logprobs is not None:
        out["logprobs"] = {"token_logprobs": logprobs}
    return out
