"""SGLang's native ``POST /generate``: request builder and response parser.

The request carries the prompt as ``input_ids``, SGLang's sampling names in ``sampling_params``
(``max_new_tokens``, ``min_new_tokens``, ``no_stop_trim``, ``sampling_seed``, ...) and
``return_logprob``; the answer's ``meta_info.output_token_logprobs`` lists
``[logprob, token_id, text]`` per sampled id, and ``meta_info.finish_reason`` is an object
(``{"type": "stop", "matched": id or string}``, ``{"type": "length", ...}``,
``{"type": "abort", "message": ...}``).

Example:
    >>> build_request({"prompt": [1, 2], "max_tokens": 4, "seed": 7, "logprobs": 0})["sampling_params"]
    {'max_new_tokens': 4, 'sampling_seed': 7}
"""

from __future__ import annotations

from typing import Any

__all__ = ["PATH", "build_request", "parse_response", "to_sglang_sampling"]

PATH = "/generate"

# vLLM sampling name -> SGLang sampling name (the names both use are kept as they are).
_RENAMED = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens",
            "include_stop_str_in_output": "no_stop_trim", "seed": "sampling_seed"}
_KEPT = frozenset({"temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                   "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
                   "spaces_between_special_tokens"})


def to_sglang_sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for vLLM-named sampling fields (others are left out).

    ``top_k`` 0 (vLLM's "off") becomes -1, SGLang's.
    """
    out: dict[str, Any] = {}
    for name, value in sampling.items():
        if name in _RENAMED:
            out[_RENAMED[name]] = value
        elif name in _KEPT:
            out[name] = value
    if out.get("top_k") == 0:
        out["top_k"] = -1
    return out


def build_request(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/generate`` body of a ``/v1/completions`` body with a token-id ``prompt``.

    Returns:
        ``{"input_ids", "sampling_params", "return_logprob": True}``, plus ``top_logprobs_num``
        when ``logprobs`` asks for alternatives.
    """
    request: dict[str, Any] = {
        "input_ids": [int(t) for t in body["prompt"]],
        "sampling_params": to_sglang_sampling(body),
        "return_logprob": True,
    }
    if body.get("logprobs"):
        request["top_logprobs_num"] = int(body["logprobs"])
    return request


def parse_response(data: dict[str, Any]) -> dict[str, Any]:
    """The answer as a completion-style choice (``token_ids``, ``logprobs``, ``finish_reason``, ...).

    Ids and logprobs come from ``meta_info.output_token_logprobs``; without it, ids from
    ``output_ids`` and no logprobs.

    Raises:
        KeyError, IndexError, TypeError, ValueError: The body is not a generate response.
    """
    meta = data["meta_info"]
    entries = meta.get("output_token_logprobs")
    logprobs: list[float] | None = None
    if isinstance(entries, list):
        token_ids: list[int] | None = [int(e[1]) for e in entries]
        logprobs = [float(e[0]) if e[0] is not None else 0.0 for e in entries]
    else:
        ids = data.get("output_ids")
        token_ids = None if ids is None else [int(t) for t in ids]
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    matched = finish.get("matched") if isinstance(finish, dict) else None
    out: dict[str, Any] = {
        "token_ids": token_ids,
        "text": str(data.get("text") or ""),
        "finish_reason": kind,
        "stop_reason": matched,
    }
    if kind == "abort" and isinstance(finish, dict) and finish.get("message"):
        out["abort_message"] = str(finish["message"])
    if logprobs is not None:
        out["logprobs"] = {"token_logprobs": logprobs}
    return out
