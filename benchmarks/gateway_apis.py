"""Gateway overhead per turn on ``/v1/responses`` beside ``/v1/chat/completions``.

One reference server in fake mode (8 fixed tokens, no model) and one ``agent-gym gateway``
process; a raw aiohttp client runs the same multi-turn sessions (system + user, then each turn
appends the reply and a new user message) on each API, unstreamed and streamed, interleaved in
rounds so that the machine's load hits every variant alike. Reported per turn: the median wall
time and the gateway process's CPU time (from /proc), with the ratio of Responses to chat
completions.

Usage: ``python benchmarks/gateway_apis.py [--turns 200] [--rounds 3] [--concurrency 1 16]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import TRAINER, _cpu, _port, _spawn  # noqa: E402

SYSTEM = "You are a helpful assistant."


def _body(api: str, history: list[dict[str, str]], stream: bool) -> bytes:
    if api == "chat":
        return orjson.dumps({"model": "m", "messages": [{"role": "system", "content": SYSTEM}, *history],
                             "stream": stream})
    items = [{"type": "message", "role": m["role"], "content": m["content"]} for m in history]
    return orjson.dumps({"model": "m", "instructions": SYSTEM, "input": items, "stream": stream})


def _reply(api: str, data: dict) -> str:
    if api == "chat":
        return data["choices"][0]["message"]["content"]
    return "".join(part["text"] for item in data["output"] if item["type"] == "message" for part in item["content"])


async def _sessions(url: str, api: str, stream: bool, concurrency: int, turns: int, per_session: int) -> list[float]:
    path = "chat/completions" if api == "chat" else "responses"
    times: list[float] = []
    counter = iter(range(10**9))
    trainer = {"Authorization": f"Bearer {TRAINER}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 8)) as http:

        async def worker() -> None:
            while len(times) < turns:
                sid = f"{api}{next(counter)}-{uuid.uuid4().hex[:8]}"
                async with http.post(f"{url}/sessions", json={"session_id": sid}, headers=trainer) as r:
                    key = (await r.json())["api_key"]
                headers = {"content-type": "application/json", "Authorization": f"Bearer {key}"}
                history = [{"role": "user", "content": "Start."}]
                for k in range(per_session):
                    t0 = time.perf_counter()
                    async with http.post(f"{url}/sessions/{sid}/v1/{path}", data=_body(api, history, stream),
                                         headers=headers) as r:
                        if stream:
                            text = ""
                            async for line in r.content:
                                if not line.startswith(b"data: {"):
                                    continue
                                event = orjson.loads(line[6:])
                                if api == "chat" and event.get("choices"):
                                    text += event["choices"][0]["delta"].get("content") or ""
                                elif event.get("type") == "response.output_text.delta":
                                    text += event["delta"]
                        else:
                            data = orjson.loads(await r.read())
                            if r.status != 200:
                                raise RuntimeError(f"gateway answered {data}")
                            text = _reply(api, data)
                    times.append(time.perf_counter() - t0)
                    history = [*history, {"role": "assistant", "content": text}, {"role": "user", "content": f"{k}"}]
                async with http.post(f"{url}/sessions/{sid}/reward", json={"reward": 0.0}, headers=trainer) as r:
                    await r.read()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per variant and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--per-session", type=int, default=4, help="turns per session")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    py = sys.executable
    sp, gp = _port(), _port()
    server = _spawn([py, "-m", "agent_gym.reference_server", "--port", str(sp), "--fake-tokens", "8"], sp)
    gateway = _spawn([py, "-m", "agent_gym", "gateway", "--server", f"127.0.0.1:{sp}", "--tokenizer", "qwen",
                      "--port", str(gp), "--auto-sessions", "--max-tokens", "16"], gp)
    url = f"http://127.0.0.1:{gp}"
    variants = [(api, stream) for stream in (False, True) for api in ("chat", "responses")]
    try:
        for api, stream in variants:  # warm-up
            asyncio.run(_sessions(url, api, stream, 1, 16, 4))
        print(f"fake server: 8 tokens; {args.turns} turns x {args.rounds} rounds per variant, "
              f"{args.per_session} per session")
        print("| API | streamed | concurrency | median turn | gateway CPU/turn | Responses / chat (CPU) |")
        print("|---|---|---|---|---|---|")
        for conc in args.concurrency:
            walls: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
            cpus: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for variant in variants:
                    c0 = _cpu(gateway.pid)
                    times = asyncio.run(_sessions(url, *variant, conc, args.turns, args.per_session))
                    cpus[variant].append((_cpu(gateway.pid) - c0) / len(times))
                    walls[variant] += times
            for api, stream in variants:
                cpu = statistics.median(cpus[(api, stream)])
                ratio = cpu / statistics.median(cpus[("chat", stream)])
                print(f"| {api} | {'yes' if stream else 'no'} | {conc} | "
                      f"{statistics.median(walls[(api, stream)]) * 1e3:.2f} ms | {cpu * 1e3:.2f} ms | "
                      f"{ratio:.2f}x |")
    finally:
        for proc in (gateway, server):
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
