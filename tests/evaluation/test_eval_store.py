"""The results directory's episode log: append + fsync, a torn last line ignored and cut off."""

from __future__ import annotations

import pytest

from agent_gym.evaluation import AppendLog, EpisodeStore, read_records, tasks_hash


def _record(i: int) -> dict:
    return {"key": ["E", i, 0], "scored": True, "success": i % 2 == 0, "res_reward": 1.0, "trajectory": {"x": i}}


def test_records_round_trip_in_order(tmp_path):
    with AppendLog(tmp_path / "episodes.jsonl") as log:
        for i in range(5):
            log.append(_record(i))
    records, torn = read_records(tmp_path / "episodes.jsonl")
    assert records == [_record(i) for i in range(5)] and torn == 0


@pytest.mark.parametrize("cut", [1, 10, -1])
def test_a_torn_last_line_is_ignored_then_cut_off_before_appending(tmp_path, cut):
    path = tmp_path / "episodes.jsonl"
    with AppendLog(path) as log:
        for i in range(3):
            log.append(_record(i))
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut > 0 else data[:-1])  # killed mid-line (even just before the newline)
    records, torn = read_records(path)
    assert torn == 1 and len(records) == (0 if cut > 0 else 2)
    with AppendLog(path) as log:
        assert log.truncated > 0
        log.append(_record(9))
    records, torn = read_records(path)
    assert torn == 0 and records[-1] == _record(9)


def test_a_corrupt_complete_line_raises(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(b'{"key": ["E", 0, 0]}\nnot json\n{"key": ["E", 1, 0]}\n')
    with pytest.raises(ValueError, match="episodes.jsonl:2"):
        read_records(path)


def test_the_store_keeps_the_first_scored_record_of_a_key(tmp_path):
    store = EpisodeStore(tmp_path)
    with store.open_append() as log:
        log.append({"key": ["E", 0, 0], "scored": False})
        log.append({"key": ["E", 0, 0], "scored": True, "n": 1})
        log.append({"key": ["E", 0, 0], "scored": True, "n": 2})
    assert [r["n"] for r in store.iter_scored()] == [1]


def test_json_files_are_written_whole(tmp_path):
    store = EpisodeStore(tmp_path / "run")
    store.write_json("config.json", {"b": 1, "a": [1, 2]})
    assert store.read_json("config.json") == {"a": [1, 2], "b": 1} and store.exists()
    assert not list(store.root.glob("*.tmp"))


def test_the_data_hash_depends_on_content_not_key_order():
    assert tasks_hash([{"id": "a", "q": 1}]) == tasks_hash([{"q": 1, "id": "a"}])
    assert tasks_hash([{"id": "a", "q": 1}]) != tasks_hash([{"id": "a", "q": 2}])
