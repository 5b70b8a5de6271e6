"""Streaming rollouts with weight updates against synchronous collect-then-update, on a long-tailed task mix.

Both variants run the same tasks (Conversation-v0 tasks whose episodes last 1 to 16 turns, most of
them short), the same number of weight updates and the same training step, against one reference
server in fake mode with a per-token latency (a GPU server's decoding, so generation does not compete
with the training step for the CPU cores), started with ``VLLM_SERVER_DEV_MODE=1``:

* ``sync``: ``collect`` one round of groups, then the training step, then the next round;
* ``stream``: a :class:`~agent_gym.rollout.stream.RolloutStream` keeps the same number of episodes
  running; the trainer takes each round's groups as they finish, trains, and calls
  ``update_weights`` (pause in ``abort`` mode, reload, bump, resume) while episodes go on.

With ``--long-tail N`` a third variant runs the stream with ``LongTail(max_turns=N, action="park")``:
episodes over N turns park and resume once no new group can start.

Both hand out every sample of the same tasks. Prints samples per second of each, their ratio
(target >= 1.8x), and the median latency of one
pause / reload / resume cycle. ``--tiny-model`` runs the tiny model on CPU instead of fake mode,
for the record.

Example:
    python benchmarks/async_rollout.py --rounds 6 --groups 4 --samples 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

from server_process import start_reference_server

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import LongTail, RolloutStream, collect

ENV_ID = "agent_gym/Conversation-v0"


def task_mix(count: int, seed: int) -> list[dict]:
    """``count`` tasks of 1 to 16 turns, long-tailed (most 1-3 turns, one in eight 12-16)."""
    base_path = Path(__file__).resolve().parents[1] / "agent_gym/envs/conversation/data/tasks.jsonl"
    base = json.loads(base_path.read_text().splitlines()[0])
    rng = random.Random(seed)
    tasks = []
    for i in range(count):
        turns = rng.randint(12, 16) if rng.random() < 0.125 else rng.randint(1, 3)
        task = dict(base, id=f"mix-{i}-{turns}")
        task["turns"] = [base["turns"][k % len(base["turns"])] for k in range(turns)]
        task["solution"] = [base["solution"][k % len(base["solution"])] for k in range(turns)]
        task["expected_outputs"] = [[] for _ in range(turns)]
        task.pop("user", None)
        tasks.append(task)
    return tasks


def train_step(seconds: float) -> None:
    """The training step: ``seconds`` of matrix products (torch releases the GIL, as a GPU step would)."""
    import torch

    a = torch.randn(256, 256)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def run_sync(policy, tasks, args) -> tuple[float, int]:
    start = time.perf_counter()
    per_round = args.groups
    turns = 0
    for r in range(args.rounds):
        chunk = tasks[r * per_round:(r + 1) * per_round]
        done = collect(ENV_ID, policy, tasks=chunk, samples_per_task=args.samples, n_parallel=args.concurrency,
                       max_steps=20, progress=False)
        turns += sum(len(t.steps) for t in done)
        train_step(args.train_s)
        policy.weight_version = r + 1
    return time.perf_counter() - start, turns


def run_stream(policy, tasks, args, checkpoint: str, long_tail: LongTail | None = None
               ) -> tuple[float, list[float], int, int, int]:
    start = time.perf_counter()
    turns = handed = 0
    with RolloutStream(ENV_ID, policy, tasks, samples_per_task=args.samples, concurrency=args.concurrency,
                       max_staleness=args.max_staleness, groups_per_update=args.groups, max_steps=20,
                       long_tail=long_tail) as stream:
        while groups := stream.take(args.groups):  # the same tasks as the sync run, every one handed out
            turns += sum(len(t.steps) for g in groups for t in g.trajectories)
            handed += sum(len(g.trajectories) for g in groups)
            train_step(args.train_s)
            stream.update_weights(checkpoint, mode="abort")
        wall = time.perf_counter() - start
        return wall, list(stream.stats.update_s), stream.stats.dropped, turns, handed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="weight updates (training steps)")
    parser.add_argument("--groups", type=int, default=4, help="groups per training step")
    parser.add_argument("--samples", type=int, default=2, help="samples per task")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes running at once")
    parser.add_argument("--train-s", type=float, default=0.5, help="seconds of one training step")
    parser.add_argument("--token-ms", type=float, default=8.0, help="per-token latency of the fake server")
    parser.add_argument("--tokens", type=int, default=24, help="ids per fake answer")
    parser.add_argument("--max-staleness", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant (alternating)")
    parser.add_argument("--tiny-model", action="store_true", help="the tiny model on CPU instead of fake mode")
    parser.add_argument("--long-tail", type=int, default=None, metavar="N",
                        help="also run the stream parking episodes over N turns")
    args = parser.parse_args()

    from agent_gym.models import build_tiny_model, load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny", tokenizer=tokenizer, seed=0)
        server_args = ["--model", str(model_dir), "--max-model-len", "8192"]
        if not args.tiny_model:
            server_args += ["--fake-tokens", str(args.tokens), "--fake-token-latency-ms", str(args.token_ms)]
        process, address = start_reference_server(server_args)
        try:
            sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=args.tokens, logprobs=0)
            total = args.rounds * args.groups
            sync_s, stream_s, park_s, cycles = [], [], [], []
            park_samples = 0
            dropped = sync_turns = stream_turns = stream_samples = 0
            for repeat in range(args.repeats):
                tasks = task_mix(total, seed=repeat)
                policy = VLLMPolicy([address], tokenizer, sampling)
                wall, turns = run_sync(policy, tasks, args)
                sync_s.append(wall)
                sync_turns += turns
                policy = VLLMPolicy([address], tokenizer, sampling)
                wall, updates, lost, turns, handed = run_stream(policy, tasks, args, str(model_dir))
                stream_s.append(wall)
                stream_samples += handed
                stream_turns += turns
                cycles += updates
                dropped += lost
                if args.long_tail is not None:
                    policy = VLLMPolicy([address], tokenizer, sampling)
                    budget = LongTail(max_turns=args.long_tail, action="park")
                    wall, _, _, _, handed = run_stream(policy, tasks, args, str(model_dir), budget)
                    park_s.append(wall)
                    park_samples += handed
            samples = total * args.samples
            sync_rate = samples / statistics.median(sync_s)
            stream_rate = stream_samples / args.repeats / statistics.median(stream_s)
            mode = "tiny model on CPU" if args.tiny_model else f"fake mode, {args.tokens} ids at {args.token_ms} ms"
            print(f"{mode}; {args.rounds} updates x {args.groups} groups x {args.samples} samples; "
                  f"training step {args.train_s} s; concurrency {args.concurrency}")
            print(f"sync collect-then-update: {sync_rate:.2f} samples/s (median of {[round(s, 2) for s in sync_s]} s)")
            print(f"streaming:                {stream_rate:.2f} samples/s (median of "
                  f"{[round(s, 2) for s in stream_s]} s)")
            print(f"turns per sample: sync {sync_turns / (samples * args.repeats):.2f}, "
                  f"streaming {stream_turns / max(stream_samples, 1):.2f} (the same tasks; stale groups dropped are "
                  f"not counted)")
            if park_s:
                park_rate = park_samples / args.repeats / statistics.median(park_s)
                print(f"streaming, parking over {args.long_tail} turns: {park_rate:.2f} samples/s "
                      f"({park_rate / sync_rate:.2f}x sync; median of {[round(s, 2) for s in park_s]} s)")
            print(f"ratio: {stream_rate / sync_rate:.2f}x; pause/reload/resume cycle median "
                  f"{1000 * statistics.median(cycles):.1f} ms (n={len(cycles)}); stale groups dropped: {dropped}")
        finally:
            process.terminate()
            process.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
