"""The report counts memory summaries and failed summary calls from the steps' ``info["memory"]``."""

from __future__ import annotations

import pytest

from agent_gym.export import write_jsonl, write_parquet
from agent_gym.report.file_summary import FileSummary
from agent_gym.report.load import load_file, stats_from_trajectories
from agent_gym.report.summary import Report
from agent_gym.types import Step
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder


def _episode(counters):
    builder = TrajectoryBuilder(f"r{len(counters)}", task={"id": "t"})
    for k, (summaries, failed) in enumerate(counters):
        builder.assembler.add_turn(k, [1, 2], [3], [-0.5])
        builder.steps.append(Step(reward=0.0, done=k == len(counters) - 1, info={
            "memory": {"summaries": summaries, "failed_summaries": failed, "summarized": False}}))
    return builder.build("ENV_DONE", conversation=[])


@pytest.mark.parametrize("source", ["batch", "jsonl", "parquet"])
def test_summary_counters_are_read_from_the_last_step(source, tmp_path):
    episodes = [_episode([(0, 1), (1, 1), (1, 2)]), _episode([(0, 0)])]
    if source == "batch":
        summary = FileSummary("batch", stats_from_trajectories(episodes, "batch"))
    else:
        path = tmp_path / f"episodes.{source}"
        (write_jsonl if source == "jsonl" else write_parquet)(episodes, path)
        summary = FileSummary(source, load_file(path).episodes)
    assert [(e.summaries, e.failed_summaries) for e in summary.episodes] == [(1, 2), (0, 0)]
    rows = dict((row[0], row[1]) for row in Report([summary]).error_rows()[1])
    assert rows["memory summaries"] == "1" and rows["failed summary calls"] == "2"
