"""Helpers shared by the GRPO demos (``train_grpo_demo.py``, ``grpo_async_demo.py``, notebooks 07 and 12).

The training reward of an episode, group-normalised advantages, the trainer's re-scoring of the
sampled ids, a clipped policy-gradient step, the logprob check of a pushed policy, the weakest
ToolUse family of a model, the training pool of a family (or of every family), the reward plot, and
the batch options (``--dynamic-sampling``: drop groups whose answers all agree; ``--curriculum``:
draw tasks by their tracked pass rate).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REWARDS", "add_batch_arguments", "batch_options", "batch_record", "episode_reward", "evaluate",
           "grpo_advantages", "plot_rewards", "policy_gradient_step", "rescore_error", "sequence_logprobs",
           "task_pool", "worst_family"]

#: What an episode earns: ``answer`` is the answer's correctness alone (``res_reward``, 0 or 1);
#: ``total`` is the environment's whole return (``trajectory_reward``: the answer plus +0.1 per
#: successful tool call and -0.1 per failed one, within the episode's shaping budget: see RewardConfig).
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


def sequence_logprobs(model: Any, trajectory: Any) -> tuple[Any, Any, Any]:
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
    skip_zero_advantage: bool = False,
) -> dict[str, float]:
    """One clipped policy-gradient step over ``trajectories``; returns loss and ratio statistics.

    The loss is the token-mean of ``-min(ratio * A, clip(ratio) * A)`` over sampled ids. Every
    trajectory is re-scored (forward and backward), those of advantage 0 too, as a trainer without a
    filter does; with ``skip_zero_advantage`` those are left out of the compute (they add nothing to
    the loss or the gradient, and their ids still count in the token-mean, so the step is the same)
    and ``skipped`` counts them. ``max_ratio_error`` is the largest ``|ratio - 1|`` seen (on the
    trajectories re-scored), before the step.
    """
    import torch

    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = sum(float(t.response_masks.sum()) for t in trajectories)
    loss_sum = 0.0
    max_err = 0.0
    skipped = 0
    for t, adv in zip(trajectories, advantages, strict=True):
        if skip_zero_advantage and adv == 0.0:
            skipped += 1
            continue
        logp, mask, old = sequence_logprobs(model, t)
        ratio = torch.exp(logp - old)
        max_err = max(max_err, float(((ratio.detach() - 1).abs() * mask).max()))
        unclipped = ratio * adv
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv
        loss = -(torch.minimum(unclipped, clipped) * mask).sum() / max(total_tokens, 1.0)
        loss.backward()
        loss_sum += float(loss.detach())
    if trajectories and skipped == len(trajectories):  # as the zero gradient of a step that re-scored them all
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return {"loss": loss_sum, "max_ratio_error": max_err, "skipped": skipped}


def rescore_error(policy: Any, trainer: Any, task: dict[str, Any]) -> float:
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


def evaluate(policy: Any, tasks: Sequence[dict[str, Any]], samples: int, seed: int, n_parallel: int = 8,
             reward: str = "answer") -> dict[str, Any]:
    """The policy's mean reward and success on a fixed task set: ``samples`` episodes of each of ``tasks``.

    Unlike a training iteration's mean reward, which is over the episodes it sampled (tasks drawn by a
    curriculum, groups cancelled early left out), this is over the same tasks, each equally, whatever the
    options: reward curves of runs with different options compare on it.
    """
    import time

    from agent_gym import collect
    from agent_gym.rollout.outcome import is_valid

    started = time.perf_counter()
    episodes = collect("agent_gym/ToolUse-v0", policy, tasks=list(tasks), samples_per_task=samples,
                       n_parallel=n_parallel, progress=False, max_steps=6, seed=seed)
    scored = [t for t in episodes if is_valid(t)]
    return {"episodes": len(scored),
            "mean_reward": sum(episode_reward(t, reward) for t in scored) / max(len(scored), 1),
            "success": sum(float(t.metrics["res_reward"]) > 0 for t in scored) / max(len(scored), 1),
            "seconds": time.perf_counter() - started}


def worst_family(policy: Any, per_family: int = 8, seed: int = 0) -> str:
    """The ToolUse family with the lowest success of ``policy`` on training-distribution tasks."""
    from agent_gym import collect
    from agent_gym.envs.tool_use.tasks import TASK_FAMILIES
    from agent_gym.models.tiny_agent_data import training_tasks

    tasks = [t for t in training_tasks([900 + seed], per_family=per_family)]
    trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=8, progress=False, max_steps=6)
    success: dict[str, list[bool]] = {f: [] for f in TASK_FAMILIES}
    for t in trajectories:
        success[t.task["family"]].append(float(t.metrics["res_reward"]) > 0)
    return min(TASK_FAMILIES, key=lambda f: sum(success[f]) / max(1, len(success[f])))


def task_pool(family: str, pool_size: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """The demos' training tasks of ``family``, or of every family with ``family="all"``.

    ``"all"`` interleaves the families (one task of each in turn, in ``TASK_FAMILIES`` order), so the
    first ``pool_size`` tasks hold every family about equally: the mixture a run on the whole task
    distribution trains on.

    Args:
        family: A ``TASK_FAMILIES`` name, or ``"all"``.
        pool_size: Keep the first this many tasks (0: all of them, about 120 a family).
        seed: The demo's seed (the tasks come from generator seed ``1000 + seed``).

    Raises:
        ValueError: If ``family`` is neither a family nor ``"all"``.
    """
    from agent_gym.envs.tool_use.tasks import TASK_FAMILIES
    from agent_gym.models.tiny_agent_data import training_tasks

    if family != "all" and family not in TASK_FAMILIES:
        raise ValueError(f"family: expected one of {TASK_FAMILIES} or 'all', got {family!r}")
    tasks = training_tasks([1000 + seed], per_family=120)
    if family == "all":
        by_family = [[t for t in tasks if t["family"] == f] for f in TASK_FAMILIES]
        pool = [t for row in itertools.zip_longest(*by_family) for t in row if t is not None]
    else:
        pool = [t for t in tasks if t["family"] == family]
    return pool[:pool_size] if pool_size else pool


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
    nan = float("nan")  # an iteration that sampled nothing (its batch was carried over) has no reward
    ax.plot(its, [nan if r["mean_reward"] is None else r["mean_reward"] for r in record["iterations"]], marker="o",
            label="mean reward")
    ax.plot(its, [nan if r["success"] is None else r["success"] for r in record["iterations"]], marker=".",
            linestyle="--", label="success rate")
    ax.set_xlabel("iteration")
    ax.set_title(f"GRPO on ToolUse-v0 ({record['family']}), embedded tiny agent")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def add_batch_arguments(parser: Any) -> None:
    """The ``--dynamic-sampling`` and ``--curriculum`` options of the demos."""
    group = parser.add_argument_group("what goes into a batch")
    group.add_argument("--dynamic-sampling", action="store_true",
                       help="drop groups whose answers (res_reward) all agree and sample more until --tasks "
                            "informative groups are in (DAPO-style); the dropped groups are counted")
    group.add_argument("--curriculum", action="store_true",
                       help="draw each group's task by its tracked pass rate: too easy (>= --too-easy) and too hard "
                            "(<= --too-hard) tasks are drawn a tenth as often as learnable and unseen ones")
    group.add_argument("--early-cancel", type=float, default=None, metavar="P",
                       help="with --dynamic-sampling: cancel a group's unfinished siblings once the finished ones "
                            "agree and the task's tracked pass rate puts another outcome below P (e.g. 0.05)")
    group.add_argument("--carry-over", type=int, default=0, metavar="N",
                       help="with --dynamic-sampling: carry up to N informative groups found beyond an iteration's "
                            "batch into the next one instead of dropping them (default 0: dropped); a carried group "
                            "older than --max-staleness updates (default 1 here) is dropped and counted")
    group.add_argument("--token-budget", type=int, default=None, metavar="N",
                       help="stop after the iteration that brings the sampled tokens to N (--iterations stays the "
                            "cap): runs compared at equal sampled tokens")
    group.add_argument("--n-parallel", type=int, default=8,
                       help="episodes sampled at once by the synchronous tool-use demo (default 8)")
    group.add_argument("--skip-zero-advantage", action="store_true",
                       help="leave episodes of advantage 0 (a group whose answers all agree) out of the update's "
                            "forward and backward passes: the same step, computed over fewer episodes")
    group.add_argument("--eval-every", type=int, default=None, metavar="TOKENS",
                       help="evaluate the policy on the whole pool (--eval-samples episodes a task) before training, "
                            "each time the sampled tokens pass a multiple of TOKENS, and at the end; not counted in "
                            "the iterations' seconds or tokens")
    group.add_argument("--eval-samples", type=int, default=4, help="episodes per task of an evaluation (default 4)")
    group.add_argument("--too-easy", type=float, default=0.9, help="pass rate of a too-easy task (default 0.9)")
    group.add_argument("--too-hard", type=float, default=0.1, help="pass rate of a too-hard task (default 0.1)")


def batch_options(pool: Sequence[dict[str, Any]], *, dynamic_sampling: bool = False, curriculum: bool = False,
                  too_easy: float = 0.9, too_hard: float = 0.1, seed: int = 0,
                  early_cancel: float | None = None, carry_over: int = 0,
                  max_staleness: int | None = None) -> tuple[Any, Any]:
    """The demo's task sampler and filter (None, None without either option).

    With either option the tasks are drawn from ``pool`` by a sampler (uniformly without
    ``curriculum``): a dropped group's replacement is a fresh draw, not the same task again.
    ``early_cancel`` (with ``dynamic_sampling``) is the filter's early-cancel threshold;
    ``carry_over`` its carry-over buffer (groups), whose groups may lag ``max_staleness`` updates
    (None: the filter's default, 1).
    """
    from agent_gym.rollout import Curriculum, DynamicSampling, EnvSource, TaskSampler

    sampler = None
    if curriculum or dynamic_sampling:
        bands = Curriculum(too_easy=too_easy, too_hard=too_hard) if curriculum else None
        sampler = TaskSampler([EnvSource("agent_gym/ToolUse-v0", list(pool))], curriculum=bands, seed=seed)
    if early_cancel is not None and not dynamic_sampling:
        raise ValueError("early_cancel: needs dynamic_sampling (it drops the cancelled groups)")
    if carry_over and not dynamic_sampling:
        raise ValueError("carry_over: needs dynamic_sampling (it carries the filter's surplus groups)")
    if not dynamic_sampling:
        return sampler, None
    staleness: dict[str, Any] = {} if max_staleness is None else {"carry_max_staleness": max_staleness}
    return sampler, DynamicSampling(early_cancel=early_cancel, carry_over=carry_over, **staleness)


def batch_record(seen: Sequence[Any], batch: Sequence[Any], seconds: float, dynamic: Any,
                 sampler: Any) -> dict[str, Any]:
    """Figures of one iteration's batch.

    Args:
        seen: Every episode sampled in the iteration (dropped and surplus groups too).
        batch: The episodes trained on (carried groups included).
        seconds: The iteration's sampling seconds.
        dynamic: The filter, or None.
        sampler: The task sampler, or None.

    Returns:
        Episodes and tokens sampled (``seen``), groups and informative groups (outcomes differ) in ``batch`` and
        informative groups per second of sampling, the filter's counters, the groups carried into the batch
        (with their staleness) and the curriculum's bands.
    """
    from agent_gym.rollout.dynamic_sampling import judge_group

    groups: dict[str, list[Any]] = {}
    for episode in batch:
        groups.setdefault(episode.group_id, []).append(episode)
    informative = sum(judge_group(group) == "kept" for group in groups.values())
    tokens = sum(int(t.response_masks.sum()) for t in seen)
    row: dict[str, Any] = {"sampled_episodes": len(seen), "sampled_tokens": tokens, "groups": len(groups),
                           "informative_groups": informative,
                           "informative_groups_per_s": informative / seconds if seconds > 0 else 0.0}
    if dynamic is not None:
        row["filter"] = dynamic.stats.as_dict()
        row["carried_groups"] = len(dynamic.last_carried)
        row["carried_staleness"] = [g.staleness for g in dynamic.last_carried]
        row["carry_held"] = dynamic.carried_held
    if sampler is not None and sampler.curriculum is not None:
        figures = sampler.metrics()["agent_gym/ToolUse-v0"]
        row["bands"] = {k: int(v) for k, v in figures.items() if k.startswith("tasks_")}
    return row
