"""GRPO on CPU with nothing but what ``agent_gym.collect`` returns (the notebook 07_train twin).

Each iteration:

1. ``collect`` runs ``--tasks`` ToolUse-v0 tasks of one family, ``--group-size`` samples each,
   with a :class:`~agent_gym.policy.TransformersPolicy` sampling from the full distribution
   (temperature 1, no top-k/top-p/min-p), so the rollout is on-policy for a trainer that
   scores the full distribution;
2. rewards are normalised within each group of siblings (GRPO advantages: reward minus the
   group mean, over the group's standard deviation). The reward is the answer's correctness
   (``--reward answer``, default); ``--reward total`` adds the environment's tool-call shaping
   (+0.1 per successful call, -0.1 per failed one), on which a weak family's policy soon learns
   to answer without calling tools at all (no penalty beats likely failing calls);
3. the trainer's own copy of the model re-scores the sampled ids (prompt + response ids,
   loss mask from the trajectory) and, at the first update, checks that the importance
   ratio ``exp(trainer logprob - rollout logprob)`` is 1 within 1e-3 on every sampled id;
4. a clipped policy-gradient step (PPO-style ratio clipping) updates the trainer;
5. the new weights are pushed into the policy in process (``TransformersPolicy.update_weights``)
   before the next rollout. With vLLM one would instead reload weights into the server
   (e.g. ``collective_rpc``/``update_weights`` in a colocated trainer such as verl or
   OpenRLHF, or a restart on a saved checkpoint); with ``agent-gym serve``, a restart on the
   saved directory.

The mean reward per iteration is printed, written to ``--out/rewards.json`` and plotted to
``--out/rewards.png`` (needs matplotlib: ``pip install agent_gym[report]``).

Run::

    python scripts/train_grpo_demo.py --family auto --iterations 30 --tasks 16 --pool 16 --group-size 8 \
        --lr 1e-4 --out grpo_run

(the committed run, ``scripts/results/grpo``, is this command with ``--family lookup``, the
shipped model's worst family, which ``auto`` picks).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["episode_reward", "grpo_advantages", "main", "plot_comparison", "policy_gradient_step", "run", "run_async",
           "run_solver_judge", "start_dev_server", "task_rounds", "tis_policy_gradient_step", "worst_family",
           "write_comparison"]

#: What an episode earns: ``answer`` is the answer's correctness alone (``res_reward``, 0 or 1);
#: ``total`` is the environment's whole return (``trajectory_reward``: the answer plus +0.1 per
#: successful tool call and -0.1 per failed one).
REWARDS = ("answer", "total")


def episode_reward(trajectory: Any, reward: str = "answer") -> float:
    """The training reward of one episode (see :data:`REWARDS`)."""
    if reward == "answer":
        return float(trajectory.metrics.get("res_reward", 0.0))
    if reward == "total":
        return float(trajectory.trajectory_reward)
    raise ValueError(f"reward: expected one of {REWARDS}, got {reward!r}")


def grpo_advantages(rewards: Sequence[float], groups: Sequence[str]) -> list[float]:
    """Group-normalised advantages: ``(r - mean(group)) / (std(group) + 1e-4)``."""
    by_group: dict[str, list[float]] = {}
    for r, g in zip(rewards, groups, strict=True):
        by_group.setdefault(g, []).append(float(r))
    stats = {}
    for g, values in by_group.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        stats[g] = (mean, std)
    return [(float(r) - stats[g][0]) / (stats[g][1] + 1e-4) for r, g in zip(rewards, groups, strict=True)]


def _sequence_logprobs(model: Any, trajectory: Any) -> tuple[Any, Any, Any]:
    """Trainer logprobs of the sampled ids of a trajectory's first segment, its mask and rollout logprobs."""
    import torch

    prompt = trajectory.prompt_tokens.long()
    response = trajectory.response_tokens.long()
    ids = torch.cat([prompt, response])[None]
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(1, response[:, None])[:, 0]
    mask = trajectory.response_masks.float()
    old = torch.as_tensor(trajectory.response_logprobs, dtype=torch.float32)
    return logp, mask, old


def policy_gradient_step(
    model: Any, optimizer: Any, trajectories: Sequence[Any], advantages: Sequence[float], *, clip: float = 0.2,
) -> dict[str, float]:
    """One clipped policy-gradient step over ``trajectories``; returns loss and ratio statistics.

    The loss is the token-mean of ``-min(ratio * A, clip(ratio) * A)`` over sampled ids.
    ``max_ratio_error`` is the largest ``|ratio - 1|`` seen, before the step.
    """
    import torch

    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = sum(float(t.response_masks.sum()) for t in trajectories)
    loss_sum = 0.0
    max_err = 0.0
    for t, adv in zip(trajectories, advantages, strict=True):
        logp, mask, old = _sequence_logprobs(model, t)
        ratio = torch.exp(logp - old)
        max_err = max(max_err, float(((ratio.detach() - 1).abs() * mask).max()))
        unclipped = ratio * adv
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv
        loss = -(torch.minimum(unclipped, clipped) * mask).sum() / max(total_tokens, 1.0)
        loss.backward()
        loss_sum += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return {"loss": loss_sum, "max_ratio_error": max_err}


def _rescore_error(policy: Any, trainer: Any, task: dict[str, Any]) -> float:
    """Sample one turn with the policy and return the largest |policy logprob - trainer logprob|.

    Zero (up to float error) shows the policy samples from the weights the trainer pushed.
    """
    import gymnasium as gym
    import torch

    env = gym.make("agent_gym/ToolUse-v0")
    obs, info = env.reset(seed=0, options={"task": task})
    env.close()
    out = policy.act(obs, session_id="rescore-check", tools=info["tools"])
    policy.close_session("rescore-check")
    ids = torch.tensor([list(out.prompt_token_ids) + list(out.token_ids)])
    with torch.no_grad():
        logits = trainer(input_ids=ids).logits[0, len(out.prompt_token_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    return float((logp - torch.tensor(out.logprobs)).abs().max())


def worst_family(policy: Any, per_family: int = 8, seed: int = 0) -> str:
    """The ToolUse family with the lowest success of ``policy`` on training-distribution tasks."""
    from agent_gym import collect
    from agent_gym.envs.tool_use.tasks import TASK_FAMILIES
    from agent_gym.models.tiny_agent_data import training_tasks

    tasks = [t for t in training_tasks([900 + seed], per_family=per_family)]
    trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=8, progress=False, max_steps=6)
    success = {f: [] for f in TASK_FAMILIES}
    for t in trajectories:
        success[t.task["family"]].append(float(t.metrics["res_reward"]) > 0)
    return min(TASK_FAMILIES, key=lambda f: sum(success[f]) / max(1, len(success[f])))


def run(
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
    log: Any = None,
) -> dict[str, Any]:
    """Run the demo and return its record (rewards per iteration, ratio check, loss, timings).

    Raises:
        RuntimeError: If the first update's importance ratio is not 1 within 1e-3.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym import collect
    from agent_gym.models import default_model_path
    from agent_gym.models.tiny_agent_data import training_tasks
    from agent_gym.policy import SamplingParams, TransformersPolicy

    say = log or (lambda *a: print(*a, flush=True))
    torch.manual_seed(seed)
    path = str(model_path or default_model_path())
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=96, seed=seed)
    policy = TransformersPolicy(path, sampling=sampling, logprobs_mode="raw_logprobs")
    trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer.load_state_dict(policy.model.state_dict())
    initial = copy.deepcopy(trainer.state_dict())
    optimizer = torch.optim.AdamW(trainer.parameters(), lr=lr, weight_decay=0.0)
    if family == "auto":
        family = worst_family(policy, seed=seed)
        say(f"worst family of the starting model: {family}")
    pool = [t for t in training_tasks([1000 + seed], per_family=120) if t["family"] == family]
    if pool_size:
        pool = pool[:pool_size]
    if len(pool) < tasks_per_iteration:
        raise ValueError(f"tasks_per_iteration: expected at most the pool's {len(pool)} tasks, "
                         f"got {tasks_per_iteration}")
    rng = random.Random(seed)
    record: dict[str, Any] = {"family": family, "reward": reward, "iterations": [], "first_ratio_error": None}
    started = time.perf_counter()
    try:
        for it in range(iterations):
            tasks = rng.sample(pool, tasks_per_iteration)
            trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, samples_per_task=group_size,
                                   n_parallel=8, progress=False, max_steps=6, seed=seed * 1000 + it)
            usable = [t for t in trajectories if len(t.segments) <= 1 and t.response_logprobs is not None
                      and float(t.response_masks.sum()) > 0]
            rewards = [episode_reward(t, reward) for t in usable]
            success = sum(float(t.metrics["res_reward"]) > 0 for t in trajectories) / len(trajectories)
            advantages = grpo_advantages(rewards, [t.group_id for t in usable])
            stats = policy_gradient_step(trainer, optimizer, usable, advantages)
            if it == 0:
                record["first_ratio_error"] = stats["max_ratio_error"]
                if stats["max_ratio_error"] > 1e-3:
                    raise RuntimeError(f"importance ratio at the first update: expected 1 within 1e-3, got an "
                                       f"error of {stats['max_ratio_error']:.2e}")
            policy.update_weights(trainer.state_dict())
            mean_reward = sum(episode_reward(t, reward) for t in trajectories) / len(trajectories)
            row = {"iteration": it, "mean_reward": mean_reward, "success": success, "loss": stats["loss"],
                   "max_ratio_error": stats["max_ratio_error"], "episodes": len(trajectories),
                   "nonzero_advantages": sum(1 for a in advantages if abs(a) > 1e-6)}
            record["iterations"].append(row)
            say(f"iter {it:3d}  mean reward {mean_reward:+.3f}  success {success:.0%}  loss {stats['loss']:+.4f}  "
                f"|ratio-1| max {stats['max_ratio_error']:.1e}")
        record["post_update_rescore_error"] = _rescore_error(policy, trainer, pool[0])
    finally:
        policy.close()
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["weights_changed"] = any(not torch.equal(initial[k], v) for k, v in trainer.state_dict().items())
    record["policy_has_trainer_weights"] = all(
        torch.equal(policy.model.state_dict()[k], v) for k, v in trainer.state_dict().items())
    if out is not None:
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "rewards.json").write_text(json.dumps(record, indent=2) + "\n")
        plot_rewards(record, out_dir / "rewards.png")
    return record


# ---------------------------------------------------------------------------------------------- solver-judge
def run_solver_judge(
    *,
    iterations: int = 4,
    tasks_per_iteration: int = 2,
    group_size: int = 2,
    n_solvers: int = 2,
    lr: float = 1e-4,
    seed: int = 0,
    max_tokens: int = 48,
    out: str | Path | None = None,
    model_path: str | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """GRPO on :class:`~agent_gym.subagents.SolverJudgeEnv` episodes (``--env solver-judge``).

    Each iteration collects ``tasks_per_iteration`` x ``group_size`` episodes (``n_solvers``
    solvers and a judge, one shared policy), makes one training record per segment
    (``split_segments``), gives each the role's reward (``reward_assignment="role"``) and its
    advantage within its (task, role) group (each agent counted once), and takes one clipped
    policy-gradient step over every agent's ids.

    Returns:
        The record: per iteration the mean role reward per role, the loss and the ratio check.

    Raises:
        RuntimeError: If the first update's importance ratio is not 1 within 1e-3.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym import collect
    from agent_gym.envs.tool_use.tasks import shared_builtin_tasks
    from agent_gym.integrations.contract import group_advantages, training_segments
    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams, TransformersPolicy
    from agent_gym.segments import split_segments
    from agent_gym.subagents import SolverJudgeEnv

    say = log or (lambda *a: print(*a, flush=True))
    torch.manual_seed(seed)
    path = str(model_path or default_model_path())
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=max_tokens, seed=seed)
    policy = TransformersPolicy(path, sampling=sampling, logprobs_mode="raw_logprobs")
    trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer.load_state_dict(policy.model.state_dict())
    optimizer = torch.optim.AdamW(trainer.parameters(), lr=lr, weight_decay=0.0)
    pool = list(shared_builtin_tasks())
    rng = random.Random(seed)
    record: dict[str, Any] = {"env": "solver-judge", "n_solvers": n_solvers, "iterations": [],
                              "first_ratio_error": None}
    started = time.perf_counter()
    try:
        for it in range(iterations):
            tasks = rng.sample(pool, tasks_per_iteration)
            episodes = collect(lambda tasks=tasks: SolverJudgeEnv(policy, tasks=tasks, n_solvers=n_solvers,
                                                                  solver_max_steps=3),
                               policy, tasks=tasks, samples_per_task=group_size, n_parallel=8, seed=seed * 1000 + it,
                               progress=False)
            segments = [s for e in episodes for s in training_segments(e, reward_assignment="role")]
            advantages = group_advantages((s.group_key, s.advantage_id, s.reward, s.masked) for s in segments)
            records = split_segments(episodes)  # one record per segment, in the order of training_segments
            usable = [(r, advantages[s.advantage_id]) for r, s in zip(records, segments, strict=True)
                      if r.response_logprobs is not None and float(r.response_masks.sum()) > 0]
            stats = policy_gradient_step(trainer, optimizer, [r for r, _ in usable], [a for _, a in usable])
            if it == 0:
                record["first_ratio_error"] = stats["max_ratio_error"]
                if stats["max_ratio_error"] > 1e-3:
                    raise RuntimeError(f"importance ratio at the first update: expected 1 within 1e-3, got an "
                                       f"error of {stats['max_ratio_error']:.2e}")
            policy.update_weights(trainer.state_dict())
            by_role: dict[str, list[float]] = {}
            for s in segments:
                by_role.setdefault(s.role, []).append(s.reward)
            role_reward = {role: sum(v) / len(v) for role, v in sorted(by_role.items())}
            row = {"iteration": it, "episodes": len(episodes), "segments": len(segments), "trained": len(usable),
                   "role_reward": role_reward, "loss": stats["loss"], "max_ratio_error": stats["max_ratio_error"],
                   "statuses": sorted({e.status for e in episodes})}
            record["iterations"].append(row)
            say(f"iter {it:3d}  " + "  ".join(f"{r} {v:.2f}" for r, v in role_reward.items())
                + f"  loss {stats['loss']:+.4f}  |ratio-1| max {stats['max_ratio_error']:.1e}")
    finally:
        policy.close()
    record["seconds"] = round(time.perf_counter() - started, 1)
    if out is not None:
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "rewards.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


# ---------------------------------------------------------------------------------------------- asynchronous GRPO
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
                           "VLLM_SERVER_DEV_MODE=1 (agent-gym serve) to enable pause/resume/reload_weights")


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
        logp, mask, old = _sequence_logprobs(model, t)
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
        versions = torch.as_tensor(t.segments[0].weight_versions)[t.response_masks > 0] if t.segments else []
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
) -> dict[str, Any]:
    """The asynchronous demo: rollouts keep running against the server while the trainer updates it.

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
    from agent_gym.models.tiny_agent_data import training_tasks
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
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=96, seed=seed, logprobs=0)
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
        pool = [t for t in training_tasks([1000 + seed], per_family=120) if t["family"] == family]
        if pool_size:
            pool = pool[:pool_size]
        if len(pool) < tasks_per_iteration:
            raise ValueError(f"tasks_per_iteration: expected at most the pool's {len(pool)} tasks, "
                             f"got {tasks_per_iteration}")
        record["concurrency"] = concurrency = concurrency or tasks_per_iteration * group_size
        stream = RolloutStream("agent_gym/ToolUse-v0", policy, task_rounds(pool, tasks_per_iteration, seed),
                               samples_per_task=group_size, concurrency=concurrency, max_staleness=max_staleness,
                               groups_per_update=tasks_per_iteration, pause_mode=pause_mode, max_steps=6)
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
                            "updates": stream.stats.updates,
                            "update_s_median": sorted(stream.stats.update_s)[len(stream.stats.update_s) // 2]
                            if stream.stats.update_s else None}
        stream.close()
        # the server samples from the pushed checkpoint: the trainer re-scores its next turn exactly
        record["post_update_rescore_error"] = _rescore_error(policy, trainer, pool[0])
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


def plot_rewards(record: dict[str, Any], path: str | Path) -> Path | None:
    """Plot mean reward and success per iteration to ``path`` (None when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install agent_gym[report]): no plot", file=sys.stderr)
        return None
    its = [r["iteration"] for r in record["iterations"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(its, [r["mean_reward"] for r in record["iterations"]], marker="o", label="mean reward")
    ax.plot(its, [r["success"] for r in record["iterations"]], marker=".", linestyle="--", label="success rate")
    ax.set_xlabel("iteration")
    ax.set_title(f"GRPO on ToolUse-v0 ({record['family']}), embedded tiny agent")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="GRPO demo on ToolUse-v0 with the embedded tiny agent (CPU).")
    parser.add_argument("--family", default="auto", help="task family, or 'auto' for the worst one (default)")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--tasks", type=int, default=8, help="tasks per iteration")
    parser.add_argument("--group-size", type=int, default=4, help="samples per task (GRPO group)")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--reward", choices=REWARDS, default="answer",
                        help="answer: correctness only (default); total: the env's return with tool-call shaping")
    parser.add_argument("--pool", type=int, default=0,
                        help="train on the first N tasks of the family's pool (default 0: all ~120)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="model directory (default: the embedded model)")
    parser.add_argument("--out", default=None, help="directory for rewards.json and rewards.png")
    _add_async_arguments(parser)
    parser.add_argument("--env", choices=("tool-use", "solver-judge"), default="tool-use",
                        help="solver-judge: train every role of SolverJudgeEnv episodes (uses --iterations, --tasks, "
                             "--group-size, --solvers, --seed, --model, --out)")
    parser.add_argument("--solvers", type=int, default=2, help="solvers per solver-judge episode")
    args = parser.parse_args(argv)
    if args.env == "solver-judge" and (args.run_async or args.compare):
        parser.error("--env solver-judge trains synchronously: it takes neither --async nor --compare")
    if args.env == "solver-judge":
        run_solver_judge(iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group_size,
                         n_solvers=args.solvers, seed=args.seed, out=args.out, model_path=args.model)
        return 0
    if args.compare:
        records = {}
        for item in args.compare:
            name, _, file = item.rpartition("=")
            records[name or Path(file).parent.name] = json.loads(Path(file).read_text())
        print(write_comparison(records, args.out or "."))
        return 0
    if args.run_async:
        run_async(family=args.family, iterations=args.iterations, tasks_per_iteration=args.tasks,
                  group_size=args.group_size, lr=args.lr, reward=args.reward, pool_size=args.pool, seed=args.seed,
                  out=args.out, model_path=args.model, server=args.server, concurrency=args.concurrency,
                  max_staleness=args.max_staleness, pause_mode=args.pause_mode, tis_clip=args.tis_clip)
        return 0
    run(family=args.family, iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group_size,
        lr=args.lr, reward=args.reward, pool_size=args.pool, seed=args.seed, out=args.out, model_path=args.model)
    return 0


def _add_async_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--async`` options."""
    group = parser.add_argument_group(
        "asynchronous mode", "--async: rollouts keep running against a reference server (dev mode) while the trainer "
        "takes finished groups, steps, saves a checkpoint and has the server reload it every --tasks groups. The loss "
        "corrects for stale samples with truncated importance sampling (TIS): per sampled id, weight "
        "min(exp(logp_trainer - logp_behaviour), C) (no gradient through it) times advantage times logp_trainer, "
        "where logp_behaviour is the logprob recorded when the server sampled the id.")
    group.add_argument("--async", dest="run_async", action="store_true", help="run the asynchronous demo")
    group.add_argument("--server", default=None,
                       help="host:port of a reference server started with VLLM_SERVER_DEV_MODE=1 agent-gym serve "
                            "--model MODEL (default: start one on the model)")
    group.add_argument("--concurrency", type=int, default=0,
                       help="episodes in flight (default: --tasks x --group-size)")
    group.add_argument("--max-staleness", type=int, default=None,
                       help="most versions a sample may lag (default: unbounded)")
    group.add_argument("--pause-mode", choices=("abort", "wait", "keep"), default="abort",
                       help="how the server pauses for a weight reload (default abort)")
    group.add_argument("--compare", nargs="+", metavar="[NAME=]RUN_JSON", default=None,
                       help="plot runs' rewards.json files on one axes (NAME defaults to the file's folder): "
                            "--out/rewards.png and --out/rewards.csv")
    group.add_argument("--tis-clip", type=float, default=TIS_CLIP,
                       help=f"TIS truncation C of the importance ratio (default {TIS_CLIP:g})")


if __name__ == "__main__":
    sys.exit(main())
