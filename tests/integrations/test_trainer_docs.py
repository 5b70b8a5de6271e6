"""What docs/trainers.md and the README say about masking is what the trainer paths do.

docs/trainers.md's table "What a trainer gets from an episode that failed" says, per path, what a
failed episode's rows hold; this test rebuilds each cell from what the path hands its trainer for the
batch with every kind of failure (the ``fault_episodes`` fixture) and compares it with the page, so
changing either alone fails here. The README's training paragraph is checked to claim no more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from contract_paths import PATHS, counts
from training_faults import ENV_ID as FAULTY

from agent_gym.export import to_slime_samples
from agent_gym.integrations.contract import filler_token_id
from agent_gym.integrations.trl import episode_sample
from agent_gym.integrations.trl_environment import environment_factory

ROOT = Path(__file__).resolve().parents[2]
TABLE_TITLE = "## What a trainer gets from an episode that failed"
COLUMNS = ["path", "loss mask", "reward", "baseline", "episode with no ids"]


def _table() -> dict[str, list[str]]:
    section = (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8").split(TABLE_TITLE, 1)[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    return {row[0]: row[1:] for row in rows}


def _one(values: set[Any], what: str) -> str:
    assert len(values) == 1, f"{what}: expected one value for every failed episode, got {values}"
    return str(next(iter(values)))


def _baseline(run: Any, words: str) -> str:
    """``words`` when no failed row moved an advantage or a baseline (see contract_paths.counts)."""
    return words if all(fake == 0 for _, _, fake in counts(run).values()) else "moved by failed rows"


def _observed(episodes: list[Any], pad: int) -> dict[str, list[str]]:
    runs = {name: PATHS[name](episodes, pad) for name in PATHS}
    down = "server_down"
    out: dict[str, list[str]] = {}

    # slime, both paths
    for path, name in (("`export.to_slime_samples`", "slime export (to_slime_samples)"),
                       ("`integrations.slime.generate`", "slime generate (episode_samples)")):
        run = runs[name]
        failed = run.failed(episodes)
        removed = all(set(s.loss_mask) == {0} and s.remove_sample for s in failed)
        empty = run.failed(episodes, down)
        one_id = all(s.response_length == 1 and s.loss_mask == [0] and s.tokens == [pad, pad] for s in empty)
        no_ids = "one masked pad id" if one_id else "other"
        if name.startswith("slime export"):  # without a pad id, an episode that never sampled gives no sample
            dropped = not to_slime_samples([e.trajectory for e in episodes if e.kind == down])
            no_ids = f"dropped, or {no_ids} with `pad_token_id=`" if dropped else "kept empty"
        out[path] = ["`loss_mask` all 0, `remove_sample=True`" if removed else "kept",
                     _one({s.reward for s in failed}, path),
                     _baseline(run, "left out by `reward_post_process`"), no_ids]

    # TRL rollout_func
    samples = [episode_sample(e.trajectory, pad_token_id=pad) for e in episodes if e.failed]
    empty = [episode_sample(e.trajectory, pad_token_id=pad) for e in episodes if e.kind == down]
    rewards = {s["episode_reward"] for s in samples}
    out["TRL `rollout_func`"] = [
        "`env_mask` all 0" if all(set(s["env_mask"]) == {0} for s in samples) else "kept",
        _one(rewards, "TRL rewards"),
        "left out by TRL (unscorable)" if rewards == {None} else "in TRL's baseline",
        "one masked pad id of prompt and of completion" if all(
            s["prompt_ids"] == s["completion_ids"] == [pad] and s["env_mask"] == [0] for s in empty) else "other"]

    # TRL environment_factory: an env that cannot start (the real trainer step is in test_trl.py)
    Environment = environment_factory(FAULTY, env_kwargs={"fault": "reset"})
    instance = Environment()
    instance.reset(task=episodes[0].trajectory.task)
    reward = instance.get_reward()
    out["TRL `environment_factory`"] = [
        "all 0 with `masking_trainer(GRPOTrainer)`" if instance.masked else "kept", str(reward),
        "left out by TRL (unscorable)" if reward is None else "in TRL's baseline", "TRL's own prompt"]

    # verl
    run = runs["verl (agent_loop_fields + agent_gym_grpo)"]
    failed = run.failed(episodes)
    out["verl agent loop"] = [
        "`response_mask` all 0" if all(set(o["response_mask"]) == {0} for o in failed) else "kept",
        _one({o["reward_score"] for o in failed}, "verl rewards"),
        _baseline(run, "left out by the `agent_gym_grpo` estimator"),
        "one masked pad id" if all(o["prompt_ids"] == o["response_ids"] == [pad] and o["response_mask"] == [0]
                                   for o in run.failed(episodes, down)) else "other"]

    # the two paths that hand every row a reward: the task's mean over the episodes that ran
    for path, name, mask_name in (("SkyRL generator", "SkyRL (AgentGymGenerator)", "loss_masks"),
                                  ("engine API (`GymEngineWrapper`)", "engine API (training_records)",
                                   "response_masks")):
        run = runs[name]
        ran: dict[str, list[float]] = {}
        for owner in sorted(set(run.owners)):  # each episode once, however many rows it has
            if not episodes[owner].failed:
                ran.setdefault(str(episodes[owner].trajectory.task["id"]), []).append(
                    float(episodes[owner].trajectory.trajectory_reward))
        neutral = all(abs(reward - (sum(ran[g]) / len(ran[g]) if g in ran else 0.0)) < 1e-9
                      for (kind, g, _, _), reward in zip(run.rows, _rewards(run), strict=True) if kind)
        masks = [_mask(o) for o in run.failed(episodes)]
        empty = run.failed(episodes, down)
        out[path] = [f"`{mask_name}` all 0" if all(set(m) == {0} for m in masks) else "kept",
                     "its task's mean over the episodes that ran (0.0 if none)" if neutral else "other",
                     _baseline(run, "mean unchanged"),
                     "one masked pad id" if all(_ids(o) == ([pad], [pad]) and _mask(o) == [0] for o in empty)
                     else "other"]
    return out


def _mask(output: Any) -> list[int]:
    return list(output["loss_masks"]) if isinstance(output, dict) else output.response_masks.tolist()


def _ids(output: Any) -> tuple[list[int], list[int]]:
    if isinstance(output, dict):
        return list(output["prompt_token_ids"]), list(output["response_ids"])
    return output.prompt_tokens.tolist(), output.response_tokens.tolist()


def _rewards(run: Any) -> list[float]:
    return [float(o["rewards"]) if isinstance(o, dict) else float(o.trajectory_reward) for o in run.outputs]


def test_the_masking_table_is_what_every_path_does(fault_episodes, tiny_agent_tokenizer):
    table = _table()
    observed = _observed(fault_episodes, filler_token_id(tiny_agent_tokenizer))
    assert list(table) == list(observed)
    for path, cells in observed.items():
        assert table[path] == cells, f"docs/trainers.md, {path}: the page says {table[path]}, the path does {cells}"


def test_the_readme_claims_what_the_table_shows():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    claim = ("episodes that failed for infrastructure reasons are masked, never trained on as a zero reward "
             "(what each path hands its trainer for them: [docs/trainers.md](docs/trainers.md#what-a-trainer-gets-"
             "from-an-episode-that-failed))")
    assert claim in " ".join(readme.split())
    assert "failed episodes masked" in readme  # the export line of the quick start


@pytest.mark.parametrize("section", ["## slime and vime", "## TRL", "## verl", "## SkyRL", "## The seed engine API"])
def test_each_trainer_section_of_the_page_says_how_failures_are_masked(section):
    page = (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
    text = " ".join(page.split(section, 1)[1].split("\n## ")[0].split())
    assert "infrastructure" in text or "server down" in text, section
