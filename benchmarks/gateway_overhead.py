"""Gateway overhead per turn against the reference server's fake mode.

Three ways to run the same multi-turn sessions (system + user, then each turn appends the
assistant reply and a new user message), at concurrency 1 and 64:

* ``direct``: an in-process ``VLLMPolicy`` talks to the fake server;
* ``proxy``: the same policy through a plain pass-through HTTP proxy (FastAPI + aiohttp,
  a separate process) that forwards ``/v1/completions`` bodies untouched;
* ``gateway``: an OpenAI-style client (raw aiohttp) talks to ``agent-gym gateway`` (a separate
  process) which samples token-in from the fake server and records the sessions.

Reported per turn: median wall time of a turn, the client process's CPU time, and the CPU time of
the middle process (proxy or gateway, read from /proc). The gateway's *added* CPU per turn is its
CPU per turn minus the direct policy's CPU per turn (the work the gateway does instead of the
client's policy: prompt ids, request, decoding), next to what a pass-through proxy costs.

Usage: ``python benchmarks/gateway_overhead.py [--turns 400] [--latency-ms 0]``

``--compare BEFORE AFTER`` (two source trees of the package, e.g. ``git archive`` exports of two commits) runs
instead the fake server and the gateway of each tree side by side and measures, in ``--rounds`` interleaved rounds,
each server process's CPU time per turn and the median turn (the ratios are the medians, with quartiles, of
each round's after/before ratio): the reference server under a direct ``VLLMPolicy``
(token-in ``/v1/completions``), and the gateway under a chat client whose sessions the trainer creates
(``POST /sessions``, then the session's key on every turn, the trainer's token on the reward): what the limits
and the role check cost per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid

import aiohttp
import orjson

PROXY = r'''
import sys, aiohttp, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
upstream = sys.argv[1]
app = FastAPI()
state = {}
@app.post("/v1/completions")
async def completions(request: Request):
    if "s" not in state:
        state["s"] = aiohttp.ClientSession()
    async with state["s"].post(upstream + "/v1/completions", data=await request.body(),
                               headers={"content-type": "application/json"}) as r:
        return Response(await r.read(), status_code=r.status, media_type="application/json")
@app.get("/v1/models")
async def models():
    async with aiohttp.ClientSession() as s, s.get(upstream + "/v1/models") as r:
        return Response(await r.read(), media_type="application/json")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
'''


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn(argv: list[str], port: int, env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                            env={**os.environ, "AGENT_GYM_TRAINER_TOKEN": TRAINER, **(env or {})})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[:4]} exited") from None
            time.sleep(0.2)
    raise RuntimeError(f"{argv[:4]} did not start")


def _messages(turn: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Start."}]


async def _policy_sessions(address: str, tokenizer, concurrency: int, turns: int, per_session: int,
                           stream: bool = False):
    from agent_gym.policy import SamplingParams, VLLMPolicy

    policy = VLLMPolicy([address], tokenizer, SamplingParams(max_tokens=16),
                        client_options={"concurrency": max(concurrency, 8)})
    times: list[float] = []
    counter = iter(range(10**9))

    async def worker():
        while len(times) < turns:
            sid = f"s{next(counter)}"
            msgs = _messages(0)
            for k in range(per_session):
                t0 = time.perf_counter()
                if stream:
                    async for event in policy.astream(msgs, session_id=sid):
                        out = event.output
                else:
                    out = await policy.aact(msgs, session_id=sid)
                times.append(time.perf_counter() - t0)
                msgs = msgs + [{"role": "assistant", "content": out.text}, {"role": "user", "content": f"More {k}."}]
            policy.close_session(sid)

    await policy.aact(_messages(0), session_id="warm")
    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu = time.process_time() - cpu0
    await policy.aclose()
    return times, cpu / len(times)


TRAINER = "bench-trainer-token"
"""The trainer's token the benchmark's gateways run with (``$AGENT_GYM_TRAINER_TOKEN``)."""


async def _gateway_sessions(url: str, concurrency: int, turns: int, per_session: int, stream: bool = False):
    times: list[float] = []
    counter = iter(range(10**9))
    trainer = {"Authorization": f"Bearer {TRAINER}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 8)) as http:

        async def worker():
            while len(times) < turns:
                sid = f"g{next(counter)}-{uuid.uuid4().hex[:8]}"
                async with http.post(f"{url}/sessions", json={"session_id": sid}, headers=trainer) as r:
                    key = (await r.json())["api_key"]  # the session id itself on a gateway without keys
                headers = {"content-type": "application/json", "Authorization": f"Bearer {key}"}
                msgs = _messages(0)
                for k in range(per_session):
                    body = orjson.dumps({"model": "m", "messages": msgs, "stream": stream})
                    t0 = time.perf_counter()
                    async with http.post(f"{url}/sessions/{sid}/v1/chat/completions", data=body,
                                         headers=headers) as r:
                        if stream:
                            text = ""
                            async for line in r.content:
                                if line.startswith(b"data: {"):
                                    delta = orjson.loads(line[6:])["choices"][0]["delta"]
                                    text += delta.get("content") or ""
                            data = {"choices": []}
                        else:
                            data = orjson.loads(await r.read())
                    if "choices" not in data:
                        raise RuntimeError(f"gateway answered {data}")
                    times.append(time.perf_counter() - t0)
                    if not stream:
                        text = data["choices"][0]["message"]["content"]
                    msgs = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": f"More {k}."}]
                async with http.post(f"{url}/sessions/{sid}/reward", json={"reward": 0.0}, headers=trainer) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"gateway answered {r.status} to the reward")

        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu = time.process_time() - cpu0
    return times, cpu / len(times)


def _paired(values: dict[tuple[str, str], list[float]], name: str, trees: list[str]) -> str:
    """Median [quartiles] of the rounds' last/first tree ratios (each round's runs are adjacent in time)."""
    ratios = sorted(a / b for a, b in zip(values[(name, trees[-1])], values[(name, trees[0])], strict=True))
    q = statistics.quantiles(ratios, n=4)
    return f"{statistics.median(ratios):.3f} [{q[0]:.2f}-{q[2]:.2f}]"


def compare(trees: dict[str, str], turns: int, per_session: int, rounds: int, concurrency: list[int]) -> None:
    """The reference server's and the gateway's CPU per turn and median turn for each source tree (see the docs)."""
    from agent_gym.models import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    py = sys.executable
    procs: dict[str, tuple[subprocess.Popen, str, subprocess.Popen, str]] = {}
    try:
        for label, tree in trees.items():
            root = os.path.abspath(tree)  # python -m puts the working directory first on the path: the tree's
            env = {"PYTHONPATH": root}
            sp, gp = _port(), _port()
            server = _spawn([py, "-m", "agent_gym.reference_server", "--port", str(sp), "--fake-tokens", "8"], sp, env,
                            root)
            gateway = _spawn([py, "-m", "agent_gym", "gateway", "--server", f"127.0.0.1:{sp}", "--tokenizer", "qwen",
                              "--port", str(gp), "--max-tokens", "16"], gp, env, root)
            procs[label] = (server, f"127.0.0.1:{sp}", gateway, f"http://127.0.0.1:{gp}")
            with open(f"/proc/{gateway.pid}/cmdline", "rb") as fh:
                assert fh.read(), "the gateway died"
            asyncio.run(_policy_sessions(f"127.0.0.1:{sp}", tokenizer, 1, 16, per_session))  # warm-up
            asyncio.run(_gateway_sessions(f"http://127.0.0.1:{gp}", 1, 16, per_session))
        print(f"fake server: 8 tokens; {turns} gateway turns ({5 * turns} server turns) x {rounds} interleaved rounds "
              f"per row, {per_session} per session; medians over the rounds")
        print("| server | concurrency | " + " | ".join(f"{t} CPU/turn" for t in trees) + " | CPU ratio [IQR] | "
              + " | ".join(f"{t} median turn" for t in trees) + " | latency ratio [IQR] |")
        print("|---|---|" + "---|" * (2 * len(trees) + 2))
        for conc in concurrency:
            cpu: dict[tuple[str, str], list[float]] = {}
            wall: dict[tuple[str, str], list[float]] = {}
            for r in range(rounds):
                for label in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                    server, address, gateway, url = procs[label]
                    c0 = _cpu(server.pid)  # 5x the turns: a turn of the fake server is a few CPU clock ticks' tenth
                    times, _ = asyncio.run(_policy_sessions(address, tokenizer, conc, 5 * turns, per_session))
                    cpu.setdefault(("serve", label), []).append((_cpu(server.pid) - c0) / len(times))
                    wall.setdefault(("serve", label), []).append(statistics.median(times))
                    c0 = _cpu(gateway.pid)
                    times, _ = asyncio.run(_gateway_sessions(url, conc, turns, per_session))
                    cpu.setdefault(("gateway", label), []).append((_cpu(gateway.pid) - c0) / len(times))
                    wall.setdefault(("gateway", label), []).append(statistics.median(times))
            for name in ("serve", "gateway"):
                c = {t: statistics.median(cpu[(name, t)]) * 1e3 for t in trees}
                w = {t: statistics.median(wall[(name, t)]) * 1e3 for t in trees}
                print(f"| {name} | {conc} | " + " | ".join(f"{c[t]:.3f} ms" for t in trees)
                      + f" | {_paired(cpu, name, list(trees))} | " + " | ".join(f"{w[t]:.2f} ms" for t in trees)
                      + f" | {_paired(wall, name, list(trees))} |")
    finally:
        for server, _, gateway, _ in procs.values():
            for proc in (gateway, server):
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=400, help="turns per measurement")
    parser.add_argument("--per-session", type=int, default=4, help="turns per session")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fake server latency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                        help="two source trees of the package: their servers' CPU per turn and latency side by side")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --compare")
    args = parser.parse_args()
    if args.compare:
        compare({"before": args.compare[0], "after": args.compare[1]}, args.turns, args.per_session, args.rounds,
                args.concurrency)
        return

    from agent_gym.models import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    py = sys.executable
    sp, pp, gp = _port(), _port(), _port()
    server = _spawn([py, "-m", "agent_gym.reference_server", "--port", str(sp), "--fake-tokens", "8",
                     "--fake-latency-ms", str(args.latency_ms)], sp)
    proxy = _spawn([py, "-c", PROXY, f"http://127.0.0.1:{sp}", str(pp)], pp)
    gateway = _spawn([py, "-m", "agent_gym", "gateway", "--server", f"127.0.0.1:{sp}", "--tokenizer", "qwen",
                      "--port", str(gp), "--auto-sessions", "--max-tokens", "16"], gp)
    try:
        print(f"fake server: 8 tokens, {args.latency_ms:g} ms; {args.turns} turns, {args.per_session} per session")
        print("| variant | concurrency | median turn | client CPU/turn | middle CPU/turn |")
        print("|---|---|---|---|---|")
        for conc in args.concurrency:
            direct_times, direct_cpu = asyncio.run(_policy_sessions(f"127.0.0.1:{sp}", tokenizer, conc, args.turns,
                                                                    args.per_session))
            c0 = _cpu(proxy.pid)
            proxy_times, proxy_cpu = asyncio.run(_policy_sessions(f"127.0.0.1:{pp}", tokenizer, conc, args.turns,
                                                                  args.per_session))
            proxy_mid = (_cpu(proxy.pid) - c0) / len(proxy_times)
            asyncio.run(_gateway_sessions(f"http://127.0.0.1:{gp}", 1, 8, 4))  # warm-up
            c0 = _cpu(gateway.pid)
            gw_times, gw_client = asyncio.run(_gateway_sessions(f"http://127.0.0.1:{gp}", conc, args.turns,
                                                                args.per_session))
            gw_mid = (_cpu(gateway.pid) - c0) / len(gw_times)
            ms = 1e3
            print(f"| direct VLLMPolicy | {conc} | {statistics.median(direct_times) * ms:.2f} ms | "
                  f"{direct_cpu * ms:.2f} ms | - |")
            print(f"| pass-through proxy | {conc} | {statistics.median(proxy_times) * ms:.2f} ms | "
                  f"{proxy_cpu * ms:.2f} ms | {proxy_mid * ms:.2f} ms |")
            print(f"| gateway | {conc} | {statistics.median(gw_times) * ms:.2f} ms | {gw_client * ms:.2f} ms | "
                  f"{gw_mid * ms:.2f} ms |")
            print(f"| gateway added CPU (gateway CPU - direct policy CPU) | {conc} | | | "
                  f"{(gw_mid - direct_cpu) * ms:.2f} ms |")
            # Streamed: the direct policy's astream beside a streamed client through the gateway.
            sdirect_times, sdirect_cpu = asyncio.run(_policy_sessions(f"127.0.0.1:{sp}", tokenizer, conc,
                                                                      args.turns, args.per_session, stream=True))
            c0 = _cpu(gateway.pid)
            sgw_times, sgw_client = asyncio.run(_gateway_sessions(f"http://127.0.0.1:{gp}", conc, args.turns,
                                                                  args.per_session, stream=True))
            sgw_mid = (_cpu(gateway.pid) - c0) / len(sgw_times)
            print(f"| direct VLLMPolicy.astream | {conc} | {statistics.median(sdirect_times) * ms:.2f} ms | "
                  f"{sdirect_cpu * ms:.2f} ms | - |")
            print(f"| gateway, streamed | {conc} | {statistics.median(sgw_times) * ms:.2f} ms | "
                  f"{sgw_client * ms:.2f} ms | {sgw_mid * ms:.2f} ms |")
            print(f"| gateway added CPU, streamed (gateway CPU - direct astream CPU) | {conc} | | | "
                  f"{(sgw_mid - sdirect_cpu) * ms:.2f} ms |")
    finally:
        for proc in (gateway, proxy, server):
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
