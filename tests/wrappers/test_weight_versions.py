"""Weight versions: per sampled id in the segments, the episode's oldest and newest, and in each trainer's fields."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent_gym.errors import TrajectoryError
from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.integrations.contract import training_segments
from agent_gym.integrations.slime import episode_samples
from agent_gym.integrations.verl import agent_loop_fields
from agent_gym.types import PolicyOutput, Segment, Step
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder


def _episode(versions_per_turn):
    """Three turns of one segment; each turn's versions given (None: the policy reported none)."""
    builder = TrajectoryBuilder("ep-1", task={"id": "t"}, group_id="g")
    prompt = [1, 2]
    for step, versions in enumerate(versions_per_turn):
        sampled = [10 + step * 3 + i for i in range(3)]
        builder.add_output(step, PolicyOutput(text="x", prompt_token_ids=list(prompt), token_ids=sampled,
                                              logprobs=[-0.5] * 3, weight_versions=versions))
        builder.steps.append(Step(reward=0.5))
        prompt = prompt + sampled + [99]  # an observation id between turns
    builder.end()
    return builder.build("ENV_DONE", conversation=[])


def test_every_sampled_id_keeps_its_version_and_environment_ids_are_minus_one():
    trajectory = _episode([[0, 0, 0], [0, 1, 1], [2, 2, 2]])  # the second turn was resumed on new weights
    (segment,) = trajectory.segments
    assert segment.response_masks.tolist() == [1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1]
    assert segment.weight_versions.tolist() == [0, 0, 0, -1, 0, 1, 1, -1, 2, 2, 2]
    assert (trajectory.weight_version_start, trajectory.weight_version_end) == (0, 2)
    assert segment.version_runs() == [0, 0, 1, 2]  # one per turn, the resumed turn split at the update


def test_a_policy_without_versions_leaves_minus_one():
    trajectory = _episode([None, None, None])
    assert set(trajectory.segments[0].weight_versions.tolist()) == {-1}
    assert (trajectory.weight_version_start, trajectory.weight_version_end) == (-1, -1)
    assert to_slime_samples([trajectory])[0]["weight_versions"] == []


def test_versions_are_checked():
    with pytest.raises(ValueError, match="weight_versions: expected 2 values"):
        PolicyOutput(text="x", token_ids=[1, 2], weight_versions=[0])
    with pytest.raises(TrajectoryError, match="weight_versions: expected 2 values"):
        Segment([1], [2, 3], [1, 1], [0.0, 0.0], weight_versions=[0])
    assert Segment([1], [2, 3], [1, 0], [0.0, 0.0]).weight_versions.tolist() == [-1, -1]  # older records load
    old = Segment([1], [2], [1], [0.0]).to_dict()
    del old["weight_versions"]
    assert Segment.from_dict(old).weight_versions.tolist() == [-1]


def test_files_keep_the_versions(tmp_path):
    trajectory = _episode([[3, 3, 3], [3, 4, 4], [4, 4, 4]])
    for back in (read_jsonl(write_jsonl([trajectory], tmp_path / "t.jsonl")),
                 read_parquet(write_parquet([trajectory], tmp_path / "t.parquet"))):
        assert back[0].segments[0].weight_versions.tolist() == trajectory.segments[0].weight_versions.tolist()
        assert (back[0].weight_version_start, back[0].weight_version_end) == (3, 4)


def test_trainer_fields_carry_the_versions():
    trajectory = _episode([[5, 5, 5], [5, 6, 6], [7, 7, 7]])
    (segment,) = training_segments(trajectory)
    assert (segment.weight_version_start, segment.weight_version_end) == (5, 7)
    assert segment.version_runs == [5, 5, 6, 7]
    extra = agent_loop_fields(trajectory, prompt_length=16, response_length=32)["output"]["extra_fields"]
    assert (extra["param_version_start"], extra["param_version_end"]) == (5, 7)  # verl's fully-async fields
    sample = SimpleNamespace(tokens=[], response_length=0, loss_mask=None, rollout_log_probs=None, status=None,
                             reward=None, metadata={}, weight_versions=[], index=0, group_index=0)
    filled = episode_samples(sample, trajectory, env_id="e")
    assert filled.weight_versions == ["5", "5", "6", "7"]  # slime's Sample.weight_versions
    assert to_slime_samples([trajectory])[0]["weight_versions"] == ["5", "5", "6", "7"]
