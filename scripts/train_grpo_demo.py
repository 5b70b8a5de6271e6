"""GRPO on CPU with nothing but what ``agent_gym.collect`` returns (the notebook 07_train twin).

Each iteration:

1. ``collect`` runs ``--tasks`` ToolUse-v0 tasks of one family, ``--group-size`` samples each,
   with a :class:`~agent_gym.policy.TransformersPolicy` sampling from the full distribution
   (temperature 1, no top-k/top-p/min-p), so the rollout is on-policy for a trainer that
   scores the full distribution;
2. rewards are normalised within each group of siblings (GRPO advantages: reward minus the
   group mean, over the group's standard deviation). The reward is the answer's correctness
   (``--reward answer``, default); ``--reward total`` adds the environment's tool-call shaping
   (+0.1 per successful call, -0.1 per failed one, within the episode's shaping budget), on which a weak
   family's policy soon learns to answer without calling tools at all (no penalty beats likely failing calls);
3. the trainer's own copy of the model re-scores the sampled ids (prompt + response ids,
   loss mask from the trajectory) and, at the first update, checks that the importance
   ratio ``exp(trainer logprob - rollout logprob)`` is 1 within 1e-3 on every sampled id;
4. a clipped policy-gradient step (PPO-style ratio clipping) updates the trainer;
5. the new weights are pushed into the policy in process (``TransformersPolicy.update_weights``)
   before the next rollout. With vLLM one would instead reload weights into the server
   (e.g. ``collective_rpc``/``update_weights`` in a colocated trainer such as verl or
   OpenRLHF, or a restart on a saved checkpoint); with ``agent-gym serve``, a restart on the
   saved directory.

``--dynamic-sampling`` drops groups whose answers all agree (zero outcome variance: nothing to
learn under GRPO) and samples more until ``--tasks`` informative groups are in; ``--curriculum``
draws each group's task by its tracked pass rate (too easy and too hard tasks less often);
``--carry-over N`` (with ``--dynamic-sampling``) carries up to N informative groups found beyond an
iteration's batch into the next iteration instead of dropping them (at most ``--max-staleness``
updates late, default 1; older ones are dropped and counted). The
iteration records then carry the episodes and tokens sampled, the informative groups (outcomes differ) trained
on and per second of sampling (also without the options, for comparison), the filter's counters (cumulative) and
the groups carried into the batch with their staleness, and ``--out/sampler_state.json`` holds the sampler's state.
``--family all`` trains on every family's tasks, interleaved. ``--skip-zero-advantage`` leaves the episodes of
advantage 0 out of the update's forward and backward passes (the same step, less compute); ``--eval-every TOKENS``
evaluates the policy on the whole pool (``--eval-samples`` episodes a task) before training, every TOKENS sampled
tokens and at the end, outside the iterations' seconds and tokens: with a curriculum or early cancel the mean
reward of the sampled episodes is over other tasks than without them, the evaluation over the same ones.

The mean reward per iteration (over every sampled episode, dropped groups included) is printed,
written to ``--out/rewards.json`` and plotted to
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
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_SCRIPTS = str(Path(__file__).resolve().parent)
if _SCRIPTS not in sys.path:  # imports grpo_common.py and grpo_async_demo.py (--async, --compare) beside this file
    sys.path.insert(0, _SCRIPTS)

from grpo_common import (  # noqa: E402 - beside this file
    REWARDS,
    add_batch_arguments,
    batch_options,
    batch_record,
    episode_reward,
    evaluate,
    grpo_advantages,
    plot_rewards,
    policy_gradient_step,
    rescore_error,
    task_pool,
    worst_family,
)

__all__ = ["main", "run", "run_solver_judge"]

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
    dynamic_sampling: bool = False,
    curriculum: bool = False,
    too_easy: float = 0.9,
    too_hard: float = 0.1,
    early_cancel: float | None = None,
    token_budget: int | None = None,
    carry_over: int = 0,
    max_staleness: int | None = None,
    n_parallel: int = 8,
    skip_zero_advantage: bool = False,
    eval_every: int | None = None,
    eval_samples: int = 4,
) -> dict[str, Any]:
    """Run the demo and return its record (rewards per iteration, ratio check, loss, timings).

    ``dynamic_sampling`` and ``curriculum`` (with its ``too_easy``/``too_hard`` pass rates) choose
    what goes into each batch (see the module docstring); ``early_cancel`` is the filter's
    early-cancel threshold and ``carry_over`` its carry-over buffer (informative groups found beyond
    an iteration's batch train in the next one, at most ``max_staleness`` updates late; None: 1);
    with ``token_budget`` the run stops after the iteration that brings the sampled tokens to it
    (``iterations`` stays the cap). ``n_parallel`` is ``collect``'s: episodes sampled at once (the
    in-process policy decodes them in one batch). The update re-scores every episode of the batch, those
    of groups whose answers all agree (advantage 0) too, as a trainer without a filter does; with
    ``skip_zero_advantage`` it leaves those out (the same step, less compute; ``skipped`` in each record).
    With ``eval_every`` (tokens) the policy is evaluated on the whole pool (``eval_samples`` episodes a
    task, the same seeds each time) before training (``record["eval_start"]``), each time the sampled tokens
    pass a multiple of ``eval_every`` and after the last iteration (the iteration's ``eval``); evaluations are
    counted in neither the iterations' seconds nor their tokens.

    Raises:
        RuntimeError: If the first update's importance ratio is not 1 within 1e-3.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym import collect
    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams, TransformersPolicy
    from agent_gym.rollout.outcome import is_valid

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
    pool = task_pool(family, pool_size, seed)
    if len(pool) < tasks_per_iteration:
        raise ValueError(f"tasks_per_iteration: expected at most the pool's {len(pool)} tasks, "
                         f"got {tasks_per_iteration}")
    rng = random.Random(seed)
    sampler, dynamic = batch_options(pool, dynamic_sampling=dynamic_sampling, curriculum=curriculum,
                                     too_easy=too_easy, too_hard=too_hard, seed=seed, early_cancel=early_cancel,
                                     carry_over=carry_over, max_staleness=max_staleness)
    record: dict[str, Any] = {"family": family, "reward": reward, "iterations": [], "first_ratio_error": None,
                              "dynamic_sampling": dynamic_sampling, "curriculum": curriculum,
                              "early_cancel": early_cancel, "token_budget": token_budget,
                              "carry_over": carry_over, "max_staleness": max_staleness, "n_parallel": n_parallel,
                              "skip_zero_advantage": skip_zero_advantage,
                              "eval_every": eval_every, "eval_samples": eval_samples}
    started = time.perf_counter()
    sampled_tokens = 0
    eval_seed = 10**6 + seed
    try:
        if eval_every:
            record["eval_start"] = evaluate(policy, pool, eval_samples, eval_seed, n_parallel, reward)
        next_eval = eval_every or 0
        for it in range(iterations):
            if token_budget is not None and sampled_tokens >= token_budget:
                break
            tasks = rng.sample(pool, tasks_per_iteration)
            seen: list[Any] = []  # every sampled episode, those of dropped groups too
            batch_started = time.perf_counter()
            trajectories = collect(None if sampler is not None else "agent_gym/ToolUse-v0", policy,
                                   tasks=None if sampler is not None else tasks,
                                   num_episodes=tasks_per_iteration if sampler is not None else None,
                                   samples_per_task=group_size, n_parallel=n_parallel, progress=False, max_steps=6,
                                   seed=seed * 1000 + it, sampler=sampler, dynamic_sampling=dynamic,
                                   on_episode=seen.append)
            batch_s = time.perf_counter() - batch_started
            if not trajectories:
                raise RuntimeError("no informative group within the filter's max_groups; nothing to train on")
            usable = [t for t in trajectories if len(t.segments) <= 1 and t.response_logprobs is not None
                      and float(t.response_masks.sum()) > 0]
            rewards = [episode_reward(t, reward) for t in usable]
            advantages = grpo_advantages(rewards, [t.group_id for t in usable])
            stats = policy_gradient_step(trainer, optimizer, usable, advantages,
                                         skip_zero_advantage=skip_zero_advantage)
            if it == 0:
                record["first_ratio_error"] = stats["max_ratio_error"]
                if stats["max_ratio_error"] > 1e-3:
                    raise RuntimeError(f"importance ratio at the first update: expected 1 within 1e-3, got an "
                                       f"error of {stats['max_ratio_error']:.2e}")
            policy.update_weights(trainer.state_dict())
            scored = [t for t in seen if is_valid(t)] or seen  # an infra failure or a cancelled sibling: no outcome
            # None when nothing was sampled: the whole batch was carried over from the iteration before
            mean_reward = sum(episode_reward(t, reward) for t in scored) / len(scored) if scored else None
            success = sum(float(t.metrics["res_reward"]) > 0 for t in scored) / len(scored) if scored else None
            row = {"iteration": it, "mean_reward": mean_reward, "success": success, "loss": stats["loss"],
                   "max_ratio_error": stats["max_ratio_error"], "episodes": len(trajectories),
                   "nonzero_advantages": sum(1 for a in advantages if abs(a) > 1e-6), "skipped": stats["skipped"],
                   **batch_record(seen, usable, batch_s, dynamic, sampler)}
            sampled_tokens += row["sampled_tokens"]
            row["cumulative_tokens"] = sampled_tokens
            row["sampling_s"] = batch_s
            row["iteration_s"] = time.perf_counter() - batch_started  # sampling and the update
            record["iterations"].append(row)
            last = it == iterations - 1 or (token_budget is not None and sampled_tokens >= token_budget)
            if eval_every and (sampled_tokens >= next_eval or last):
                row["eval"] = evaluate(policy, pool, eval_samples, eval_seed, n_parallel, reward)
                next_eval = (sampled_tokens // eval_every + 1) * eval_every
            if out is not None:  # each iteration's records survive a run stopped early
                Path(out).mkdir(parents=True, exist_ok=True)
                (Path(out) / "rewards.json").write_text(json.dumps(record, indent=2) + "\n")
            sampled = ("nothing sampled (the batch was carried)" if mean_reward is None or success is None
                       else f"mean reward {mean_reward:+.3f}  success {success:.0%}")
            say(f"iter {it:3d}  {sampled}  loss {stats['loss']:+.4f}  |ratio-1| max {stats['max_ratio_error']:.1e}")
        record["post_update_rescore_error"] = rescore_error(policy, trainer, pool[0])
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
        if sampler is not None:
            (out_dir / "sampler_state.json").write_text(json.dumps(sampler.state_dict()) + "\n")
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



def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="GRPO demo on ToolUse-v0 with the embedded tiny agent (CPU).")
    parser.add_argument("--family", default="auto",
                        help="task family, 'all' for every family's tasks interleaved, or 'auto' for the worst "
                             "family (default)")
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
    from grpo_async_demo import add_async_arguments, run_async, write_comparison  # a sibling script

    add_async_arguments(parser)
    add_batch_arguments(parser)
    parser.add_argument("--env", choices=("tool-use", "solver-judge"), default="tool-use",
                        help="solver-judge: train every role of SolverJudgeEnv episodes (uses --iterations, --tasks, "
                             "--group-size, --solvers, --seed, --model, --out)")
    parser.add_argument("--solvers", type=int, default=2, help="solvers per solver-judge episode")
    args = parser.parse_args(argv)
    if args.env == "solver-judge" and (args.run_async or args.compare):
        parser.error("--env solver-judge trains synchronously: it takes neither --async nor --compare")
    if args.early_cancel is not None and not args.dynamic_sampling:
        parser.error("--early-cancel needs --dynamic-sampling")
    if args.carry_over and not args.dynamic_sampling:
        parser.error("--carry-over needs --dynamic-sampling")
    if args.carry_over and (args.run_async or args.env != "tool-use"):
        parser.error("--carry-over is an option of the synchronous tool-use demo (a stream has no surplus groups)")
    if (args.early_cancel is not None or args.token_budget is not None or args.skip_zero_advantage
            or args.eval_every) and (args.run_async or args.env != "tool-use"):
        parser.error("--early-cancel, --token-budget, --skip-zero-advantage and --eval-every are options of the "
                     "synchronous tool-use demo")
    if args.env == "solver-judge" and (args.dynamic_sampling or args.curriculum):
        parser.error("--env solver-judge takes neither --dynamic-sampling nor --curriculum")
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
                  max_staleness=args.max_staleness, pause_mode=args.pause_mode, tis_clip=args.tis_clip,
                  dynamic_sampling=args.dynamic_sampling, curriculum=args.curriculum, too_easy=args.too_easy,
                  too_hard=args.too_hard)
        return 0
    run(family=args.family, iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group_size,
        lr=args.lr, reward=args.reward, pool_size=args.pool, seed=args.seed, out=args.out, model_path=args.model,
        dynamic_sampling=args.dynamic_sampling, curriculum=args.curriculum, too_easy=args.too_easy,
        too_hard=args.too_hard, early_cancel=args.early_cancel, token_budget=args.token_budget,
        carry_over=args.carry_over, max_staleness=args.max_staleness, n_parallel=args.n_parallel,
        skip_zero_advantage=args.skip_zero_advantage, eval_every=args.eval_every, eval_samples=args.eval_samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
