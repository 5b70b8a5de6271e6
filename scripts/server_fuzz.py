"""Bounded HTTP fuzz of agent_gym's four servers: malformed requests, huge bodies, /health watched throughout.

Starts each server in its own process on a free local port (``agent-gym serve`` on the embedded
tiny model or in fake mode, ``agent-gym gateway`` over a fake-mode reference server,
``agent-gym serve-env agent_gym/ToolUse-v0``, ``agent-gym serve-retriever``), each with a
token, and sends it ``--requests`` requests built from valid ones by mutation: random bytes,
truncated and deeply nested JSON, wrong types and out-of-range values in every field, lone
surrogates, NaN literals, huge lists (messages, prompts, ``n``, tools), bodies of up to
``--max-body-mb`` MiB (declared and chunked), wrong methods and paths, missing and wrong tokens,
streamed requests abandoned after the first bytes; serve-env also gets malformed WebSocket
messages. Meanwhile a thread asks ``GET /health`` every 100 ms (its latency, a timeout counted as
5 s) and another reads the server's resident memory.

Reported per server: requests sent, answers by status class, 5xx answers (with the first few
requests that caused them), connections the server closed, deaths (the process exited),
``/health`` p50 / p99 / max latency, and resident memory at start, at most and at the end. Last,
each server is stopped with SIGTERM while requests are in flight (one whose body is half sent,
and one heavy request: a large prompt to tokenize, a large conversation, a large query): the
seconds it took to exit and its exit code are reported.
Exit code 1 when a server died, answered a 5xx, had a ``/health`` p99 of 1 s or more, or took
more than 6 s to stop.

Usage: ``python scripts/server_fuzz.py [--requests 300] [--max-body-mb 64] [--servers serve gateway ...]
[--fake-serve] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
from fuzz_requests import Fuzzer

TOKEN = "fuzz-token"
SERVERS = ("serve", "gateway", "serve-env", "serve-retriever")


def free_port() -> int:
    """A free local TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float | None:
    """Resident memory of ``pid`` (and its children) in MiB, from /proc."""
    total = 0
    pids = [pid]
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            pids += [int(p) for p in fh.read().split()]
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            if p == pid:
                return None
    return total / 1024


class Server:
    """One server process on a free port."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([*argv, "--port", str(self.port)], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, text=True,
                                        errors="replace")
        assert self.process.stdout is not None
        self.start_line = self.process.stdout.readline().strip()  # where it listens, who may use it
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode} while starting")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.2)

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for _ in self.process.stdout:
            pass

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after 15 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


PROBE = r"""
import sys, time, http.client
url_host, port = sys.argv[1], int(sys.argv[2])
conn = None
while True:
    began = time.perf_counter()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(url_host, port, timeout=5)
        conn.request("GET", "/health")
        conn.getresponse().read()
        took = time.perf_counter() - began
    except Exception:
        conn = None
        took = max(time.perf_counter() - began, 5.0)
    print(f"{took:.6f}", flush=True)
    time.sleep(0.1)
"""


class Watch:
    """Watches a server: ``/health`` latency and resident memory.

    ``/health`` is asked every 100 ms from a process of its own (the fuzzing threads do not delay it); memory is
    read every 500 ms.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.latencies: list[float] = []
        self.rss: list[float] = []
        self._stop = threading.Event()
        self._probe = subprocess.Popen([sys.executable, "-c", PROBE, "127.0.0.1", str(server.port)],
                                       stdout=subprocess.PIPE, text=True)
        self._threads = [threading.Thread(target=self._health, daemon=True),
                         threading.Thread(target=self._memory, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _health(self) -> None:
        assert self._probe.stdout is not None
        for line in self._probe.stdout:
            with contextlib.suppress(ValueError):
                self.latencies.append(float(line))

    def _memory(self) -> None:
        while not self._stop.is_set():
            value = rss_mib(self.server.process.pid)
            if value is not None:
                self.rss.append(value)
            self._stop.wait(0.5)

    def stop(self) -> None:
        """Stop probing."""
        self._stop.set()
        self._probe.terminate()
        self._probe.wait()
        for thread in self._threads:
            thread.join(timeout=10)


# --------------------------------------------------------------------------- mutations
CHAT = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_tokens": 8, "temperature": 1.0, "n": 1,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
ANTHROPIC = {"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}],
             "tools": [{"name": "f", "input_schema": {"type": "object"}}]}
RESPONSES = {"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "Be brief.",
             "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}


def serve_templates() -> list[dict[str, Any]]:
    """Valid requests of ``agent-gym serve``."""
    chat = {k: v for k, v in CHAT.items() if k != "tools"}
    return [
        {"method": "POST", "path": "/v1/completions",
         "body": {"prompt": [1, 2, 3], "max_tokens": 8, "n": 1, "logprobs": 1, "return_token_ids": True}},
        {"method": "POST", "path": "/v1/completions", "body": {"prompt": ["hello", "world"], "max_tokens": 4}},
        {"method": "POST", "path": "/v1/chat/completions",
         "body": {**chat, "chat_template_kwargs": {"enable_thinking": False}}},
        {"method": "POST", "path": "/tokenize", "body": {"prompt": "hello"}},
        {"method": "POST", "path": "/tokenize", "body": {"messages": chat["messages"]}},
        {"method": "POST", "path": "/detokenize", "body": {"tokens": [1, 2, 3]}},
        {"method": "POST", "path": "/inference/v1/generate",
         "body": {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4, "logprobs": 1}}},
        {"method": "POST", "path": "/generate", "body": {"input_ids": [1, 2, 3], "sampling_params":
                                                         {"max_new_tokens": 4}, "return_logprob": True}},
        {"method": "GET", "path": "/v1/models"},
    ]


def gateway_templates(sessions: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Valid requests of ``agent-gym gateway`` (``sessions``: created ones, with their keys)."""
    sid = sessions[0]["session_id"]
    return [
        {"method": "POST", "path": "/v1/chat/completions", "body": CHAT},
        {"method": "POST", "path": f"/sessions/{sid}/v1/chat/completions", "body": CHAT},
        {"method": "POST", "path": "/v1/messages", "body": ANTHROPIC},
        {"method": "POST", "path": "/v1/responses", "body": RESPONSES},
        {"method": "POST", "path": "/sessions", "body": {"task": {"id": "t"}, "group_id": "g", "idx": 0}},
        {"method": "GET", "path": "/sessions"},
        {"method": "GET", "path": f"/sessions/{sid}/trajectory"},
        {"method": "POST", "path": f"/sessions/{sessions[-1]['session_id']}/reward",
         "body": {"reward": 1.0, "rewards": [0.0], "status": "ENV_DONE"}},
        {"method": "GET", "path": "/v1/models"},
    ]


def env_templates() -> list[dict[str, Any]]:
    """Valid (and near-valid) requests of ``agent-gym serve-env``."""
    return [
        {"method": "POST", "path": "/reset", "body": {"seed": 1, "task_id": "nope", "options": {"task_index": 0}}},
        {"method": "POST", "path": "/reset", "body": {"task": {"id": "x", "question": "q", "ground_truth": "a"}}},
        {"method": "POST", "path": "/step", "body": {"action": {"message": "<answer>1</answer>"}}},
        {"method": "GET", "path": "/state"},
        {"method": "GET", "path": "/schema"},
        {"method": "GET", "path": "/metadata"},
        {"method": "POST", "path": "/mcp", "body": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}},
    ]


def retriever_templates() -> list[dict[str, Any]]:
    """Valid requests of ``agent-gym serve-retriever``."""
    return [
        {"method": "POST", "path": "/retrieve", "body": {"queries": ["capital of france", "x"], "topk": 3,
                                                         "return_scores": True}},
        {"method": "POST", "path": "/documents", "body": {"ids": ["0", "1"]}},
    ]


def fuzz_websocket(server: Server, rng: random.Random, count: int, max_body: int) -> Counter[str]:
    """Malformed messages over serve-env's /ws sessions; returns what happened."""
    from websockets.sync.client import connect

    seen: Counter[str] = Counter()
    messages: list[Callable[[], str | bytes]] = [
        lambda: "not json", lambda: json.dumps([1]), lambda: json.dumps({"type": "nope"}),
        lambda: json.dumps({"type": "step", "data": {"message": "x"}}),
        lambda: json.dumps({"type": "reset", "data": {"seed": rng.choice([-1, "x", 2**70, None, 1.5])}}),
        lambda: json.dumps({"type": "reset", "data": {"task": {"id": "x", "question": "q", "ground_truth": "a"}}}),
        lambda: json.dumps({"type": "reset", "data": {"options": {"task_index": rng.choice([-1, 10**9, "a"])}}}),
        lambda: json.dumps({"type": "reset", "data": {"task_id": rng.choice([1, None, "nope", "a" * 10000])}}),
        lambda: json.dumps({"type": "reset", "data": {"seed": 3}}),
        lambda: json.dumps({"type": "step", "data": {"message": "a" * rng.choice([10, 100_000])}}),
        lambda: json.dumps({"type": "state"}), lambda: json.dumps({"type": "mcp", "data": {"x": 1}}),
        lambda: b"\x00\xff" * 10, lambda: "x" * min(max_body + 10, 64 * 2**20),
    ]
    socket_ = None
    for _ in range(count):
        try:
            if socket_ is None:
                socket_ = connect(server.url.replace("http", "ws") + "/ws", open_timeout=10, max_size=2**26,
                                  additional_headers={"Authorization": f"Bearer {TOKEN}"})
            socket_.send(rng.choice(messages)())
            answer = json.loads(socket_.recv(timeout=30))
            seen[str(answer.get("type") if isinstance(answer, dict) else "other")] += 1
        except Exception as exc:  # noqa: BLE001 - a closed session is an outcome here, not a failure
            seen[type(exc).__name__] += 1
            with contextlib.suppress(Exception):
                if socket_ is not None:
                    socket_.close()
            socket_ = None
    if socket_ is not None:
        socket_.close()
    return seen


def stop_in_flight(server: Server, name: str, heavy: tuple[str, bytes, dict[str, str]] | None) -> tuple[float, int]:
    """SIGTERM ``server`` while a half-sent request and ``heavy`` (path, body, headers) are in flight.

    Returns:
        Seconds until the process exited, and its exit code (as a shell reports it: 128 + signal).
    """
    half = socket.create_connection(("127.0.0.1", server.port))
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 100000\r\n\r\n{\"prompt\": ")
    if heavy is not None:
        path, body, headers = heavy

        def post() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(server.url + path, content=body, headers=headers, timeout=60)

        threading.Thread(target=post, daemon=True).start()
    time.sleep(1.0)
    began = time.monotonic()
    server.process.send_signal(15)
    try:
        code = server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        code = server.process.wait()
    half.close()
    return time.monotonic() - began, 128 - code if code < 0 else code


def heavy_request(name: str, sessions: list[dict[str, str]],
                  words: int = 1_000_000) -> tuple[str, bytes, dict[str, str]] | None:
    """A request that keeps server ``name`` busy for seconds (within its limits): ``words`` words to tokenize."""
    auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    if name == "serve":
        return "/v1/completions", json.dumps({"prompt": "word " * words, "max_tokens": 4}).encode(), auth
    if name == "gateway":
        key = {**auth, "Authorization": f"Bearer {sessions[-1]['api_key']}"}
        return "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "word " * words}]}
                                                  ).encode(), key
    if name == "serve-retriever":
        return "/retrieve", json.dumps({"queries": ["capital of france " * 100] * 400, "topk": 3}).encode(), auth
    return None


def start(name: str, fake_serve: bool, upstream: Server | None) -> Server:
    """Start server ``name`` (the gateway over ``upstream``)."""
    py = [sys.executable, "-m", "agent_gym"]
    if name == "serve":
        extra = ["--fake-tokens", "16"] if fake_serve else []
        return Server(name, [*py, "serve", *extra, "--api-key", TOKEN])
    if name == "gateway":
        assert upstream is not None
        return Server(name, [*py, "gateway", "--server", upstream.url.removeprefix("http://"), "--tokenizer", "qwen",
                             "--max-tokens", "16", "--trainer-token", TOKEN, "--server-api-key", TOKEN])
    if name == "serve-env":
        return Server(name, [*py, "serve-env", "agent_gym/ToolUse-v0", "--token", TOKEN, "--max-sessions", "16"])
    return Server(name, [*py, "serve-retriever", "--token", TOKEN])


def start_all(names: list[str], fake_serve: bool) -> tuple[dict[str, Server], Server | None]:
    """Start the servers ``names`` (and the gateway's upstream) concurrently."""
    upstream = start("serve", True, None) if "gateway" in names else None
    servers: dict[str, Server] = {}
    failures: list[BaseException] = []

    def one(name: str) -> None:
        try:
            servers[name] = start(name, fake_serve, upstream)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        for server in servers.values():
            server.stop()
        if upstream is not None:
            upstream.stop()
        raise failures[0]
    return servers, upstream


def fuzz_one(name: str, server: Server, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """Fuzz server ``name``; returns its figures (its stop is measured later)."""
    trainer = {"Authorization": f"Bearer {TOKEN}"}
    if name == "gateway":
        sessions = [httpx.post(f"{server.url}/sessions", json={}, headers=trainer).json() for _ in range(4)]
        templates = gateway_templates(sessions)

        def headers() -> dict[str, str]:
            return {"Authorization": f"Bearer {rng.choice([*[s['api_key'] for s in sessions], TOKEN])}",
                    **({"anthropic-version": "2023-06-01"} if rng.random() < 0.2 else {})}
    else:
        sessions = []
        templates = {"serve": serve_templates, "serve-env": env_templates,
                     "serve-retriever": retriever_templates}[name]()

        def headers() -> dict[str, str]:
            return dict(trainer)
    watch = Watch(server)
    fuzzer = Fuzzer(server, templates, rng, args.max_body_mb * 2**20, headers)
    began = time.monotonic()
    lock = threading.Lock()
    budget = [args.requests]

    def worker() -> None:
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
            while True:
                with lock:
                    if budget[0] <= 0 or server.process.poll() is not None:
                        return
                    budget[0] -= 1
                fuzzer.send(client)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ws: Counter[str] = Counter()
    if name == "serve-env" and server.process.poll() is None:
        ws = fuzz_websocket(server, rng, max(args.requests // 3, 20), 8 * 2**20)
    time.sleep(0.5)
    watch.stop()
    lat = sorted(watch.latencies) or [float("nan")]
    return {
        "server": name, "requests": fuzzer.sent, "seconds": round(time.monotonic() - began, 1),
        "statuses": dict(fuzzer.statuses), "5xx": sum(v for k, v in fuzzer.statuses.items() if k == "5xx"),
        "5xx_examples": fuzzer.errors_5xx, "closed_by_server": fuzzer.closed,
        "deaths": int(server.process.poll() is not None), "websocket": dict(ws),
        "health_probes": len(watch.latencies),
        "health_p50_ms": round(statistics.median(lat) * 1000, 1),
        "health_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
        "health_max_ms": round(lat[-1] * 1000, 1),
        "rss_start_mib": round(watch.rss[0], 1) if watch.rss else None,
        "rss_max_mib": round(max(watch.rss), 1) if watch.rss else None,
        "rss_end_mib": round(watch.rss[-1], 1) if watch.rss else None,
        "start_line": server.start_line,
        "sessions": sessions,
    }


def stop_all(servers: dict[str, Server], results: list[dict[str, Any]], heavy: bool) -> None:
    """SIGTERM every live server at once, each with requests in flight; adds ``stop_s`` and ``stop_exit_code``."""
    def one(result: dict[str, Any]) -> None:
        server = servers[result["server"]]
        if server.process.poll() is not None:
            result["stop_s"], result["stop_exit_code"] = float("nan"), server.process.returncode
            return
        # light: a half-sent request everywhere, and the case on the gateway (a conversation it renders)
        load = heavy_request(result["server"], result["sessions"]) if heavy else \
            heavy_request(result["server"], result["sessions"], 300_000) if result["server"] == "gateway" else None
        stop_s, code = stop_in_flight(server, result["server"], load)
        result["stop_s"], result["stop_exit_code"] = round(stop_s, 2), code

    threads = [threading.Thread(target=one, args=(result,)) for result in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        result.pop("sessions", None)


def main(argv: list[str] | None = None) -> int:
    """Fuzz the servers asked for and print the table; 1 when one died, answered a 5xx or was slow."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    parser.add_argument("--requests", type=int, default=300, help="malformed requests per server (default 300)")
    parser.add_argument("--max-body-mb", type=int, default=64, help="largest body sent, in MiB (default 64)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight per server (default 4)")
    parser.add_argument("--fake-serve", action="store_true", help="agent-gym serve in fake mode (no model)")
    parser.add_argument("--light-stop", action="store_true",
                        help="stop with a half-sent request in flight (and a smaller conversation on the gateway)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    servers, upstream = start_all(args.servers, args.fake_serve)
    try:
        results = [fuzz_one(name, servers[name], args, rng) for name in args.servers]
        stop_all(servers, results, heavy=not args.light_stop)
    finally:
        for server in servers.values():
            server.stop()
        if upstream is not None:
            upstream.stop()
    print("| server | requests | 2xx | 4xx | 5xx | closed by server | deaths | /health p50 | p99 | max "
          "| RSS start / max / end (MiB) | SIGTERM in flight: exit after, code |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["statuses"]
        print(f"| {r['server']} | {r['requests']} | {s.get('2xx', 0)} | {s.get('4xx', 0)} | {r['5xx']} | "
              f"{r['closed_by_server']} | {r['deaths']} | {r['health_p50_ms']} ms | {r['health_p99_ms']} ms | "
              f"{r['health_max_ms']} ms | {r['rss_start_mib']} / {r['rss_max_mib']} / {r['rss_end_mib']} | "
              f"{r['stop_s']} s, {r['stop_exit_code']} |")
        for example in r["5xx_examples"]:
            print(f"    5xx: {example}")
        if r["websocket"]:
            print(f"    websocket messages: {r['websocket']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    bad = [r for r in results if r["deaths"] or r["5xx"] or not r["health_p99_ms"] < 1000 or not r["stop_s"] < 6]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
