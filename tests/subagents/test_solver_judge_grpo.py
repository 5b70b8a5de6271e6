"""The GRPO demo's update step trains on solver-judge episodes: per-segment records, advantages by (task, role)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_grpo_demo.py"


@pytest.mark.timeout(600)
def test_grpo_trains_on_solver_judge_episodes():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from agent_gym import collect
    from agent_gym.envs.tool_use.tasks import shared_builtin_tasks
    from agent_gym.integrations.contract import group_advantages, training_segments
    from agent_gym.models import default_model_path
    from agent_gym.policy import SamplingParams, TransformersPolicy
    from agent_gym.segments import split_segments
    from agent_gym.subagents import SolverJudgeEnv

    spec = importlib.util.spec_from_file_location("train_grpo_demo", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    path = str(default_model_path())
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=48, seed=0)
    policy = TransformersPolicy(path, sampling=sampling, logprobs_mode="raw_logprobs")
    trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer.load_state_dict(policy.model.state_dict())
    optimizer = torch.optim.AdamW(trainer.parameters(), lr=1e-4)
    tasks = list(shared_builtin_tasks()[:2])
    try:
        for iteration in range(2):
            episodes = collect(lambda: SolverJudgeEnv(policy, tasks=tasks, n_solvers=2, solver_max_steps=3), policy,
                               tasks=tasks, samples_per_task=2, n_parallel=8, seed=iteration, progress=False)
            segments = [s for e in episodes for s in training_segments(e, reward_assignment="role")]
            assert {s.role for s in segments} == {"judge", "solver"}
            assert {s.group_key.rsplit("/", 1)[1] for s in segments} == {"judge", "solver"}
            advantages = group_advantages((s.group_key, s.advantage_id, s.reward, s.masked) for s in segments)
            records = split_segments(episodes)  # one record per segment, the segment's ids at the top level
            assert len(records) == len(segments)
            usable = [(r, advantages[s.advantage_id]) for r, s in zip(records, segments, strict=True)
                      if float(r.response_masks.sum()) > 0]
            stats = demo.policy_gradient_step(trainer, optimizer, [r for r, _ in usable], [a for _, a in usable])
            assert math.isfinite(stats["loss"])
            assert stats["max_ratio_error"] < 1e-3  # every agent's logprobs are the trainer's: token-exact
            policy.update_weights(trainer.state_dict())
    finally:
        policy.close()
