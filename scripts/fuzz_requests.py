"""Malformed requests for ``scripts/server_fuzz.py``: valid templates mutated field by field, sent and counted."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import httpx

__all__ = ["Fuzzer", "FuzzTarget", "odd_values"]


class FuzzTarget(Protocol):
    """What the fuzzer needs of a server: its base URL and its process."""

    url: str
    process: subprocess.Popen


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            yield from _paths(inner, (*prefix, index))


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _set(copy[path[0]], path[1:], new)
    return copy


def _delete(value: Any, path: tuple[Any, ...]) -> Any:
    if len(path) == 1:
        copy = dict(value) if isinstance(value, dict) else list(value)
        del copy[path[0]]
        return copy
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _delete(copy[path[0]], path[1:])
    return copy


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def odd_values(rng: random.Random) -> list[Any]:
    """Values put in place of a field: wrong types, extremes, huge and deep ones."""
    return [None, True, False, -1, 0, 1, 2**31, 2**63, -(2**63), 10**30, 1e308, -1e308, 0.5, "", "x",
            "\ud800", "𝔘𝔫𝔦", "a" * rng.choice([1000, 100_000]), [], [None], [1, "a", None], {}, {"a": 1},
            list(range(rng.choice([1000, 100_000]))), [{"role": "user", "content": "x"}] * rng.choice([100, 10_000]),
            _nested(rng.choice([50, 900])), "NaN"]


class Fuzzer:
    """Builds mutated requests from a server's valid templates and sends them."""

    def __init__(self, server: FuzzTarget, templates: list[dict[str, Any]], rng: random.Random, max_body: int,
                 headers: Callable[[], dict[str, str]]) -> None:
        self.server = server
        self.templates = templates
        self.rng = rng
        self.max_body = max_body
        self.headers = headers
        self.statuses: Counter[str] = Counter()
        self.errors_5xx: list[str] = []
        self.closed = 0
        self.sent = 0
        self.big = sorted({2**20, *(size for size in (4 * 2**20, 16 * 2**20) if size < max_body), max_body})

    def request(self) -> tuple[str, str, bytes | Iterator[bytes], dict[str, str], str, bool]:
        """``(method, path, body, headers, description, streamed)``."""
        rng = self.rng
        template = rng.choice(self.templates)
        method, path, body = template["method"], template["path"], template.get("body")
        headers = {"content-type": "application/json", **self.headers()}
        kind = rng.choice(["bytes", "truncated", "toplevel", "field", "field", "field", "field", "delete", "extra",
                           "huge", "deep", "nan", "method", "path", "auth", "stream", "chunked"])
        streamed = False
        raw: bytes | Iterator[bytes]
        if kind == "bytes":
            raw = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 10, 1000])))
        elif kind == "truncated":
            text = json.dumps(body or {})
            raw = text[: rng.randrange(len(text) + 1)].encode()
        elif kind == "toplevel":
            raw = json.dumps(rng.choice([[], [1], "x", 1, None, 1.5, True])).encode()
        elif kind in ("field", "nan") and isinstance(body, (dict, list)) and body:
            path_ = rng.choice([p for p in _paths(body) if p])
            value = float("nan") if kind == "nan" else rng.choice(odd_values(rng))
            raw = json.dumps(_set(body, path_, value)).encode("utf-8", "surrogatepass")
            kind = f"{kind} {'.'.join(map(str, path_))}"
        elif kind == "delete" and isinstance(body, dict) and body:
            path_ = rng.choice([p for p in _paths(body) if p])
            raw = json.dumps(_delete(body, path_)).encode()
        elif kind == "extra" and isinstance(body, dict):
            raw = json.dumps({**body, rng.choice(["chat_template", "n", "extra", "max_tokens", "stream"]):
                              rng.choice(odd_values(rng))}).encode("utf-8", "surrogatepass")
        elif kind == "huge":
            size = rng.choice(self.big)
            raw = b'{"messages": [{"role": "user", "content": "' + b"a" * size + b'"}], "prompt": "x"}'
            kind = f"huge {size >> 20} MiB"
        elif kind == "deep":
            depth = rng.choice([1000, 100_000])
            raw = b"[" * depth + b"]" * depth
        elif kind == "method":
            method = rng.choice(["GET", "PUT", "DELETE", "PATCH", "POST"])
            raw = json.dumps(body or {}).encode()
        elif kind == "path":
            path = rng.choice(["/", "/v1", "/v1/x", "/sessions/../v1/models", "/%00", "/docs", "/openapi.json",
                               "/" + "a" * 5000, path + "/extra"])
            raw = json.dumps(body or {}).encode()
        elif kind == "auth":
            headers.pop("Authorization", None)
            if rng.random() < 0.5:
                headers["Authorization"] = rng.choice(["Bearer wrong", "Bearer ", "Basic abc", "Bearer " + "a" * 9000])
            raw = json.dumps(body or {}).encode()
        elif kind == "stream" and isinstance(body, dict):
            raw = json.dumps({**body, "stream": True}).encode()
            streamed = True
        elif kind == "chunked":
            size = rng.choice(self.big)
            piece = b"a" * 65536

            def chunks(size: int = size) -> Iterator[bytes]:
                yield b'{"messages": [{"role": "user", "content": "'
                for _ in range(size // len(piece)):
                    yield piece
                yield b'"}]}'

            raw = chunks()
            kind = f"chunked {size >> 20} MiB"
        else:
            raw = json.dumps(body or {}).encode()
            kind = "valid"
        return method, path, raw, headers, f"{kind} {method} {path[:60]}", streamed

    def send(self, client: httpx.Client) -> None:
        """Send one mutated request and count its outcome."""
        method, path, raw, headers, what, streamed = self.request()
        self.sent += 1
        try:
            if streamed:
                with client.stream(method, self.server.url + path, content=raw, headers=headers) as reply:
                    with contextlib.suppress(httpx.HTTPError):
                        next(reply.iter_bytes(), None)  # then the client goes away
                    status = reply.status_code
            else:
                status = client.request(method, self.server.url + path, content=raw, headers=headers).status_code
        except httpx.LocalProtocolError:
            self.statuses["not sent (client refused the request)"] += 1
            return
        except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError, httpx.ConnectError) as exc:
            if self.server.process.poll() is not None:
                return
            self.closed += 1  # a body over the cap: the server answered 413 and closed while it was being sent
            self.statuses[type(exc).__name__] += 1
            return
        except httpx.TimeoutException:
            self.statuses["timeout"] += 1
            return
        self.statuses[f"{status // 100}xx"] += 1
        if status >= 500 and len(self.errors_5xx) < 20:
            self.errors_5xx.append(f"{status} {what}")


# --------------------------------------------------------------------------- servers and their requests
