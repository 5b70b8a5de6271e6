"""MCP tools: the latency an episode's server adds (warm pool, fork server, fresh server); call round trips.

Three measurements, with the notes server shipped in ``agent_gym.tools.mcp.servers.notes``:

* **Added per-episode latency** at 1, 16 and 64 concurrent episodes. Each of C threads runs
  ``--rounds`` episodes back to back; an episode takes its server, makes ``--calls`` tool calls
  separated by ``--model-seconds / --calls`` of sleep (the model's time), and gives the server
  back. The latency the episode's server adds is the time spent taking it and giving it back
  (the calls themselves are the tool's cost, reported below). *pool*: a
  :class:`~agent_gym.tools.mcp.ServerPool` with ``warm=C`` started before the clock (as at the
  start of a training run), recycling each server in the background; *fork pool*: the same pool with
  ``fork_server=True`` (each recycled server forked from the preloaded zygote instead of an interpreter
  start); *fresh*: the episode starts its own server process and stops it (``MCPConnection.open`` /
  ``close``); *fresh fork*: the episode has its own server forked from the (running) zygote, no pool.
* **Tool-call round trip**: ``put_note`` / ``get_note`` calls from a sync thread through the
  loop bridge (``Lease.call``), over stdio and over streamable HTTP.
* **Many episodes against a light server** (``--http-episodes``, e.g. 512): that many episodes at
  once under ``collect``, each in its own MCP session of one notes server over HTTP, counting the
  episodes that did not end ``ENV_DONE`` with their own note read back and the transport retries.

Usage: ``python benchmarks/mcp.py [--concurrency 1,16,64] [--rounds 2] [--fresh-rounds 1] [--model-seconds 20]
[--calls 4] [--round-trips 400] [--http-episodes 512] [--modes pool,fork,fresh,fresh-fork]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Run as a script, this file's folder leads sys.path and this file would shadow the ``mcp`` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.modules.pop("mcp", None)

from agent_gym.env.core import AgentEnv  # noqa: E402
from agent_gym.rollout import collect  # noqa: E402
from agent_gym.tools.mcp import MCPTools, ServerPool, ServerSpec, notes_server_command  # noqa: E402
from agent_gym.tools.mcp.connection import MCPConnection, Transport  # noqa: E402
from agent_gym.tools.mcp.fork_server import ForkServer  # noqa: E402
from agent_gym.tools.mcp.runtime import shared_loop  # noqa: E402
from agent_gym.types import EpisodeStatus  # noqa: E402


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms   (n={len(ordered)})"


def _episode_calls(call: Any, calls: int, model_seconds: float, tag: str) -> None:
    for i in range(calls):
        time.sleep(model_seconds / calls)
        call("put_note", {"key": "k", "text": f"{tag}-{i}"}) if i % 2 == 0 else call("get_note", {"key": "k"})


def _pool_latencies(spec: ServerSpec, concurrency: int, rounds: int, calls: int, model_seconds: float
                    ) -> tuple[list[float], dict[str, int]]:
    pool = ServerPool(spec, warm=concurrency)
    pool.prestart()
    while pool.ready_count < concurrency:  # the warm-up, before the clock (once per training run)
        time.sleep(0.2)
    added: list[float] = []
    lock = threading.Lock()

    def slot(index: int) -> None:
        for round_index in range(rounds):
            t0 = time.perf_counter()
            lease = pool.acquire()
            taken = time.perf_counter() - t0
            _episode_calls(lambda n, a, lease=lease: lease.call(n, a, timeout=30.0), calls, model_seconds,
                           f"{index}-{round_index}")
            t1 = time.perf_counter()
            lease.release()
            with lock:
                added.append(taken + time.perf_counter() - t1)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = dict(pool.stats) | (dict(pool.fork_server.stats) if pool.fork_server is not None else {})
    pool.close()
    return added, stats


def _fresh_latencies(spec: ServerSpec, concurrency: int, rounds: int, calls: int, model_seconds: float,
                     transport: Transport | None = None) -> list[float]:
    loop = shared_loop()
    added: list[float] = []
    lock = threading.Lock()

    def slot(index: int) -> None:
        for round_index in range(rounds):
            t0 = time.perf_counter()
            connection = loop.run(MCPConnection.open(spec, transport), 600)
            taken = time.perf_counter() - t0
            _episode_calls(lambda n, a, c=connection: loop.run(c.call_tool(n, a, 30.0), 60), calls, model_seconds,
                           f"{index}-{round_index}")
            t1 = time.perf_counter()
            loop.run(connection.close(), 60)
            with lock:
                added.append(taken + time.perf_counter() - t1)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return added


def _round_trips(spec: ServerSpec, count: int) -> list[float]:
    pool = ServerPool(spec, warm=1, loop=shared_loop())
    lease = pool.acquire()
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        if i % 2 == 0:
            lease.call("put_note", {"key": f"k{i % 10}", "text": "x" * 40}, timeout=30.0)
        else:
            lease.call("get_note", {"key": f"k{(i - 1) % 10}"}, timeout=30.0)
        times.append(time.perf_counter() - t0)
    lease.release()
    pool.close()
    return times[10:]  # the first calls warm the server's code paths


@contextlib.contextmanager
def _http_server() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([*notes_server_command(), "--http", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the notes server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(30)


_WORD = re.compile(r"Remember the word (\w+)")


class _NotesPolicy:
    """Store the task's word under a key every episode uses, read it back, answer with it."""

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> str:
        word = _WORD.search(messages[1]["content"]).group(1)  # type: ignore[union-attr]
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            call = {"name": "put_note", "arguments": {"key": "shared", "text": word}}
        elif turn == 1:
            call = {"name": "get_note", "arguments": {"key": "shared"}}
        else:
            return f"<answer>{messages[-1]['content']}</answer>"
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    def close_session(self, session_id: str) -> None:
        pass


def _many_http_episodes(url: str, episodes: int) -> tuple[int, int, float, dict[str, int]]:
    tasks = [{"id": f"w{i}", "question": f"Remember the word w{i}.", "ground_truth": f"w{i}"} for i in range(episodes)]
    tools = MCPTools(url=url, warm=64, startup_timeout=120.0, call_timeout=120.0)
    t0 = time.perf_counter()
    result = collect(lambda: AgentEnv(tasks=tasks, tools=tools, max_steps=4), _NotesPolicy(), tasks=tasks,
                     n_parallel=episodes, progress=False)
    elapsed = time.perf_counter() - t0
    good = sum(t.status == EpisodeStatus.ENV_DONE and t.steps[-1].info["res_reward"] > 0 for t in result)
    stats = dict(tools.pool.stats)
    tools.pool.close()
    return len(result), good, elapsed, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=2, help="episodes per concurrent slot")
    parser.add_argument("--model-seconds", type=float, default=20.0, help="model time per episode (sleep)")
    parser.add_argument("--calls", type=int, default=4, help="tool calls per episode")
    parser.add_argument("--round-trips", type=int, default=400)
    parser.add_argument("--http-episodes", type=int, default=0, help="episodes at once against one HTTP server")
    parser.add_argument("--fresh-rounds", type=int, default=1, help="episodes per slot with a fresh server each")
    parser.add_argument("--modes", default="pool,fork,fresh,fresh-fork",
                        help="of pool (warm pool), fork (warm pool with fork_server=True), fresh, fresh-fork")
    parser.add_argument("--skip-round-trips", action="store_true")
    args = parser.parse_args()
    modes = args.modes.split(",")
    spec = ServerSpec(command=tuple(notes_server_command()), startup_timeout=600.0)
    fork_spec = ServerSpec(command=spec.command, startup_timeout=600.0, fork_server=True)

    if not args.skip_round_trips:
        print("tool-call round trip (sync caller, loop bridge):")
        print(f"  stdio  {_percentiles(_round_trips(spec, args.round_trips))}")
        print(f"  fork   {_percentiles(_round_trips(fork_spec, args.round_trips))}")
    with _http_server() as url:
        if not args.skip_round_trips:
            print(f"  http   {_percentiles(_round_trips(ServerSpec(url=url), args.round_trips))}")
        if args.http_episodes:
            total, good, elapsed, stats = _many_http_episodes(url, args.http_episodes)
            print(f"{total} concurrent episodes over HTTP: {good} ENV_DONE with their own note, "
                  f"{total - good} failed, in {elapsed:.1f} s; pool stats {stats}")
    print(f"added per-episode latency ({args.rounds} episodes per slot, {args.calls} calls, "
          f"{args.model_seconds:g} s of model time each):")
    fork_server = ForkServer(fork_spec) if "fresh-fork" in modes else None
    if fork_server is not None:  # the zygote starts before the clock, as the pool's does
        shared_loop().run(_open_and_close(fork_spec, fork_server.transport), 600)
    for concurrency in (int(c) for c in args.concurrency.split(",") if int(c) > 0):
        for mode, label, mode_spec in (("pool", "warm pool  ", spec), ("fork", "fork pool  ", fork_spec)):
            if mode in modes:
                added, stats = _pool_latencies(mode_spec, concurrency, args.rounds, args.calls, args.model_seconds)
                print(f"  C={concurrency:<3} {label} {_percentiles(added)}   {stats}", flush=True)
        if "fresh" in modes:
            fresh = _fresh_latencies(spec, concurrency, args.fresh_rounds, args.calls, args.model_seconds)
            print(f"  C={concurrency:<3} fresh       {_percentiles(fresh)}", flush=True)
        if fork_server is not None:
            fresh = _fresh_latencies(fork_spec, concurrency, args.rounds, args.calls, args.model_seconds,
                                     fork_server.transport)
            print(f"  C={concurrency:<3} fresh fork  {_percentiles(fresh)}", flush=True)
    if fork_server is not None:
        shared_loop().run(fork_server.aclose(), 60)


async def _open_and_close(spec: ServerSpec, transport: Transport) -> None:
    connection = await MCPConnection.open(spec, transport)
    await connection.close()


if __name__ == "__main__":
    main()
