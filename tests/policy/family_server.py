"""A vLLM-style server (the reference server's HTTP app) whose model answers by script, in a family's format.

:class:`ScriptEngine` answers turn ``k`` of the running episode with ``script[k]``: the text is
sampled as the family's special tokens plus *one id per character* for the rest (a
tokenization no re-tokenization of the text gives), so an exact trajectory can only come
from the ids the server sampled. Every request's prompt and sampled ids are recorded.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from agent_gym.reference_server.app import create_app
from agent_gym.reference_server.backends import GenRequest, SeqResult


def sample_ids(tokenizer: Any, text: str) -> list[int]:
    """Special tokens as their ids, every other character as its own id(s)."""
    specials = sorted((t for t in tokenizer.all_special_tokens if t), key=len, reverse=True)
    pattern = re.compile("(" + "|".join(re.escape(t) for t in specials) + ")")
    ids: list[int] = []
    for piece in pattern.split(text):
        if not piece:
            continue
        if piece in specials:
            ids.append(tokenizer.convert_tokens_to_ids(piece))
        else:
            for ch in piece:
                ids += tokenizer.encode(ch, add_special_tokens=False)
    return ids


class ScriptEngine:
    """Engine answering by script (see the module docstring)."""

    def __init__(self, tokenizer: Any, script: list[str], max_model_len: int = 8192) -> None:
        self.tokenizer = tokenizer
        self.model_path = "scripted"
        self.max_model_len = max_model_len
        self.vocab_size = len(tokenizer)
        self.script = script
        self.turn = 0
        self.records: list[tuple[list[int], list[int], list[float]]] = []
        self._lock = threading.Lock()

    def reset(self, script: list[str] | None = None) -> None:
        """Start the next episode (optionally with another script)."""
        with self._lock:
            self.turn = 0
            self.records = []
            if script is not None:
                self.script = script

    async def generate(self, req: GenRequest) -> list[SeqResult]:
        with self._lock:
            text = self.script[min(self.turn, len(self.script) - 1)]
            self.turn += 1
        ids = sample_ids(self.tokenizer, text)
        finish = "stop"
        if len(ids) > req.max_tokens:
            ids, finish = ids[: req.max_tokens], "length"
        logprobs = [-0.01 * (1 + (i * 7 + len(req.prompt_ids)) % 13) for i in range(len(ids))]
        with self._lock:
            self.records.append((list(req.prompt_ids), list(ids), list(logprobs)))
        stop = ids[-1] if finish == "stop" and ids and ids[-1] in set(req.stop_token_ids) else None
        tops = [[(t, lp)] for t, lp in zip(ids, logprobs, strict=True)]
        if req.on_token is not None:  # a streamed request: the ids one by one, as the engine samples them
            for k, (t, lp) in enumerate(zip(ids, logprobs, strict=True)):
                req.on_token(0, t, lp, tops[k])
        decoded = self.tokenizer.decode(ids, skip_special_tokens=False)
        return [SeqResult(ids, logprobs, tops, decoded, finish, stop)]

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
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_script_server(tokenizer: Any, script: list[str]) -> tuple[InProcessServer, ScriptEngine]:
    """Serve a :class:`ScriptEngine` through the reference server's HTTP app."""
    engine = ScriptEngine(tokenizer, script)
    return InProcessServer(create_app(engine)), engine
