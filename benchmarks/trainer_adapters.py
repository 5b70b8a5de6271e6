"""What the trainer adapters (``agent_gym.integrations.<trainer>``) add to ``collect``, one function per adapter.

Run:  python benchmarks/trainer_adapters.py [--adapter trl|verl|skyrl|slime] [--repeats R] [--json]

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

verl (``bench_verl``): ``run_row`` once per episode, concurrently (what ``AgentGymAgentLoop.run``
does for each dataset row: a policy over verl's server manager, a one-episode ``collect``, the
``AgentLoopOutput`` fields) against one ``collect`` of the same episodes, both sampling through
``FreeServerManager`` (verl's ``server_manager.generate`` answering at once, as ``FreePolicy``);
plus the CPU of the fields alone per segment and of building a policy per row. verl itself is not
needed (its ``AgentLoopBase.__init__``, which every verl loop pays, is not included).

SkyRL (``bench_skyrl``): ``AgentGymGenerator.generate`` on a batch of 2 samples per task against
``collect_async`` of the same episodes with ``FreePolicy``, each on a fresh event loop; plus the
CPU of the ``GeneratorOutput`` rows alone (``to_output``) per segment.

slime/vime (``bench_slime``): ``generate(args, sample, sampling_params)`` once per sample, the
calls of a batch gathered as slime does, against one ``collect_async`` of the same episodes with the
same ``VLLMPolicy``, both over HTTP to a fake-mode reference server speaking SGLang's ``/generate``;
plus the CPU of filling the ``Sample`` fields alone per segment.

Alternated runs: the order of the two variants flips every repeat; each variant's min-max per
sample is printed next to its median.
"""

from __future__ import annotations

import argparse
import asyncio
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

    from agent_gym.integrations.trl import rollout_func
    from agent_gym.integrations.trl_data import task_prompt

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

    from agent_gym.integrations.trl import rollout_func
    from agent_gym.integrations.trl_data import episode_reward, task_dataset
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


class FreeServerManager:
    """verl's ``server_manager`` answering at once, as :class:`FreePolicy` does: a calculator call, then an answer.

    Each request id (one per episode) gets the calculator call on its first request and the answer after;
    ``generate`` returns the fields of verl's ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``).
    """

    def __init__(self, tokenizer: Any) -> None:
        eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.replies = [tokenizer.encode(text, add_special_tokens=False) + [eot] for text in FreePolicy.TEXTS]
        self._turns: dict[str, int] = {}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from types import SimpleNamespace

        turn = self._turns.get(request_id, 0)
        self._turns[request_id] = turn + 1
        ids = self.replies[min(turn, 1)]
        return SimpleNamespace(token_ids=list(ids), log_probs=[-0.5] * len(ids), stop_reason="completed")


def _overhead(results: dict[str, list[tuple[float, float]]], base: str, other: str, samples: int,
              repeats: int) -> dict[str, Any]:
    """Per-sample medians of two alternated variants and what ``other`` adds to ``base``."""
    per_sample = {name: {"wall_ms": 1e3 * statistics.median(w for w, _ in runs) / samples,
                         "cpu_ms": 1e3 * statistics.median(c for _, c in runs) / samples,
                         "wall_ms_range": [1e3 * min(w for w, _ in runs) / samples,
                                           1e3 * max(w for w, _ in runs) / samples],
                         "cpu_ms_range": [1e3 * min(c for _, c in runs) / samples,
                                          1e3 * max(c for _, c in runs) / samples]}
                  for name, runs in results.items()}
    added_wall = per_sample[other]["wall_ms"] - per_sample[base]["wall_ms"]
    return {
        "episodes": samples,
        "repeats": repeats,
        "per_sample": per_sample,
        "added_wall_us_per_sample": 1e3 * added_wall,
        "added_wall_percent": 100 * added_wall / per_sample[base]["wall_ms"],
        "added_cpu_us_per_sample": 1e3 * (per_sample[other]["cpu_ms"] - per_sample[base]["cpu_ms"]),
    }


def _run_async(coro: Any) -> Any:
    """``asyncio.run(coro)``, its result handed back outside the main task.

    On Python 3.11 ``asyncio.run`` ends by formatting the repr of the main task's result (see
    ``agent_gym.utils.runtime.run_sync``): a list of trajectories would cost tens of milliseconds.
    """
    box: list[Any] = []

    async def main() -> None:
        box.append(await coro)

    asyncio.run(main())
    return box[0]


def _alternated(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[tuple[float, float]]]:
    """``repeats`` timed runs of each variant, the order alternating so that none always runs first."""
    names = list(variants)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            results[name].append(_timed(variants[name]))
    return results


def _per_segment_cpu_us(fn: Callable[[], int], rounds: int = 20) -> float:
    """CPU microseconds per segment of ``fn()`` (which returns how many segments it converted)."""
    start, segments = time.process_time(), 0
    for _ in range(rounds):
        segments += fn()
    return 1e6 * (time.process_time() - start) / segments


def bench_verl(repeats: int = 7, episodes: int = 64) -> dict[str, Any]:
    """verl: one ``run_row`` per episode (what ``AgentGymAgentLoop.run`` does per dataset row) against one ``collect``.

    Both sample through :class:`FreeServerManager` with ``VerlServerPolicy``; the loop side also builds
    a policy and runs a one-episode ``collect`` per row (verl builds an agent loop per row), then the
    ``AgentLoopOutput`` fields. verl's own ``AgentLoopBase.__init__``, which every verl loop pays, is
    not included (verl need not be installed).
    """
    import gymnasium as gym

    from agent_gym.integrations.verl import EpisodeSettings, VerlServerPolicy, agent_loop_fields, run_row
    from agent_gym.models import load_qwen_tokenizer
    from agent_gym.rollout import collect_async

    tokenizer = load_qwen_tokenizer()
    env = gym.make(ENV)
    tasks = [t for t in env.unwrapped.tasks if t["family"] == "arithmetic"][: episodes // 2]
    env.close()
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    settings = EpisodeSettings.build(env_id=ENV, max_steps=4)
    rows = [{"extra_info": {"task": json.dumps(t), "index": g}} for g, t in enumerate(tasks) for _ in range(2)]

    manager = FreeServerManager(tokenizer)  # one per process, as verl's; each policy has its own request ids

    def policy() -> VerlServerPolicy:
        return VerlServerPolicy(manager, tokenizer, sampling, max_response_length=4096, max_model_len=8192)

    def run_collect() -> list[Any]:
        return _run_async(collect_async(ENV, policy(), tasks=tasks, samples_per_task=2, n_parallel=len(rows),
                                        max_steps=4, progress=False))

    def run_loop() -> None:
        async def rows_of_a_batch() -> list[dict[str, Any]]:  # verl's worker gathers its rows' loops
            return await asyncio.gather(*(run_row(settings, policy(), row, prompt_length=4096, response_length=4096)
                                          for row in rows))

        out = _run_async(rows_of_a_batch())
        assert all(o["output"]["extra_fields"]["agent_gym_status"] == "ENV_DONE" for o in out)  # ran as in collect

    run_collect()
    run_loop()  # warm-up: the shared token builder, imports
    overhead = _overhead(_alternated({"collect": run_collect, "verl loop": run_loop}, repeats), "collect",
                         "verl loop", len(rows), repeats)
    trajectories = run_collect()

    def fields() -> int:
        for t in trajectories:
            agent_loop_fields(t, prompt_length=4096, response_length=4096)
        return len(trajectories)

    overhead["fields_cpu_us_per_segment"] = _per_segment_cpu_us(fields)
    overhead["policy_build_cpu_us_per_row"] = _per_segment_cpu_us(lambda: len([policy() for _ in range(64)]))
    overhead["prompt_ids_per_segment"] = statistics.mean(len(t.prompt_tokens) for t in trajectories)
    return {"overhead": overhead}


def bench_skyrl(repeats: int = 7, episodes: int = 64) -> dict[str, Any]:
    """SkyRL: ``AgentGymGenerator.generate`` on a batch against ``collect`` alone on the same episodes.

    Both run :class:`FreePolicy`; the generator adds grouping the batch's rows by prompt and task, and
    the ``GeneratorOutput`` rows (``to_output``, also timed alone per segment).
    """
    import gymnasium as gym

    from agent_gym.integrations.skyrl import AgentGymGenerator, TrajectoryKey
    from agent_gym.rollout import collect_async

    env = gym.make(ENV)
    tasks = [t for t in env.unwrapped.tasks if t["family"] == "arithmetic"][: episodes // 2]
    env.close()
    policy = FreePolicy()
    n = 2 * len(tasks)
    generator = AgentGymGenerator(policy, ENV, max_steps=4, n_parallel=n)
    batch = {"prompts": [[{"role": "user", "content": t["question"]}] for t in tasks for _ in range(2)],
             "env_classes": [ENV] * n,
             "env_extras": [{"task": t} for t in tasks for _ in range(2)],
             "trajectory_ids": [TrajectoryKey(t["id"], s) for t in tasks for s in range(2)],
             "sampling_params": None}

    def run_collect() -> list[Any]:  # on a fresh event loop, as the generator runs below
        return _run_async(collect_async(ENV, policy, tasks=tasks, samples_per_task=2, n_parallel=n, max_steps=4,
                                        progress=False))

    def run_generate() -> None:
        out = _run_async(generator.generate(batch))
        assert len(out["response_ids"]) == n and {m["status"] for m in out["env_metrics"]} == {"ENV_DONE"}

    run_collect()
    run_generate()
    overhead = _overhead(_alternated({"collect": run_collect, "generator": run_generate}, repeats), "collect",
                         "generator", n, repeats)
    trajectories = run_collect()
    overhead["to_output_cpu_us_per_segment"] = _per_segment_cpu_us(
        lambda: len(generator.to_output(trajectories)["response_ids"]))
    return {"overhead": overhead}


def bench_slime(repeats: int = 7, episodes: int = 64, latency_ms: float = 20.0) -> dict[str, Any]:
    """slime/vime: ``generate(args, sample, ...)`` once per sample, concurrently, against one ``collect``.

    slime calls the generate function once per sample and gathers a batch's calls; the figures
    compare that to one ``collect_async`` of the same episodes with the same policy (the one
    ``generate`` builds for ``args``), both over HTTP to a reference server in fake mode
    (``--fake-tokens 8``, ``latency_ms`` per answer) speaking SGLang's ``/generate``. The
    difference is the adapter's work: reading ``args`` and the sample, a one-episode ``collect``
    per sample, filling the ``Sample``. Also the CPU of ``episode_samples`` alone per segment.
    """
    from dataclasses import dataclass, field
    from types import SimpleNamespace

    import gymnasium as gym
    from server_process import start_reference_server

    from agent_gym.integrations import slime
    from agent_gym.models.tiny import default_model_path
    from agent_gym.policy import VLLMPolicy
    from agent_gym.rollout import collect_async

    @dataclass
    class Sample:  # the slime Sample attributes generate reads and fills
        index: int | None = None
        group_index: int | None = None
        rollout_id: int | None = None
        tokens: list[int] = field(default_factory=list)
        response: str = ""
        response_length: int = 0
        label: str | None = None
        reward: Any = None
        loss_mask: list[int] | None = None
        weight_versions: list[str] = field(default_factory=list)
        rollout_log_probs: list[float] | None = None
        remove_sample: bool = False
        status: str = "pending"
        metadata: dict = field(default_factory=dict)
        session_id: str | None = None

    env = gym.make(ENV)
    tasks = [t for t in env.unwrapped.tasks if t["family"] == "arithmetic"][: episodes // 2]
    env.close()
    model = str(default_model_path())
    proc, address = start_reference_server(["--model", model, "--fake-tokens", "8", "--fake-latency-ms",
                                            str(latency_ms), "--max-model-len", "32768"])
    try:
        ip, port = address.split(":")
        args = SimpleNamespace(sglang_router_ip=ip, sglang_router_port=int(port), hf_checkpoint=model,
                               agent_gym_env_id=ENV, agent_gym_max_steps=4, rollout_max_context_len=32768)
        sampling_params = {"max_new_tokens": 1024, "temperature": 1.0, "top_p": 1.0, "top_k": -1}
        sampling = slime.to_sampling_params(sampling_params)
        # the policy generate builds for these args (the same router, model, sampling and context length)
        policy = VLLMPolicy([address], model, sampling, api="sglang_generate", model=model, max_model_len=32768,
                            max_response_length=sampling.max_tokens)
        pairs = [(g, t) for g, t in enumerate(tasks) for _ in range(2)]

        def run_collect() -> list[Any]:
            return _run_async(collect_async(ENV, policy, tasks=tasks, samples_per_task=2, n_parallel=len(pairs),
                                            max_steps=4, progress=False))

        def run_generate() -> None:
            async def batch() -> list[Any]:
                return await asyncio.gather(*(
                    slime.generate(args, Sample(index=i, group_index=g, metadata={"task": t}), sampling_params)
                    for i, (g, t) in enumerate(pairs)))

            out = _run_async(batch())
            bad = [(s.metadata["agent_gym_status"], s.metadata["error"]) for s in out
                   if s.metadata["agent_gym_status"] not in {"ENV_DONE", "MAX_STEPS"}]
            assert not bad, bad[:3]

        run_collect()
        run_generate()  # warm-up: connections, the token builder
        overhead = _overhead(_alternated({"collect": run_collect, "slime generate": run_generate}, repeats),
                             "collect", "slime generate", len(pairs), repeats)
        trajectories = run_collect()
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    def fill() -> int:
        for t in trajectories:
            slime.episode_samples(Sample(index=0), t, env_id=ENV)
        return len(trajectories)

    overhead["samples_cpu_us_per_segment"] = _per_segment_cpu_us(fill)
    overhead["server_latency_ms"] = latency_ms
    return {"overhead": overhead}


def _print_overhead(title: str, o: dict[str, Any], extra: str) -> None:
    print(f"{title}: {o['episodes']} episodes, median of {o['repeats']} runs, per sample")
    for name, row in o["per_sample"].items():
        (w0, w1), (c0, c1) = row["wall_ms_range"], row["cpu_ms_range"]
        print(f"  {name:13s} wall {row['wall_ms']:.3f} ms ({w0:.3f}-{w1:.3f})  client CPU {row['cpu_ms']:.3f} ms "
              f"({c0:.3f}-{c1:.3f})")
    print(f"  added: wall {o['added_wall_us_per_sample']:.1f} us ({o['added_wall_percent']:.1f}%), "
          f"CPU {o['added_cpu_us_per_sample']:.1f} us per sample (one segment each); {extra}")
    sys.stdout.flush()


ADAPTERS: dict[str, Callable[..., dict[str, Any]]] = {"trl": bench_trl, "verl": bench_verl, "skyrl": bench_skyrl,
                                                      "slime": bench_slime}


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
        else:
            figures[name] = ADAPTERS[name](repeats=args.repeats, episodes=args.episodes)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    if "trl" in figures:
        _print_trl(figures["trl"])
    if "verl" in figures:
        o = figures["verl"]["overhead"]
        _print_overhead("verl loop (run_row per row) vs collect", o,
                        f"AgentLoopOutput fields {o['fields_cpu_us_per_segment']:.1f} us CPU per segment "
                        f"({o['prompt_ids_per_segment']:.0f} prompt ids), a policy "
                        f"{o['policy_build_cpu_us_per_row']:.1f} us per row")
    if "slime" in figures:
        o = figures["slime"]["overhead"]
        _print_overhead(f"slime generate per sample vs collect (HTTP, SGLang /generate, fake server "
                        f"{o['server_latency_ms']:.0f} ms per answer)", o,
                        f"Sample filling {o['samples_cpu_us_per_segment']:.1f} us CPU per segment")
    if "skyrl" in figures:
        o = figures["skyrl"]["overhead"]
        _print_overhead("SkyRL generator vs collect", o,
                        f"GeneratorOutput rows {o['to_output_cpu_us_per_segment']:.1f} us CPU per segment")
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
