"""The token-in endpoints of the reference server: vLLM's and SGLang's native generate APIs.

* ``POST /inference/v1/generate`` (vLLM): ``{"token_ids", "sampling_params", "model"?}``
  answers ``{"request_id", "model", "created", "choices": [{"index", "token_ids",
  "finish_reason", "logprobs": {"content": [{"token_id", "logprob", "rank", "top_logprobs"}]}
  | null, "weight_versions"?}], "usage", "prompt_logprobs": null}``, ``weight_versions`` (dev mode)
  being vLLM's spans ``[{"version", "start", "end"}]`` of the labels that sampled the ids.
  ``sampling_params`` uses vLLM's names; without ``max_tokens`` the rest of the context is the
  budget; without ``logprobs`` no logprobs come back (vLLM's rules).
* ``POST /generate`` (SGLang): ``{"input_ids" | "text", "sampling_params", "return_logprob",
  "top_logprobs_num"}`` with SGLang's sampling names (``max_new_tokens`` default 128,
  ``min_new_tokens``, ``no_stop_trim``, ``sampling_seed``, ...) answers ``{"text",
  "output_ids", "meta_info": {"id", "finish_reason": {"type": "stop", "matched"} |
  {"type": "length", "length"}, "prompt_tokens", "completion_tokens", "cached_tokens",
  "weight_version", "e2e_latency", "output_token_logprobs": [[logprob, id, null], ...]}}``.

Both run through the same path as ``/v1/completions``: the sampling fields are validated by
:func:`~agent_gym.reference_server.protocol.to_gen_request` and the backend generates. As a
testing aid, ``GET /debug/token_answers`` lists the last answers of these two endpoints
(``{"path", "answer"}``, oldest first), so a test can compare what a client recorded with
what the server sent.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, ValidationError

from agent_gym.reference_server.backends import SeqResult
from agent_gym.reference_server.guards import Guards, until_done_or_gone
from agent_gym.reference_server.protocol import (
    BadRequest,
    CompletionRequest,
    context_error,
    encode_text,
    to_gen_request,
)
from agent_gym.reference_server.rl_control import version_spans

__all__ = ["RECORDED_ANSWERS", "SGLangGenerateRequest", "VLLMGenerateRequest", "register_token_routes",
           "sglang_context_error", "sglang_to_vllm_sampling"]

RECORDED_ANSWERS = 256
"""How many answers ``GET /debug/token_answers`` keeps."""

# vLLM reports a logprob of -inf as -9999.0.
_MIN_LOGPROB = -9999.0

_SGLANG_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens",
                 "no_stop_trim": "include_stop_str_in_output", "sampling_seed": "seed"}


class VLLMGenerateRequest(BaseModel):
    """Body of ``POST /inference/v1/generate`` (unknown fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    token_ids: list[int]
    sampling_params: dict[str, Any] = {}
    model: str | None = None
    request_id: str | None = None
    stream: bool = False


class SGLangGenerateRequest(BaseModel):
    """Body of SGLang's ``POST /generate`` (unknown fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    input_ids: list[int] | None = None
    text: str | None = None
    sampling_params: dict[str, Any] = {}
    return_logprob: bool = False
    top_logprobs_num: int = 0
    stream: bool = False
    rid: str | None = None


def sglang_to_vllm_sampling(params: dict[str, Any]) -> dict[str, Any]:
    """SGLang ``sampling_params`` under vLLM's names (``max_new_tokens`` -> ``max_tokens``, ...)."""
    return {_SGLANG_NAMES.get(name, name): value for name, value in params.items()}


def sglang_context_error(context_len: int, prompt_len: int, max_new_tokens: int) -> BadRequest:
    """SGLang's answer to a request that does not fit the context (its wording, HTTP 400)."""
    if prompt_len >= context_len:
        return BadRequest(f"The input ({prompt_len} tokens) is longer than the model's context length "
                          f"({context_len} tokens).", param="input_ids")
    return BadRequest(
        f"Requested token count exceeds the model's maximum context length of {context_len} tokens. You requested "
        f"a total of {prompt_len + max_new_tokens} tokens: {prompt_len} tokens from the input messages and "
        f"{max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input messages or "
        f"the completion to fit within the limit.",
        param="max_new_tokens",
    )


def _lp(value: float) -> float:
    return value if value >= _MIN_LOGPROB else _MIN_LOGPROB


def _json(body: Any) -> Response:
    return Response(content=orjson.dumps(body), media_type="application/json")


async def _body(request: Request, model: type[BaseModel]) -> Any:
    """The validated JSON body; a malformed one raises :class:`BadRequest`."""
    try:
        data = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise BadRequest(f"{where}: {first.get('msg')}", param=where or None) from None


def register_token_routes(app: FastAPI, backend: Any, *, model_name: str, faults: Any = None,
                          guards: Guards | None = None) -> None:
    """Add ``/inference/v1/generate``, ``/generate`` and ``/debug/token_answers`` to ``app``.

    Args:
        app: The reference server's app.
        backend: Its generation backend (``tokenizer``, ``max_model_len``, ``vocab_size``,
            ``async generate(GenRequest)``).
        model_name: The served model name reported in answers.
        faults: The app's fault injection (anything with ``async before(request)``), or None.
        guards: The app's request limits (default ones).
    """
    answers: deque[dict[str, Any]] = deque(maxlen=RECORDED_ANSWERS)
    guards = guards or Guards()

    async def generate(request: Request, prompt_ids: list[int], sampling: dict[str, Any], *,
                       default_max: int | None, top_logprobs: int, sglang: bool = False) -> tuple[Any, list[SeqResult]]:
        if not prompt_ids:
            raise BadRequest("The prompt cannot be empty.", param="token_ids")
        max_tokens = sampling.get("max_tokens")
        if max_tokens is None:
            max_tokens = default_max if default_max is not None else min(backend.max_model_len - len(prompt_ids),
                                                                         guards.limits.max_tokens)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise BadRequest(f"sampling_params.max_tokens: expected an int, got {max_tokens!r:.40}",
                             param="sampling_params")
        err = context_error(backend.max_model_len, len(prompt_ids), max_tokens)
        if err is not None:
            raise sglang_context_error(backend.max_model_len, len(prompt_ids), max_tokens) if sglang else err
        guards.sampling(sampling.get("n"), max_tokens,
                        param="sampling_params." + ("max_new_tokens" if sglang else "max_tokens"))

        def prepare() -> Any:
            try:
                req = CompletionRequest.model_validate({**sampling, "prompt": prompt_ids, "max_tokens": max_tokens})
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first.get("loc", ()))
                raise BadRequest(f"sampling_params.{where}: {first.get('msg')}", param="sampling_params") from None
            return to_gen_request(req, prompt_ids, max_tokens=max_tokens, top_logprobs=top_logprobs,
                                  vocab_size=backend.vocab_size)

        gen = await guards.prepare(request, prepare)
        return gen, await until_done_or_gone(request, backend.generate(gen))

    @app.post("/inference/v1/generate")
    async def vllm_generate(request: Request) -> Response:
        body = await _body(request, VLLMGenerateRequest)
        if faults is not None and (injected := await faults.before(request)) is not None:
            return injected
        if body.stream:
            raise BadRequest("stream=true is not supported by /inference/v1/generate in this reference server.",
                             param="stream")
        want = body.sampling_params.get("logprobs")
        if want is not None and (isinstance(want, bool) or not isinstance(want, int)):
            raise BadRequest(f"sampling_params.logprobs: expected an int, got {want!r:.40}", param="sampling_params")
        top = int(want or 0)
        gen, samples = await generate(request, body.token_ids, body.sampling_params, default_max=None,
                                      top_logprobs=top)
        choices = []
        for i, s in enumerate(samples):
            content = None
            if want is not None:
                content = [
                    {"token_id": t, "logprob": _lp(lp), "rank": None,
                     "top_logprobs": [{"token_id": a, "logprob": _lp(v), "rank": r + 1}
                                      for r, (a, v) in enumerate(alts[:top])]}
                    for t, lp, alts in zip(s.token_ids, s.logprobs, s.top_logprobs, strict=False)
                ]
            choices.append({"index": i, "token_ids": list(s.token_ids), "finish_reason": s.finish_reason,
                            "logprobs": None if content is None else {"content": content}})
            if s.weight_versions is not None:  # dev mode (see rl_control): vLLM's spans over the output ids
                choices[-1]["weight_versions"] = version_spans(s.weight_versions, getattr(backend, "labels", {}))
        completion = sum(len(s.token_ids) for s in samples)
        answer = {
            "request_id": body.request_id or f"gen-{uuid.uuid4().hex}",
            "model": model_name,
            "created": int(time.time()),
            "choices": choices,
            "usage": {"prompt_tokens": len(gen.prompt_ids), "completion_tokens": completion,
                      "total_tokens": len(gen.prompt_ids) + completion},
            "prompt_logprobs": None,
        }
        answers.append({"path": "/inference/v1/generate", "answer": answer})
        return _json(answer)

    @app.post("/generate")
    async def sglang_generate(request: Request) -> Response:
        started = time.perf_counter()
        body = await _body(request, SGLangGenerateRequest)
        if faults is not None and (injected := await faults.before(request)) is not None:
            return injected
        if body.stream:
            raise BadRequest("stream=true is not supported by /generate in this reference server.", param="stream")
        if body.input_ids is not None:
            prompt_ids = list(body.input_ids)
        elif body.text is not None:
            prompt_ids = encode_text(backend.tokenizer, body.text, add_special_tokens=False, param="text")
        else:
            raise BadRequest("either 'input_ids' or 'text' is required", param="input_ids")
        sampling = sglang_to_vllm_sampling(body.sampling_params)
        if sampling.get("n", 1) != 1:
            raise BadRequest("n > 1 is not supported by /generate in this reference server.", param="n")
        top = body.top_logprobs_num if body.return_logprob else 0
        if not 0 <= top <= 20:
            raise BadRequest(f"top_logprobs_num: expected an int in [0, 20], got {top}", param="top_logprobs_num")
        _, samples = await generate(request, prompt_ids, sampling, default_max=128, top_logprobs=top, sglang=True)
        s = samples[0]
        if s.finish_reason == "length":
            finish: dict[str, Any] = {"type": "length", "length": len(s.token_ids)}
        elif s.finish_reason == "abort":
            finish = {"type": "abort", "message": "paused for a weight update"}
        else:
            matched = s.stop_reason if s.stop_reason is not None else (s.token_ids[-1] if s.token_ids else None)
            finish = {"type": "stop", "matched": matched}
        meta: dict[str, Any] = {
            "id": body.rid or uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(s.token_ids),
            "cached_tokens": 0,
            "weight_version": str(max(s.weight_versions)) if s.weight_versions else "default",
            "e2e_latency": time.perf_counter() - started,
        }
        if body.return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[_lp(lp), t, None]
                                             for t, lp in zip(s.token_ids, s.logprobs, strict=False)]
            if top:
                meta["output_top_logprobs"] = [[[_lp(v), a, None] for a, v in alts[:top]] for alts in s.top_logprobs]
        answer = {"text": s.text, "output_ids": list(s.token_ids), "meta_info": meta}
        answers.append({"path": "/generate", "answer": answer})
        return _json(answer)

    @app.get("/debug/token_answers")
    async def token_answers() -> Response:
        return _json(list(answers))
