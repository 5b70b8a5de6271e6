"""Policy overhead: per-request client+server cost, and the cost of building turn k's prompt ids.

(a) ``VLLMPolicy.aact`` against a reference server process in its fake fixed-token mode
    (no model runs, so the figure is pure client + HTTP + server overhead): median
    microseconds per request at concurrency 1 and 64, next to a raw POST of the same body
    through the policy's own connection pool (``HttpTransport``: the server-and-transport floor),
    and the client process's CPU time per request (less sensitive than wall times to other
    load on the machine; the server runs in its own process).
(b) Building turn k's prompt ids, k = 1..50, in one tool-use conversation: the incremental
    ``ChatTokenBuilder`` (cost grows with the new messages only) against a naive full
    re-render of the conversation (cost grows with its length). Reports turn-50 / turn-1.

Usage:
    python benchmarks/policy_overhead.py [--requests 400] [--turns 50] [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from server_process import start_reference_server

from agent_gym.models import build_tiny_model, load_qwen_tokenizer
from agent_gym.policy import ChatTokenBuilder, SamplingParams, VLLMPolicy
from agent_gym.policy.chat_messages import as_id_list

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
REPLY = (
    "<think>\nI should compute the product step by step and check the result once more.\n</think>\n\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "(12.5 + 3) * 4 / 7"}}\n</tool_call>'
)
TOOL_RESULT = '{"result": 8.857142857142858, "elapsed_ms": 0.02, "note": "computed with the safe evaluator"}'


def start_fake_server(model_dir: str, fake_tokens: int) -> tuple[subprocess.Popen, str]:
    """Start ``python -m agent_gym.reference_server --fake-tokens N`` and wait until it is healthy."""
    return start_reference_server(["--model", model_dir, "--fake-tokens", str(fake_tokens), "--max-model-len", "32768"])


async def _policy_latencies(
    policy: VLLMPolicy, concurrency: int, requests: int, turns_per_episode: int = 8
) -> tuple[list[float], float, float]:
    """Run ``requests`` turns over ``concurrency`` concurrent workers, each playing episodes of
    ``turns_per_episode`` tool-use turns; return per-request µs, the wall time and the client
    process's CPU time in s."""
    per_worker = max(1, requests // concurrency)
    latencies: list[float] = []

    async def worker(w: int) -> None:
        done, episode = 0, 0
        while done < per_worker:
            session = f"c{concurrency}-w{w}-e{episode}"
            messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": f"task {w}"}]
            for k in range(min(turns_per_episode, per_worker - done)):
                start = time.perf_counter()
                out = await policy.aact(messages, session_id=session, tools=TOOLS)
                latencies.append((time.perf_counter() - start) * 1e6)
                messages = messages + [{"role": "assistant", "content": out.text}, {"role": "tool", "content": f"{k}"}]
                done += 1
            policy.close_session(session)
            episode += 1

    await worker(-1)  # warm up connections and the model-info cache
    latencies.clear()
    # A full collection of the process's ~400k objects (torch, transformers) costs ~0.25 s; start
    # every window from a clean heap so that none falls inside it by chance.
    gc.collect()
    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return latencies, time.perf_counter() - start, time.process_time() - cpu_start


async def _raw_latencies(address: str, body: dict[str, Any], concurrency: int, requests: int) -> list[float]:
    from agent_gym.policy.http_transport import HttpTransport

    latencies: list[float] = []
    transport = HttpTransport(max_connections=concurrency + 8, timeout=60, connect_timeout=10)
    url = f"http://{address}/v1/completions"
    try:
        await transport.post_json(url, body)

        async def worker() -> None:
            for _ in range(max(1, requests // concurrency)):
                start = time.perf_counter()
                resp = await transport.post_json(url, body)
                assert resp.status == 200, resp.text[:200]
                latencies.append((time.perf_counter() - start) * 1e6)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await transport.aclose()
    return latencies


def bench_requests(model_dir: str, tokenizer: Any, requests: int, fake_tokens: int = 8) -> dict[str, Any]:
    """Part (a): median µs per request through VLLMPolicy and a raw POST, at concurrency 1 and 64."""
    proc, address = start_fake_server(model_dir, fake_tokens)
    results: dict[str, Any] = {"fake_tokens": fake_tokens, "requests": requests}
    try:
        policy = VLLMPolicy([address], tokenizer, SamplingParams(max_tokens=64),
                            client_options={"concurrency": 64})
        prompt = ChatTokenBuilder(tokenizer).render_ids(
            [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "task"}], TOOLS
        )
        body = {"prompt": prompt, "max_tokens": 64, "logprobs": 1, "return_token_ids": True,
                "return_tokens_as_token_ids": True, "skip_special_tokens": False}

        async def run_all() -> None:
            for concurrency in (1, 64):
                lat, wall, cpu = await _policy_latencies(policy, concurrency, requests)
                raw = await _raw_latencies(address, body, concurrency, requests)
                results[f"concurrency_{concurrency}"] = {
                    "policy_median_us": round(statistics.median(lat), 1),
                    "raw_http_median_us": round(statistics.median(raw), 1),
                    "policy_wall_us_per_request": round(wall / len(lat) * 1e6, 1),
                    "policy_cpu_us_per_request": round(cpu / len(lat) * 1e6, 1),
                    "requests": len(lat),
                }
            await policy.aclose()

        asyncio.run(run_all())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return results


def _best_of(fn: Any, tries: int) -> tuple[float, Any]:
    """Smallest wall time of ``tries`` calls of ``fn`` in µs, and its last result."""
    best, result = float("inf"), None
    for _ in range(tries):
        start = time.perf_counter()
        result = fn()
        best = min(best, (time.perf_counter() - start) * 1e6)
    return best, result


def bench_prompt_building(tokenizer: Any, turns: int, repeats: int) -> dict[str, Any]:
    """Part (b): µs to build turn k's prompt ids, incremental builder vs naive full re-render.

    ``prepare`` does not change the session, so each turn is timed ``repeats`` times (best
    of), with the garbage collector paused; the naive render is timed the same way.
    """
    builder = ChatTokenBuilder(tokenizer, track_retokenization=False)
    sampled = tokenizer.encode(REPLY, add_special_tokens=False) + [builder.eot_token_id]
    incremental: list[float] = []
    naive: list[float] = []
    lengths: list[int] = []
    messages = [{"role": "system", "content": "You are a careful agent."},
                {"role": "user", "content": "Compute (12.5 + 3) * 4 / 7 and explain."}]
    builder.prepare("warm-up", messages, TOOLS)  # compile the template, probe the tokenizer
    gc.collect()
    gc.disable()
    try:
        for k in range(turns):
            msgs = messages
            t_inc, plan = _best_of(lambda m=msgs: builder.prepare("bench", m, TOOLS), repeats)
            t_naive, rendered = _best_of(
                lambda m=msgs: tokenizer.apply_chat_template(m, tools=TOOLS, tokenize=True, add_generation_prompt=True),
                repeats,
            )
            full = as_id_list(rendered)
            if full != plan.prompt_ids:
                raise RuntimeError(f"turn {k + 1}: incremental and full prompts differ")
            incremental.append(t_inc)
            naive.append(t_naive)
            lengths.append(len(plan.prompt_ids))
            builder.commit(plan, sampled, REPLY)
            messages = messages + [{"role": "assistant", "content": REPLY}, {"role": "tool", "content": TOOL_RESULT}]
    finally:
        gc.enable()
    return {
        "turns": turns,
        "prompt_ids_turn_1": lengths[0],
        f"prompt_ids_turn_{turns}": lengths[-1],
        "builder_us": {"turn_1": round(incremental[0], 1), "turn_2": round(incremental[1], 1),
                       f"turn_{turns}": round(incremental[-1], 1)},
        "naive_us": {"turn_1": round(naive[0], 1), "turn_2": round(naive[1], 1), f"turn_{turns}": round(naive[-1], 1)},
        "builder_ratio_last_over_first": round(incremental[-1] / incremental[0], 2),
        "builder_ratio_last_over_turn_2": round(incremental[-1] / incremental[1], 2),
        "naive_ratio_last_over_first": round(naive[-1] / naive[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=640, help="requests per concurrency level")
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-server", action="store_true", help="only run part (b)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    tokenizer = load_qwen_tokenizer()
    results: dict[str, Any] = {"prompt_building": bench_prompt_building(tokenizer, args.turns, args.repeats)}
    if not args.skip_server:
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = str(build_tiny_model(os.path.join(tmp, "model"), tokenizer=tokenizer))
            results["requests"] = bench_requests(model_dir, tokenizer, args.requests)
    if args.json:
        print(json.dumps(results))
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
