"""Fixtures of the gateway tests.

``scripted_upstream(tokenizer)`` serves the reference server's HTTP app (its real
``/v1/completions`` protocol) over an engine whose answers follow a script: a hermes tool
call while the prompt holds no tool result, then a final answer sampled as *one id per
character* (a tokenization no re-tokenization of the text would give). The engine records
every prompt and sampled ids, so tests compare what the gateway recorded with what the
server sampled. It streams its ids through ``GenRequest.on_token`` one by one; when a test sets
``engine.release`` (a ``threading.Event``), the last id of each answer waits for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_gym.policy import ChatTokenBuilder
from agent_gym.reference_server.app import create_app
from agent_gym.reference_server.backends import GenRequest, SeqResult

TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
RESULT_MARK = "RESULT="
FINAL = "The answer is <answer>42</answer>"


class ScriptedEngine:
    """Engine answering by script, recording (prompt ids, sampled ids, logprobs) per request."""

    def __init__(self, tokenizer: Any, max_model_len: int = 4096) -> None:
        self.tokenizer = tokenizer
        self.model_path = "scripted"
        self.max_model_len = max_model_len
        self.vocab_size = len(tokenizer)
        self.eot = ChatTokenBuilder(tokenizer).eot_token_id
        self.records: list[tuple[list[int], list[int], list[float]]] = []
        self._lock = threading.Lock()
        self.release: threading.Event | None = None
        self.waits: list[bool] = []  # per gated answer: released in time (True) or timed out

    def _answer(self, prompt_text: str) -> list[int]:
        tail = prompt_text[prompt_text.rfind(RESULT_MARK) - 200 :] if RESULT_MARK in prompt_text else ""
        if RESULT_MARK in prompt_text and "42" in tail:
            ids: list[int] = []
            for ch in FINAL:  # one id per character: non-canonical on purpose
                ids += self.tokenizer.encode(ch, add_special_tokens=False)
            return ids
        return self.tokenizer.encode("<think>I should compute.</think>\n" + TOOL_CALL, add_special_tokens=False)

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        prompt_text = self.tokenizer.decode(req.prompt_ids, skip_special_tokens=False)
        ids = self._answer(prompt_text) + [self.eot]
        finish = "stop"
        if len(ids) > req.max_tokens:
            ids, finish = ids[: req.max_tokens], "length"
        logprobs = [-0.01 * (1 + (i * 7 + len(req.prompt_ids)) % 13) for i in range(len(ids))]
        with self._lock:
            self.records.append((list(req.prompt_ids), list(ids), list(logprobs)))
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        tops = [[(t, lp)] for t, lp in zip(ids, logprobs, strict=True)]
        if req.on_token is not None:
            for k, (t, lp) in enumerate(zip(ids, logprobs, strict=True)):
                if self.release is not None and k == len(ids) - 1:
                    self.waits.append(await asyncio.to_thread(self.release.wait, 30))
                req.on_token(0, t, lp, tops[k])
        return [SeqResult(ids, logprobs, tops, text, finish, self.eot if finish == "stop" else None)]

    def close(self) -> None:
        """Nothing to release."""


class InProcessServer:
    """A uvicorn server running an ASGI app in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def scripted_upstream() -> Iterator[Callable[..., tuple[str, ScriptedEngine]]]:
    """Factory: ``(address, engine) = scripted_upstream(tokenizer, max_model_len=4096)``."""
    servers: list[InProcessServer] = []

    def start(tokenizer: Any, max_model_len: int = 4096) -> tuple[str, ScriptedEngine]:
        engine = ScriptedEngine(tokenizer, max_model_len)
        server = InProcessServer(create_app(engine))
        servers.append(server)
        return server.address, engine

    yield start
    for server in servers:
        server.stop()


def check_exact(trajectory: Any, records: list[tuple[list[int], list[int], list[float]]]) -> None:
    """Assert that ``trajectory``'s segments hold exactly the server's prompts and sampled ids/logprobs."""
    turns = iter(records)
    for segment in trajectory.segments:
        prompt = segment.prompt_tokens.tolist()
        response = segment.response_tokens.tolist()
        masks = segment.response_masks.tolist()
        logprobs = segment.response_logprobs.tolist()
        full = prompt + response
        pos = len(prompt)
        first = True
        while pos < len(full) or first:
            server_prompt, sampled, server_lps = next(turns)
            if first:
                assert server_prompt == prompt
            else:
                assert full[: len(server_prompt)] == server_prompt
                assert masks[pos - len(prompt) : len(server_prompt) - len(prompt)] == [0] * (len(server_prompt) - pos)
                pos = len(server_prompt)
            first = False
            start = pos - len(prompt)
            assert response[start : start + len(sampled)] == sampled
            assert masks[start : start + len(sampled)] == [1] * len(sampled)
            assert logprobs[start : start + len(sampled)] == pytest.approx(server_lps)
            pos += len(sampled)
    assert next(turns, None) is None, "the server sampled turns the trajectory does not hold"


@pytest.fixture(scope="session")
def exact() -> Callable[..., None]:
    """The :func:`check_exact` assertion."""
    return check_exact
