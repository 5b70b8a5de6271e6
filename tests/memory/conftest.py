"""Fixtures of the memory tests: a real word-level tokenizer and a real HTTP summary server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = (
    "the a user assistant tool system question answer result call search find weather city "
    "sunny rain temperature is was and of to in for summary hello world think plan step"
).split()


def make_word_tokenizer() -> Tokenizer:
    """A real ``tokenizers`` word-level tokenizer: one token per whitespace-separated word."""
    vocab = {"[UNK]": 0}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


@pytest.fixture(scope="session")
def word_tokenizer() -> Tokenizer:
    """Word-level ``tokenizers.Tokenizer`` (count = number of words)."""
    return make_word_tokenizer()


@pytest.fixture(scope="session")
def word_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The word-level tokenizer saved as a transformers tokenizer directory."""
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("word_tokenizer")
    fast = PreTrainedTokenizerFast(tokenizer_object=make_word_tokenizer(), unk_token="[UNK]")
    fast.save_pretrained(str(path))
    return str(path)


@dataclass
class SummaryServer:
    """State of the local OpenAI-compatible summary server.

    Attributes:
        address: ``"127.0.0.1:PORT"``.
        requests: JSON bodies received on ``/v1/chat/completions``.
        mode: ``"ok"``, ``"error"`` (HTTP 500), ``"empty"`` (empty content) or ``"hang"``.
        fail_first: Number of next requests answered with HTTP 500 before ``mode`` applies.
        reply: Optional fixed reply text (default: a deterministic summary of the request).
    """

    address: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "ok"
    fail_first: int = 0
    reply: str | None = None
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        return f"http://{self.address}/v1"

    def reset(self) -> None:
        self.requests.clear()
        self.mode = "ok"
        self.fail_first = 0
        self.reply = None


def summarize_request(messages: list[dict[str, str]]) -> str:
    """The deterministic summary the server writes: how many messages and words it saw."""
    body = messages[1:]
    words = sum(len(m["content"].split()) for m in body)
    return f"<think>plan the summary</think>summary of {len(body)} messages {words} words"


def _handler(state: SummaryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default log
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found", "type": "NotFoundError", "code": 404}})
                return
            state.requests.append(body)
            if state.fail_first > 0:
                state.fail_first -= 1
                self._send(500, {"error": {"message": "injected failure", "type": "InternalServerError"}})
                return
            if state.mode == "error":
                self._send(500, {"error": {"message": "injected failure", "type": "InternalServerError"}})
                return
            if state.mode == "hang":
                state.release.wait(30)
                return
            content = "" if state.mode == "empty" else (state.reply or summarize_request(body["messages"]))
            self._send(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", ""),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )

    return Handler


@pytest.fixture(scope="session")
def _summary_server_session() -> Iterator[SummaryServer]:
    state = SummaryServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.address = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def summary_server(_summary_server_session: SummaryServer) -> Iterator[SummaryServer]:
    """A running local OpenAI-compatible chat server writing deterministic summaries (state reset per test)."""
    _summary_server_session.reset()
    yield _summary_server_session
    _summary_server_session.release.set()
    _summary_server_session.release = threading.Event()
    _summary_server_session.reset()


class RecordingSummarizer:
    """An in-process ``Summarizer`` that records requests and can fail, hang or answer empty."""

    def __init__(self, replies: list[Any] | None = None, default: str = "S") -> None:
        self.calls: list[list[dict[str, str]]] = []
        self.max_tokens: list[int] = []
        self.replies = list(replies or [])
        self.default = default

    def __call__(self, messages: list[dict[str, str]], *, max_tokens: int) -> str:
        self.calls.append([dict(m) for m in messages])
        self.max_tokens.append(max_tokens)
        reply = self.replies.pop(0) if self.replies else self.default
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(messages)
        return reply


@pytest.fixture
def recorder() -> RecordingSummarizer:
    """A fresh ``RecordingSummarizer`` answering ``"S"``."""
    return RecordingSummarizer()


@pytest.fixture
def make_recorder() -> type[RecordingSummarizer]:
    """The ``RecordingSummarizer`` class, to build recorders with scripted replies."""
    return RecordingSummarizer
