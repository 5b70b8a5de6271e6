"""Streamed ``POST /v1/completions`` answers of the reference server (vLLM's server-sent events).

With ``"stream": true`` the answer is ``text/event-stream``: one ``data: {...}`` chunk
(``"object": "text_completion"``) per sampled token, as the backend samples it, then per
choice a last chunk carrying ``finish_reason`` / ``stop_reason``, an optional usage chunk
(``stream_options.include_usage``: ``"choices": []`` and ``"usage"``), and ``data: [DONE]``.
Each choice holds, as in vLLM:

* ``text``: the text added by this chunk. Text that could still become part of a stop string,
  or an incomplete UTF-8 character, is held back until it is decided; the deltas of a choice
  concatenate to the non-streamed ``text``.
* ``token_ids``: the ids added by this chunk (``return_token_ids``), and ``prompt_token_ids``
  in the first chunk of each choice.
* ``logprobs``: ``text_offset`` / ``token_logprobs`` / ``tokens`` / ``top_logprobs`` of this
  chunk's ids (when ``logprobs`` is set), offsets counted from the start of the output.

A generation error after the stream started is sent as ``data: {"error": {...}}`` before
``[DONE]``. Backends call ``GenRequest.on_token`` as they sample; a backend that does not is
still served (its tokens are sent when its answer arrives).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from agent_gym.reference_server.backends import GenRequest, SeqResult

__all__ = ["TextDeltas", "stream_completions"]

_DONE = b"data: [DONE]\n\n"


def _event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class TextDeltas:
    """The incremental text of one sample: what may be sent after each new token.

    Args:
        tokenizer: Decodes the sampled ids.
        req: The sample's request (stop strings, special-token handling).
        eos_ids: Ids that end a sample unless ``ignore_eos``.
    """

    def __init__(self, tokenizer: Any, req: GenRequest, eos_ids: set[int]) -> None:
        self.tokenizer = tokenizer
        self.req = req
        self.stop_ids = set(req.stop_token_ids) | (set() if req.ignore_eos else set(eos_ids))
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token: int) -> str:
        """Add a sampled id; return the text that can be sent now (possibly empty)."""
        req = self.req
        self.ids.append(token)
        ids = self.ids
        if (not req.include_stop_str_in_output and token in self.stop_ids
                and len(ids) >= req.min_tokens):
            ids = ids[:-1]  # a stop id's text is not part of the output
        text = self.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
        if not text.startswith(self.sent):  # the decoding of earlier ids changed: wait for the end
            return ""
        end = len(text)
        while end > len(self.sent) and text[end - 1] == "\ufffd":  # an incomplete character
            end -= 1
        for stop in req.stop:  # a complete stop string ends the output (the sample ends on it)
            pos = text.find(stop, max(0, len(self.sent) - len(stop) + 1))
            if pos >= 0:
                end = min(end, pos + len(stop) if req.include_stop_str_in_output else pos)
        end = max(end, len(self.sent))
        hold = 0
        for stop in req.stop:  # a suffix that may begin a stop string waits
            for k in range(min(len(stop) - 1, end - len(self.sent)), hold, -1):
                if text.endswith(stop[:k], 0, end):
                    hold = k
                    break
        delta = text[len(self.sent) : end - hold]
        self.sent += delta
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of the output once the sample ended with ``final_text``."""
        if final_text.startswith(self.sent):
            rest = final_text[len(self.sent) :]
            self.sent = final_text
            return rest
        return ""


async def stream_completions(
    backend: Any,
    gens: list[GenRequest],
    *,
    model: str,
    return_token_ids: bool,
    logprobs: Callable[[list[int], list[float], list[list[tuple[int, float]]], int], dict[str, Any]] | None,
    include_usage: bool,
    cut_after: int | None = None,
) -> AsyncIterator[bytes]:
    """Run ``gens`` on ``backend`` and yield the SSE chunks of their choices as tokens arrive.

    Args:
        backend: The generation backend (``generate(GenRequest)``; ``tokenizer``).
        gens: One request per prompt; choice ``p * n + i`` is sample ``i`` of prompt ``p``.
        model: Model name written in each chunk.
        return_token_ids: Send ``token_ids`` / ``prompt_token_ids``.
        logprobs: Builds a chunk's ``logprobs`` from (ids, logprobs, top logprobs, text offset),
            or None when the request did not ask for them.
        include_usage: Send the usage chunk before ``[DONE]``.
        cut_after: Testing aid: stop abruptly (dropping the connection) after this many chunks.

    Raises:
        ConnectionAbortedError: After ``cut_after`` chunks.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    eos_ids = set(getattr(backend, "eos_ids", ()) or ())
    if getattr(backend.tokenizer, "eos_token_id", None) is not None:
        eos_ids.add(int(backend.tokenizer.eos_token_id))
    bases: list[int] = []
    choices: list[GenRequest] = []
    for g in gens:
        bases.append(len(choices))
        choices += [g] * g.n
    deltas = [TextDeltas(backend.tokenizer, g, eos_ids) for g in choices]
    counts = [0] * len(choices)
    offsets = [0] * len(choices)

    def on_token_of(base: int) -> Callable[[int, int, float, list[tuple[int, float]]], None]:
        def on_token(i: int, token: int, lp: float, top: list[tuple[int, float]]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("token", base + i, token, lp, top))

        return on_token

    def done_of(p: int) -> Callable[[asyncio.Future], None]:
        def done(fut: asyncio.Future) -> None:
            queue.put_nowait(("done", p, fut))

        return done

    tasks = []
    for p, g in enumerate(gens):
        g.on_token = on_token_of(bases[p])
        task = asyncio.ensure_future(backend.generate(g))
        task.add_done_callback(done_of(p))
        tasks.append(task)

    def chunk(index: int, text: str, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]],
              finish: str | None = None, stop_reason: Any = None) -> bytes:
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None, "finish_reason": finish,
                                  "stop_reason": stop_reason}
        if logprobs is not None and ids:
            choice["logprobs"] = logprobs(ids, lps, tops, offsets[index])
        if return_token_ids:
            choice["prompt_token_ids"] = list(choices[index].prompt_ids) if counts[index] == 0 and ids else None
            choice["token_ids"] = ids
        return _event({"id": cid, "object": "text_completion", "created": created, "model": model,
                       "choices": [choice]})

    def token_chunk(index: int, token: int, lp: float, top: list[tuple[int, float]]) -> bytes:
        text = deltas[index].push(token)
        data = chunk(index, text, [token], [lp], [top])
        counts[index] += 1
        offsets[index] += len(text)
        return data

    sent = 0
    pending = len(gens)
    completion_tokens = 0
    try:
        while pending:
            item = await queue.get()
            if item[0] == "token":
                _, index, token, lp, top = item
                yield token_chunk(index, token, lp, top)
                sent += 1
                if cut_after is not None and sent >= cut_after:
                    raise ConnectionAbortedError(f"stream cut after {sent} chunks (testing aid)")
                continue
            _, p, fut = item
            pending -= 1
            # The backend's tokens were queued before its result (one FIFO queue), so all were sent.
            if fut.exception() is not None:
                exc = fut.exception()
                yield _event({"error": {"message": f"generation failed: {exc}", "type": "InternalServerError",
                                        "param": None, "code": 500}})
                yield _DONE
                return
            samples: list[SeqResult] = fut.result()
            for i, s in enumerate(samples):
                index = bases[p] + i
                for k in range(counts[index], len(s.token_ids)):  # a backend that does not stream
                    top = s.top_logprobs[k] if k < len(s.top_logprobs) else []
                    yield token_chunk(index, s.token_ids[k], s.logprobs[k], top)
                completion_tokens += len(s.token_ids)
                rest = deltas[index].finish(s.text)
                yield chunk(index, rest, [], [], [], s.finish_reason, s.stop_reason)
        if include_usage:
            prompt_tokens = sum(len(g.prompt_ids) for g in gens)
            yield _event({"id": cid, "object": "text_completion", "created": created, "model": model,
                          "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                   "completion_tokens": completion_tokens,
                                                   "total_tokens": prompt_tokens + completion_tokens}})
        yield _DONE
    finally:
        for task in tasks:
            task.cancel()
