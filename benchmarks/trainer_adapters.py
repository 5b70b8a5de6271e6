"""What the trainer adapters (``agent_gym.integrations.<trainer>``) add to ``collect``, one function per adapter.

Run:  python benchmarks/trainer_adapters.py [--adapter trl] [--repeats R] [--json]

Each ``bench_<adapter>`` function measures its adapter and returns a dict of figures; ``main`` runs
the adapters asked for and prints them.

TRL (``bench_trl``):

(a) Adapter overhead: the same ToolUse-v0 episodes run by ``collect`` alone and by
    ``rollout_func(...)(prompts, trainer)`` (which calls ``collect``, then turns each episode into
    TRL's fields through the training contract). The policy is in process and free (fixed token
    ids, no model, a calculator call then an answer), so the episodes are identical in both and
    the difference is the adapter's work: resolving each prompt's task, checking it, building the
    samples. Reported per sample (one episode, one segment), medians over ``--repeats`` alternated
    runs of ``--episodes`` episodes: wall time and client (process) CPU of ``collect`` alone, of
    the rollout function, of the ``collect`` call inside it, and the rollout function minus that
    call (the adapter's own work). The episodes are freed outside the timings.
(b) One GRPO step of the embedded tiny agent with TRL's ``GRPOTrainer`` on CPU
    (``use_vllm=False``, 2 lookup tasks x 4 samples, ``max_completion_length=192``): the step's
    wall time (TRL's ``step_time``) split into the rollout (the rollout function's own time) and
    the rest (scoring, the forward and backward passes, the optimizer step). Medians over
    ``--grpo-steps`` steps after one warm-up step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.rollout import collect
from agent_gym.types import PolicyOutput

ENV = "agent_gym/ToolUse-v0"


class FreePolicy:
    """Answers at once with fixed token ids: a calculator call on the first turn, then an answer."""

    TEXTS = ('<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>',
             "<answer>42</answer>")

    def __init__(self) -> None:
        self._prompts: dict[str, list[int]] = {}
        self._turns: dict[str, int] = {}

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> PolicyOutput:
        turn = self._turns.get(session_id, 0)
        self._turns[session_id] = turn + 1
        prompt = self._prompts.get(session_id, list(range(1, 101)))
        sampled = list(range(200, 220)) + [2]
        self._prompts[session_id] = prompt + sampled + list(range(300, 330))
        return PolicyOutput(text=self.TEXTS[min(turn, 1)], prompt_token_ids=list(prompt), token_ids=sampled,
                            logprobs=[-0.5] * len(sampled))

    def close_session(self, session_id: str) -> None:
        self._prompts.pop(session_id, None)
        self._turns.pop(session_id, None)


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and process CPU seconds of ``fn()``; what it returns is freed after the timing."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    elapsed = time.perf_counter() - wall, time.process_time() - cpu
    del result
    return elapsed


def bench_trl(repeats: int = 7, episodes: int = 64, grpo_steps: int = 3) -> dict[str, Any]:
    """TRL: rollout_func against collect alone, and one GRPO step split into rollout and training."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from types import SimpleNamespace

    import gymnasium as gym

    from agent_gym.integrations.trl import rollout_func, task_prompt

    env = gym.make(ENV)
    tasks = [t for t in env.unwrapped.tasks if t["family"] == "arithmetic"][: episodes // 2]
    env.close()
    entries = [t for t in tasks for _ in range(2)]  # each task twice in a row, as TRL's num_generations=2
    prompts = [task_prompt(t) for t in entries]
    trainer = SimpleNamespace(num_generations=2, processing_class=None, args=SimpleNamespace(use_vllm=False))
    policy = FreePolicy()
    rollout = rollout_func(ENV, policy=policy, max_steps=4)

    def run_collect() -> Any:
        return collect(ENV, policy, tasks=entries, samples_per_task=1, n_parallel=len(entries), max_steps=4,
                       progress=False)

    inner: list[tuple[float, float]] = []

    def timed_collect(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return collect(*args, **kwargs)
        finally:
            inner.append((time.perf_counter() - wall, time.process_time() - cpu))

    def run_rollout() -> Any:
        out = rollout(prompts, trainer)
        assert len(out["completion_ids"]) == len(prompts) and all(r is not None for r in out["episode_reward"])
        return out, rollout.last_trajectories

    agent_gym.collect = timed_collect  # the rollout function's own collect call, timed inside it
    try:
        run_collect()
        run_rollout()  # warm-up: the env of the task checks, imports
        alone, whole = [], []
        inner.clear()
        for _ in range(repeats):
            alone.append(_timed(run_collect))
            rollout.last_trajectories = None  # the previous batch is freed here, not inside the timing
            whole.append(_timed(run_rollout))
    finally:
        agent_gym.collect = collect
    n = len(prompts)

    def per_sample(runs: list[tuple[float, float]], k: int) -> float:
        return 1e6 * statistics.median(r[k] for r in runs) / n

    added = [(w - iw, c - ic) for (w, c), (iw, ic) in zip(whole, inner, strict=True)]
    overhead = {
        "episodes": n,
        "repeats": repeats,
        "collect_alone_us": {"wall": per_sample(alone, 0), "cpu": per_sample(alone, 1)},
        "rollout_func_us": {"wall": per_sample(whole, 0), "cpu": per_sample(whole, 1)},
        "its_collect_us": {"wall": per_sample(inner, 0), "cpu": per_sample(inner, 1)},
        "added_us": {"wall": per_sample(added, 0), "cpu": per_sample(added, 1)},
    }
    overhead["added_wall_percent"] = 100 * overhead["added_us"]["wall"] / overhead["its_collect_us"]["wall"]
    return {"overhead": overhead, "grpo_step": _grpo_step(grpo_steps) if grpo_steps else None}


def _grpo_step(steps: int) -> dict[str, Any]:
    """TRL's GRPOTrainer on the tiny agent: each step's wall time, and how much of it is the rollout."""
    import gymnasium as gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agent_gym.integrations.trl import episode_reward, rollout_func, task_dataset
    from agent_gym.models import default_model_path

    env = gym.make(ENV)
    tasks = [t for t in env.unwrapped.tasks if t["family"] == "lookup"][:4]
    env.close()
    model = AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    rollout = rollout_func(ENV, max_steps=6)
    rollout_times: list[float] = []
    sampled: list[int] = []

    def timed(prompts: list[Any], trainer: Any) -> dict[str, list]:
        start = time.perf_counter()
        out = rollout(prompts, trainer)
        rollout_times.append(time.perf_counter() - start)
        sampled.append(sum(sum(mask) for mask in out["env_mask"]))
        return out

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=192, max_steps=steps + 1, learning_rate=1e-4, use_cpu=True, bf16=False,
                      gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no",
                      disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=task_dataset(tasks),
                          reward_funcs=episode_reward, rollout_func=timed)
    trainer.train()
    rollout.close()
    step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    steps_measured = list(zip(step_times, rollout_times, strict=False))[1:]  # the first step warms up
    return {
        "samples_per_step": 8,
        "torch_threads": torch.get_num_threads(),
        "steps": [{"step_s": s, "rollout_s": r, "training_s": s - r} for s, r in steps_measured],
        "median_step_s": statistics.median(s for s, _ in steps_measured),
        "median_rollout_s": statistics.median(r for _, r in steps_measured),
        "median_training_s": statistics.median(s - r for s, r in steps_measured),
        "sampled_ids_per_step": sampled[1:],
    }


ADAPTERS: dict[str, Callable[..., dict[str, Any]]] = {"trl": bench_trl}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", action="append", choices=sorted(ADAPTERS), help="default: all")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--grpo-steps", type=int, default=3, help="0 skips the GRPO step")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = {}
    for name in args.adapter or sorted(ADAPTERS):
        if name == "trl":
            figures[name] = bench_trl(repeats=args.repeats, episodes=args.episodes, grpo_steps=args.grpo_steps)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    if "trl" in figures:
        _print_trl(figures["trl"])
    return 0


def _print_trl(figures: dict[str, Any]) -> None:
    o = figures["overhead"]
    print(f"TRL rollout_func vs collect: {o['episodes']} episodes (one segment each), median of {o['repeats']} runs, "
          f"microseconds per sample")
    for name in ("collect_alone_us", "rollout_func_us", "its_collect_us", "added_us"):
        print(f"  {name.removesuffix('_us'):14s} wall {o[name]['wall']:9.1f}  client CPU {o[name]['cpu']:9.1f}")
    print(f"  added wall time: {o['added_wall_percent']:.2f}% of the collect call")
    g = figures["grpo_step"]
    if g is None:
        return
    print(f"GRPO step ({g['samples_per_step']} samples, tiny agent, CPU, {g['torch_threads']} torch threads): "
          f"{g['median_step_s']:.2f} s = rollout {g['median_rollout_s']:.2f} s + training "
          f"{g['median_training_s']:.2f} s (medians of {len(g['steps'])} steps)")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
