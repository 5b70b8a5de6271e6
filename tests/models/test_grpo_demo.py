"""A shortened run of scripts/train_grpo_demo.py: ratio check, finite loss, weights changed and pushed."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_grpo_demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("train_grpo_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grpo_advantages_are_normalised_per_group(demo):
    adv = demo.grpo_advantages([1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"])
    assert adv[0] == pytest.approx(-adv[1]) and adv[0] > 0.99
    assert adv[2] == adv[3] == 0.0


@pytest.mark.timeout(900)
def test_short_grpo_run(demo, tmp_path):
    record = demo.run(family="units", iterations=2, tasks_per_iteration=2, group_size=4, lr=1e-3, reward="total",
                      seed=0, out=tmp_path, log=lambda *a: None)
    assert record["first_ratio_error"] is not None and record["first_ratio_error"] < 1e-3
    assert all(math.isfinite(r["loss"]) for r in record["iterations"])
    assert len(record["iterations"]) == 2 and all(r["episodes"] == 8 for r in record["iterations"])
    assert record["policy_has_trainer_weights"]
    assert record["weights_changed"] == any(r["nonzero_advantages"] for r in record["iterations"])
    assert record["weights_changed"]
    # the policy samples from the pushed weights: the trainer re-scores its next turn exactly
    assert record["post_update_rescore_error"] < 1e-3
    saved = json.loads((tmp_path / "rewards.json").read_text())
    assert [r["iteration"] for r in saved["iterations"]] == [0, 1]


def test_episode_reward_choices(demo):
    class Episode:
        metrics = {"res_reward": 1.0}
        trajectory_reward = 1.2

    assert demo.episode_reward(Episode(), "answer") == 1.0
    assert demo.episode_reward(Episode(), "total") == 1.2
    with pytest.raises(ValueError, match="reward"):
        demo.episode_reward(Episode(), "shaped")


def test_batch_options_build_the_sampler_and_the_filter(demo):
    import grpo_common  # beside the script, on sys.path once the script is loaded

    pool = [{"id": f"t{i}", "question": "q", "ground_truth": "1"} for i in range(4)]
    assert grpo_common.batch_options(pool) == (None, None)
    sampler, dynamic = grpo_common.batch_options(pool, dynamic_sampling=True, curriculum=True, too_easy=0.8,
                                                 too_hard=0.2, seed=3)
    assert sampler.curriculum.too_easy == 0.8 and dynamic.outcome == "res_reward"
    sampler, dynamic = grpo_common.batch_options(pool, dynamic_sampling=True)
    assert sampler.curriculum is None and dynamic is not None  # replacements are fresh draws from the pool
    with pytest.raises(SystemExit):
        demo.main(["--env", "solver-judge", "--curriculum"])


def test_batch_record_counts_the_groups_trained_on_and_the_carried_ones(demo):
    from types import SimpleNamespace

    import grpo_common
    import torch

    from agent_gym.rollout import DynamicSampling

    def episode(group, reward, tokens):
        return SimpleNamespace(group_id=group, metrics={"res_reward": reward}, status="env_done",
                               response_masks=torch.ones(tokens))

    carried = [episode("old", 1.0, 5), episode("old", 0.0, 5)]
    dynamic = DynamicSampling(carry_over=2)
    dynamic.carry([carried], version=0)
    dynamic.begin_batch()  # batch 0 stands for version 0: the next one is version 1
    dynamic.take_carried(2, version=dynamic.begin_batch())
    fresh = [episode("new", 1.0, 2), episode("new", 0.0, 2)]
    agree = [episode("same", 0.0, 3), episode("same", 0.0, 3)]
    row = grpo_common.batch_record(fresh + agree, carried + fresh + agree, 2.0, dynamic, None)
    # trained on: the carried group and the fresh one differ, the third agrees; tokens: this iteration's only
    assert (row["groups"], row["informative_groups"], row["informative_groups_per_s"]) == (3, 2, 1.0)
    assert (row["sampled_episodes"], row["sampled_tokens"]) == (4, 10)
    assert (row["carried_groups"], row["carried_staleness"], row["carry_held"]) == (1, [1], 0)
    assert row["filter"]["carried"] == 1 and row["filter"]["surplus"] == 1


def test_task_pool_of_one_family_and_of_every_family(demo):
    import grpo_common  # beside the script, on sys.path once the script is loaded

    from agent_gym.envs.tool_use.tasks import TASK_FAMILIES

    units = grpo_common.task_pool("units", 8)
    assert len(units) == 8 and {t["family"] for t in units} == {"units"}
    assert units == grpo_common.task_pool("units")[:8]
    mixed = grpo_common.task_pool("all", 8)
    assert [t["family"] for t in mixed] == list(TASK_FAMILIES) * 2  # interleaved: each family equally
    assert len({t["id"] for t in grpo_common.task_pool("all")}) == sum(
        len(grpo_common.task_pool(f)) for f in TASK_FAMILIES)
    with pytest.raises(ValueError, match="family"):
        grpo_common.task_pool("auto")


@pytest.mark.parametrize("advantages", [[0.0, 1.5, -1.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
def test_skipping_zero_advantage_episodes_gives_the_same_step(demo, advantages):
    from types import SimpleNamespace

    import grpo_common
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(11, 6)
            self.head = torch.nn.Linear(6, 11)

        def forward(self, input_ids):
            return SimpleNamespace(logits=self.head(self.embed(input_ids)))

    def episode(seed):
        g = torch.Generator().manual_seed(seed)
        return SimpleNamespace(prompt_tokens=torch.randint(0, 11, (3,), generator=g),
                               response_tokens=torch.randint(0, 11, (4,), generator=g),
                               response_masks=torch.tensor([1.0, 1.0, 1.0, 0.0]),
                               response_logprobs=torch.full((4,), -2.4))

    episodes = [episode(i) for i in range(4)]
    torch.manual_seed(0)
    models = [Tiny(), Tiny()]
    models[1].load_state_dict(models[0].state_dict())
    start = {k: v.clone() for k, v in models[0].state_dict().items()}
    optimizers = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in models]
    for _ in range(2):  # the second step also moves by the first one's moments when the gradient is zero
        full = grpo_common.policy_gradient_step(models[0], optimizers[0], episodes, advantages)
        lean = grpo_common.policy_gradient_step(models[1], optimizers[1], episodes, advantages,
                                                skip_zero_advantage=True)
        assert full["skipped"] == 0 and lean["skipped"] == advantages.count(0.0)
        assert lean["loss"] == pytest.approx(full["loss"], abs=1e-6)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert not torch.equal(models[1].head.weight, start["head.weight"])  # a step was taken (weight decay at least)
