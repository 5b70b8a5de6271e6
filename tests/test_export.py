"""JSONL / Parquet round trips, incremental writing and slime samples on hand-made records."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from agent_gym.export import (
    TrajectoryWriter,
    read_jsonl,
    read_parquet,
    read_trajectories,
    to_slime_samples,
    write_jsonl,
    write_parquet,
)
from agent_gym.types import Segment, Step, StepTrajectory, Trajectory


def _trajectory(i: int, segments: int = 2, status: str = "ENV_DONE") -> StepTrajectory:
    segs = [
        Segment([1, 2, 3 + k], [4, 5, 6, 7], [1, 1, 0, 1], [-0.5, -0.25, 0.0, -1.123456789], first_step=k, last_step=k)
        for k in range(segments)
    ]
    first = segs[0] if segs else None
    return StepTrajectory(
        prompt_tokens=first.prompt_tokens if first else [],
        response_tokens=first.response_tokens if first else [],
        response_masks=first.response_masks if first else [],
        response_logprobs=first.response_logprobs if first else [],
        idx=i,
        trajectory_reward=1 if i % 2 else 0.3,
        chat_completions=[{"role": "user", "content": "héllo \n \"quoted\""}],
        metrics={"steps": 2, "toolcall_reward": 0.1, "res_reward": 1.0, "env_time": 0.25},
        rollout_id=f"r{i}",
        group_id=f"g{i // 2}",
        status=status,
        task={"id": i, "question": "q", "ground_truth": ["a", 1], "nested": {"x": (1, 2)}},
        steps=[
            Step(chat_completions=[{"role": "user", "content": "x"}], thought="t", action='{"name": "f"}',
                 observation="q", model_response="m", info={"tool_calls": [{"name": "f"}], "n": 1.5},
                 reward=0.1, done=False, mc_return=1.1),
            Step(model_response="<answer>a</answer>", reward=1.0, done=True, mc_return=1.0),
        ],
        segments=segs,
    )


RECORDS = [_trajectory(0), _trajectory(1, segments=1, status="POLICY_ERROR"), _trajectory(2, segments=0)]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_is_exact(tmp_path, suffix):
    records = [*RECORDS, Trajectory(prompt_tokens=[1], response_tokens=[2], response_masks=[1])]
    path = tmp_path / f"t{suffix}"
    (write_jsonl if suffix == ".jsonl" else write_parquet)(records, path)
    back = read_trajectories(path)
    assert back == records
    assert [type(r) for r in back] == [type(r) for r in records]
    assert back[0].segments[1].response_logprobs.tolist() == records[0].segments[1].response_logprobs.tolist()
    assert isinstance(back[1].trajectory_reward, int)


def test_parquet_token_columns_are_native_lists(tmp_path):
    write_parquet(RECORDS, tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.column("response_masks").to_pylist()[0] == [1, 1, 0, 1]
    import pyarrow as pa

    field_type = table.schema.field("prompt_tokens").type
    assert pa.types.is_list(field_type) and field_type.value_type == pa.int64()


def test_jsonl_writer_flushes_each_record_and_tolerates_a_cut_last_line(tmp_path):
    path = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(RECORDS[0])
    assert read_jsonl(path) == RECORDS[:1]  # readable while the writer is open
    writer.write(RECORDS[1])
    writer.close()
    with path.open("a") as fh:  # a hard kill in the middle of a record
        fh.write(json.dumps(RECORDS[2].to_dict())[:50])
    assert read_jsonl(path) == RECORDS[:2]


def test_jsonl_bad_line_in_the_middle_raises(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json}\n" + json.dumps(RECORDS[0].to_dict()) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_jsonl(path)


def test_parquet_writer_closed_by_an_interrupt_leaves_a_valid_file(tmp_path):
    path = tmp_path / "run.parquet"
    with pytest.raises(KeyboardInterrupt):
        with TrajectoryWriter(path, row_group_size=2) as writer:
            for record in RECORDS:
                writer.write(record)
            raise KeyboardInterrupt
    assert read_parquet(path) == RECORDS
    assert pq.ParquetFile(path).num_row_groups == 2


def test_empty_parquet_file_is_valid(tmp_path):
    TrajectoryWriter(tmp_path / "e.parquet").close()
    assert read_parquet(tmp_path / "e.parquet") == []


@pytest.mark.parametrize(
    "kwargs, error",
    [({"format": "csv"}, ValueError), ({"row_group_size": 0}, ValueError)],
)
def test_writer_rejects_bad_arguments(tmp_path, kwargs, error):
    with pytest.raises(error):
        TrajectoryWriter(tmp_path / "x.jsonl", **kwargs)


def test_writer_rejects_unknown_suffix_and_append_parquet(tmp_path):
    with pytest.raises(ValueError, match=".jsonl or .parquet"):
        TrajectoryWriter(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="append"):
        TrajectoryWriter(tmp_path / "x.parquet", append=True)
    with pytest.raises(TypeError, match="expected Trajectory"):
        write_jsonl([{"not": "a trajectory"}], tmp_path / "y.jsonl")


def test_slime_samples_one_per_segment_with_shared_rollout_id():
    samples = to_slime_samples(RECORDS)
    assert len(samples) == 3  # 2 + 1 segments; the record without segments falls back to its top-level tensors
    first, second = samples[0], samples[1]
    assert first["rollout_id"] == second["rollout_id"] == "r0"
    assert first["tokens"] == [1, 2, 3, 4, 5, 6, 7]
    assert first["response_length"] == len(first["loss_mask"]) == len(first["rollout_log_probs"]) == 4
    assert first["loss_mask"] == [1, 1, 0, 1]
    assert first["status"] == "completed" and not first["remove_sample"] and first["reward"] == 0.3
    # r1 ended POLICY_ERROR (an infrastructure failure): masked and removed, no reward, its own kept for logging
    failed = samples[2]
    assert failed["status"] == "failed" and failed["remove_sample"] and set(failed["loss_mask"]) == {0}
    assert failed["reward"] == 0.0 and set(failed["rollout_log_probs"]) == {0.0}
    assert failed["metadata"]["masked"] and failed["metadata"]["episode_reward"] == 1
    assert first["metadata"]["segment_index"] == 0 and second["metadata"]["segment_index"] == 1
    assert first["metadata"]["num_segments"] == 2
    # advantage groups are the task (r0 and r1 share group_id g0 but not their task)
    assert first["group_index"] == second["group_index"] != samples[2]["group_index"]
    assert first["metadata"]["group_key"] == "0" and samples[2]["metadata"]["group_key"] == "1"
    assert first["label"] == ["a", 1]
    assert [s["index"] for s in samples] == [0, 1, 2]


def test_slime_samples_skip_empty_segments_unless_asked():
    empty = _trajectory(5, segments=0)
    empty.response_tokens = empty.response_tokens[:0]
    empty.response_masks = empty.response_masks[:0]
    empty.response_logprobs = None
    assert to_slime_samples([empty]) == []
    [sample] = to_slime_samples([empty], include_empty=True)
    assert sample["response_length"] == 0 and sample["rollout_log_probs"] == []


def test_slime_samples_give_an_empty_episode_one_masked_pad_id_and_follow_the_reward_assignment():
    empty = _trajectory(5, segments=0, status="POLICY_ERROR")
    empty.response_tokens = empty.response_tokens[:0]
    empty.response_masks = empty.response_masks[:0]
    empty.prompt_tokens = empty.prompt_tokens[:0]
    empty.response_logprobs = None
    [sample] = to_slime_samples([empty], pad_token_id=9)
    assert sample["tokens"] == [9, 9] and sample["response_length"] == 1 and sample["loss_mask"] == [0]
    assert sample["remove_sample"] and sample["status"] == "failed"
    split = to_slime_samples([_trajectory(1, segments=2)], reward_assignment="split")
    assert [s["reward"] for s in split] == [0.5, 0.5] and split[0]["metadata"]["reward_assignment"] == "split"
    with pytest.raises(ValueError, match="reward_assignment"):
        to_slime_samples([_trajectory(1)], reward_assignment="half")
