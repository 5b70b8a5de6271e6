"""The asynchronous GRPO demo (``scripts/train_grpo_demo.py --async``): train while rollouts keep running.

A :class:`~agent_gym.rollout.stream.RolloutStream` keeps episodes running against a reference server in
dev mode while the trainer takes finished groups, takes one truncated-importance-sampling (TIS) step,
saves a checkpoint and has the server reload it (see ``docs/async_rollouts.md``). ``--compare`` plots
several runs' records on one axes. The synchronous demo's helpers (rewards, advantages, re-scoring,
plots) come from ``grpo_common.py`` beside this file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_SCRIPTS = str(Path(__file__).resolve().parent)
if _SCRIPTS not in sys.path:  # imports grpo_common.py beside this file
    sys.path.insert(0, _SCRIPTS)

from grpo_common import (  # noqa: E402 - beside this file
    batch_options,
    episode_reward,
    grpo_advantages,
    plot_rewards,
    rescore_error,
    sequence_logprobs,
    task_pool,
    worst_family,
)

__all__ = ["TIS_CLIP", "add_async_arguments", "plot_comparison", "run_async", "start_dev_server", "task_rounds",
           "tis_policy_gradient_step", "write_comparison"]

#: The truncation ``C`` of the importance ratio in the asynchronous demo's loss (``--tis-clip``).
TIS_CLIP = 2.0


def start_dev_server(model_path: str, *, timeout: float = 300.0, log_path: str | Path | None = None,
                     threads: int | None = None) -> tuple[Any, str]:
    """Start ``python -m agent_gym.reference_server --model MODEL`` with ``VLLM_SERVER_DEV_MODE=1`` on a free port.

    (The same server as ``VLLM_SERVER_DEV_MODE=1 agent-gym serve --model MODEL``.) ``threads`` sets the
    server's torch threads (``OMP_NUM_THREADS``), so that it and the trainer do not both spin on every core.

    Returns:
        The server process and its address ``127.0.0.1:PORT``.

    Raises:
        RuntimeError: The server exits or is not healthy within ``timeout`` seconds.
    """
    import os
    import socket
    import subprocess

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115 - the child's log
    proc = subprocess.Popen([sys.executable, "-m", "agent_gym.reference_server", "--model", model_path,
                             "--port", str(port)], env=env,
                            stdout=log, stderr=log)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the reference server exited with code {proc.returncode}")
        try:
            if httpx.get(f"http://{address}/health", timeout=2.0).status_code == 200:
                return proc, address
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the reference server did not become healthy within {timeout:g}s")


def _check_dev_mode(server: str) -> None:
    """Raise unless ``server`` answers vLLM's RL routes (``GET /is_paused``)."""
    import httpx

    url = (server if "://" in server else f"http://{server}").rstrip("/")
    status = httpx.get(f"{url}/is_paused", timeout=30.0).status_code
    if status != 200:
        raise RuntimeError(f"{server}: GET /is_paused answered HTTP {status}; start the server with "
                           "VLLM_SERVER_DEV_MODE=1 (agent-gym serve, or vLLM itself) to enable pause, resume and "
                           "weight reloads")


def task_rounds(pool: Sequence[dict[str, Any]], per_round: int, seed: int) -> Any:
    """Endless rounds of ``per_round`` tasks drawn as the synchronous demo draws its iterations' tasks.

    Round ``r`` is ``random.Random(seed)``'s ``r``-th ``sample(pool, per_round)``, so the stream sees
    the synchronous run's task sequence. Each task's ``id`` gets ``~r`` appended: a task drawn again
    in a later round, possibly running at the same time, gets its own episode and session ids.
    """
    rng = random.Random(seed)
    round_index = 0
    while True:
        for task in rng.sample(list(pool), per_round):
            yield {**task, "id": f"{task['id']}~{round_index}"}
        round_index += 1


def tis_policy_gradient_step(
    model: Any, optimizer: Any, trajectories: Sequence[Any], advantages: Sequence[float], *, version: int,
    clip: float = TIS_CLIP,
) -> dict[str, float]:
    """One policy-gradient step with the truncated importance-sampling correction (TIS).

    The loss is :func:`agent_gym.integrations.off_policy.tis_policy_gradient_loss`: the token mean of
    ``-min(exp(logp - logp_behaviour), clip) * A * logp`` over sampled ids, where ``logp_behaviour``
    is the logprob the server recorded when it sampled the id (under whatever version it had then).
    ``current_max_ratio_error`` is the largest ``|ratio - 1|`` on ids sampled under ``version`` (the
    trainer's weights: their ratio must be 1), before the step.
    """
    import torch

    from agent_gym.integrations.off_policy import RatioStats, tis_policy_gradient_loss

    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = max(sum(float(t.response_masks.sum()) for t in trajectories), 1.0)
    stats = RatioStats()
    loss_sum, current_err = 0.0, 0.0
    for t, adv in zip(trajectories, advantages, strict=True):
        logp, mask, old = sequence_logprobs(model, t)
        loss, ratios = tis_policy_gradient_loss(logp, old, adv, mask, clip=clip, normalizer=total_tokens)
        current = mask * (torch.as_tensor(t.segments[0].weight_versions) == version).float()
        if float(current.sum()) > 0:
            err = ((torch.exp(logp.detach() - old) - 1).abs() * current).max()
            current_err = max(current_err, float(err))
        loss.backward()
        loss_sum += loss.item()
        stats.add(ratios)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return {"loss": loss_sum, "current_max_ratio_error": current_err, **stats.as_dict()}


def _staleness(trajectories: Sequence[Any], version: int) -> dict[str, Any]:
    """Version lag of each sample (current version minus its oldest id's), and ids per lag."""
    import torch

    lags = [version - t.weight_version_start for t in trajectories if t.weight_version_start >= 0]
    ids: dict[str, int] = {}
    for t in trajectories:
        versions: Any = torch.as_tensor(t.segments[0].weight_versions)[t.response_masks > 0] if t.segments else []
        for v in [int(x) for x in versions]:
            if v >= 0:
                ids[str(version - v)] = ids.get(str(version - v), 0) + 1
    return {"staleness_mean": sum(lags) / len(lags) if lags else 0.0, "staleness_max": max(lags, default=0),
            "staleness_samples": {str(k): lags.count(k) for k in sorted(set(lags))}, "staleness_ids": ids,
            "mixed_version_samples": sum(1 for t in trajectories
                                         if t.weight_version_end > t.weight_version_start >= 0)}


def run_async(
    *,
    family: str = "auto",
    iterations: int = 12,
    tasks_per_iteration: int = 8,
    group_size: int = 4,
    lr: float = 2e-4,
    reward: str = "answer",
    pool_size: int = 0,
    seed: int = 0,
    out: str | Path | None = None,
    model_path: str | None = None,
    server: str | None = None,
    concurrency: int = 0,
    max_staleness: int | None = None,
    pause_mode: str = "abort",
    tis_clip: float = TIS_CLIP,
    log: Any = None,
    dynamic_sampling: bool = False,
    curriculum: bool = False,
    too_easy: float = 0.9,
    too_hard: float = 0.1,
) -> dict[str, Any]:
    """The asynchronous demo: rollouts keep running against the server while the trainer updates it.

    With ``dynamic_sampling`` the stream drops groups whose answers all agree when they end (their
    slots go to new groups at once); with ``curriculum`` it draws tasks by their tracked pass rate
    (see :func:`grpo_common.batch_options`).

    A :class:`~agent_gym.rollout.stream.RolloutStream` keeps ``concurrency`` episodes running on a
    ``VLLMPolicy`` (token mode, ``vllm_generate``) against ``server`` (started here in dev mode
    when None). Each iteration takes the first ``tasks_per_iteration`` groups to finish, takes one
    TIS policy-gradient step (:func:`tis_policy_gradient_step`), saves the trainer to a checkpoint
    and pushes it with ``stream.update_weights(path, mode=pause_mode)`` (pause, every server reloads
    the checkpoint, version + 1, resume) while the other episodes go on.

    Raises:
        RuntimeError: The ids sampled under the trainer's own weights do not re-score to a ratio of 1
            (within 1e-3) at the first update, or the server lacks the RL routes.
    """
    import os
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams, VLLMPolicy
    from agent_gym.rollout.stream import RolloutStream

    say = log or (lambda *a: print(*a, flush=True))
    torch.manual_seed(seed)
    path = str(model_path or default_model_path())
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    started_server = None
    if server is None:
        # generation and training run at once: half the cores each (on 2 cores, one each)
        cores = os.cpu_count() or 2
        started_server, server = start_dev_server(path, threads=max(1, cores // 2))
        torch.set_num_threads(max(1, cores - cores // 2))
        say(f"reference server (dev mode) at {server}")
    checkpoints = Path(tempfile.mkdtemp(prefix="grpo-async-ckpt-"))
    # Requests to a server given by the user go unseeded: it may be vLLM's CPU engine, which dies on a seeded
    # request whose prefill is chunked (many episodes in flight cause that); the demo's own server is seeded.
    request_seed = seed if started_server is not None else None
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=96, seed=request_seed,
                              logprobs=0)
    policy = VLLMPolicy([server], path, sampling, api="vllm_generate", logprobs_mode="raw_logprobs")
    stream = None
    record: dict[str, Any] = {"family": family, "reward": reward, "mode": "async", "loss": "tis",
                              "tis_clip": tis_clip, "pause_mode": pause_mode, "max_staleness": max_staleness,
                              "iterations": [], "first_ratio_error": None}
    started = time.perf_counter()
    try:
        _check_dev_mode(server)
        trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        optimizer = torch.optim.AdamW(trainer.parameters(), lr=lr, weight_decay=0.0)
        if family == "auto":
            family = record["family"] = worst_family(policy, seed=seed)
            say(f"worst family of the starting model: {family}")
        pool = task_pool(family, pool_size, seed)
        if len(pool) < tasks_per_iteration:
            raise ValueError(f"tasks_per_iteration: expected at most the pool's {len(pool)} tasks, "
                             f"got {tasks_per_iteration}")
        record["concurrency"] = concurrency = concurrency or tasks_per_iteration * group_size
        sampler, dynamic = batch_options(pool, dynamic_sampling=dynamic_sampling, curriculum=curriculum,
                                         too_easy=too_easy, too_hard=too_hard, seed=seed)
        source: dict[str, Any] = ({"sampler": sampler} if sampler is not None
                                  else {"tasks": task_rounds(pool, tasks_per_iteration, seed)})
        stream = RolloutStream(None if sampler is not None else "agent_gym/ToolUse-v0", policy, **source,
                               samples_per_task=group_size, concurrency=concurrency, max_staleness=max_staleness,
                               groups_per_update=tasks_per_iteration, pause_mode=pause_mode, max_steps=6,
                               dynamic_sampling=dynamic)
        for it in range(iterations):
            t0 = time.perf_counter()
            groups = stream.take(tasks_per_iteration)
            t1 = time.perf_counter()
            version = stream.version
            trajectories = [t for g in groups for t in g.trajectories]
            if not trajectories:
                raise RuntimeError("the rollout stream ended early")
            usable = [t for t in trajectories if len(t.segments) == 1 and t.response_logprobs is not None
                      and float(t.response_masks.sum()) > 0]
            rewards = [episode_reward(t, reward) for t in usable]
            advantages = grpo_advantages(rewards, [t.group_id for t in usable])
            stats = tis_policy_gradient_step(trainer, optimizer, usable, advantages, version=version, clip=tis_clip)
            if it == 0:
                record["first_ratio_error"] = stats["current_max_ratio_error"]
                if stats["current_max_ratio_error"] > 1e-3:
                    raise RuntimeError(f"importance ratio of the ids sampled under the trainer's weights: expected "
                                       f"1 within 1e-3, got an error of {stats['current_max_ratio_error']:.2e}")
            t2 = time.perf_counter()
            checkpoint = checkpoints / f"v{version + 1}"
            trainer.save_pretrained(checkpoint)
            stream.update_weights(str(checkpoint), mode=pause_mode)
            shutil.rmtree(checkpoints / f"v{version}", ignore_errors=True)
            t3 = time.perf_counter()
            mean_reward = sum(episode_reward(t, reward) for t in trajectories) / len(trajectories)
            success = sum(float(t.metrics["res_reward"]) > 0 for t in trajectories) / len(trajectories)
            row = {"iteration": it, "version": version, "mean_reward": mean_reward, "success": success,
                   "episodes": len(trajectories), "nonzero_advantages": sum(1 for a in advantages if abs(a) > 1e-6),
                   **stats, **_staleness(trajectories, version), "wait_s": round(t1 - t0, 2),
                   "train_s": round(t2 - t1, 2), "push_s": round(t3 - t2, 2)}
            record["iterations"].append(row)
            say(f"iter {it:3d}  mean reward {mean_reward:+.3f}  success {success:.0%}  loss {stats['loss']:+.4f}  "
                f"staleness mean {row['staleness_mean']:.2f} max {row['staleness_max']}  ratio mean "
                f"{stats['ratio_mean']:.3f} max {stats['ratio_max']:.2f} clipped {stats['clipped_fraction']:.1%}  "
                f"wait {row['wait_s']:.1f}s train {row['train_s']:.1f}s push {row['push_s']:.1f}s")
        record["stream"] = {"handed": stream.stats.handed, "dropped": stream.stats.dropped,
                            "updates": stream.stats.updates, "filter": dynamic.stats.as_dict() if dynamic else None,
                            "update_s_median": sorted(stream.stats.update_s)[len(stream.stats.update_s) // 2]
                            if stream.stats.update_s else None}
        stream.close()
        # the server samples from the pushed checkpoint: the trainer re-scores its next turn exactly
        record["post_update_rescore_error"] = rescore_error(policy, trainer, pool[0])
    finally:
        if stream is not None:
            stream.close()
        policy.close()
        shutil.rmtree(checkpoints, ignore_errors=True)
        if started_server is not None:
            started_server.terminate()
            try:
                started_server.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a server that does not stop is killed
                started_server.kill()
    record["seconds"] = round(time.perf_counter() - started, 1)
    if out_dir is not None:
        (out_dir / "rewards.json").write_text(json.dumps(record, indent=2) + "\n")
        plot_rewards(record, out_dir / "rewards.png")
    return record


def write_comparison(records: dict[str, dict[str, Any]], out: str | Path) -> Path:
    """Write ``rewards.csv`` (one row per run and iteration) and ``rewards.png`` (both curves) under ``out``."""
    import csv

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = ["run", "iteration", "mean_reward", "success", "loss", "staleness_mean", "staleness_max",
               "ratio_mean", "ratio_max", "clipped_fraction"]
    with open(out_dir / "rewards.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for name, record in records.items():
            for row in record["iterations"]:
                writer.writerow([name] + [_cell(row.get(c)) for c in columns[1:]])
    plot_comparison(records, out_dir / "rewards.png")
    return out_dir


def _cell(value: Any) -> Any:
    return round(value, 5) if isinstance(value, float) else ("" if value is None else value)


def plot_comparison(records: dict[str, dict[str, Any]], path: str | Path) -> Path | None:
    """Plot the mean reward per iteration of several runs (``{"sync": record, "async": record}``) on one axes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install agent_gym[report]): no plot", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, record in records.items():
        rows = record["iterations"]
        ax.plot([r["iteration"] for r in rows], [r["mean_reward"] for r in rows], marker="o", label=name)
    family = next(iter(records.values()))["family"]
    ax.set_xlabel("iteration (one policy-gradient step)")
    ax.set_ylabel("mean reward (correct answers)")
    ax.set_title(f"GRPO on ToolUse-v0 ({family}): synchronous and asynchronous")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def add_async_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--async`` options."""
    group = parser.add_argument_group(
        "asynchronous mode", "--async: rollouts keep running against a reference server (dev mode) while the trainer "
        "takes finished groups, steps, saves a checkpoint and has the server reload it every --tasks groups. The loss "
        "corrects for stale samples with truncated importance sampling (TIS): per sampled id, weight "
        "min(exp(logp_trainer - logp_behaviour), C) (no gradient through it) times advantage times logp_trainer, "
        "where logp_behaviour is the logprob recorded when the server sampled the id.")
    group.add_argument("--async", dest="run_async", action="store_true", help="run the asynchronous demo")
    group.add_argument("--server", default=None,
                       help="host:port of a server in dev mode: VLLM_SERVER_DEV_MODE=1 agent-gym serve --model MODEL, "
                            "or vLLM itself (VLLM_SERVER_DEV_MODE=1, --enable-scale-out for the generate route); its "
                            "requests go unseeded (default: start a reference server on the model, seeded)")
    group.add_argument("--concurrency", type=int, default=0,
                       help="episodes in flight (default: --tasks x --group-size)")
    group.add_argument("--max-staleness", type=int, default=None,
                       help="most versions a sample may lag (--async: default unbounded; with --carry-over: the "
                            "most updates a carried group may lag, default 1)")
    group.add_argument("--pause-mode", choices=("abort", "wait", "keep"), default="abort",
                       help="how the server pauses for a weight reload (default abort)")
    group.add_argument("--compare", nargs="+", metavar="[NAME=]RUN_JSON", default=None,
                       help="plot runs' rewards.json files on one axes (NAME defaults to the file's folder): "
                            "--out/rewards.png and --out/rewards.csv")
    group.add_argument("--tis-clip", type=float, default=TIS_CLIP,
                       help=f"TIS truncation C of the importance ratio (default {TIS_CLIP:g})")
