import re
import sys

import gymnasium as gym
import orjson
import pytest
from report_fakes import make_batch

from agent_gym.cli.rollout import summarize
from agent_gym.errors import MissingExtraError, ReportInputError
from agent_gym.export import read_trajectories, write_jsonl, write_parquet
from agent_gym.report import Report, load_report

CLI_KEYS = ("episodes", "mean_reward", "success_rate", "mean_steps", "tokens_sampled", "env_time", "llm_time",
            "statuses")


def _assert_cli_figures(report_figures, trajectories):
    expected = summarize(trajectories, 1.0)
    for key in CLI_KEYS:
        if isinstance(expected[key], float):
            assert report_figures[key] == pytest.approx(expected[key], rel=1e-12, abs=1e-12), key
        else:
            assert report_figures[key] == expected[key], key


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_figures_equal_the_cli_summary_of_the_same_file(batch, tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    (write_jsonl if suffix == ".jsonl" else write_parquet)(batch, path)
    report = load_report(path)
    _assert_cli_figures(report.files[0].figures(), read_trajectories(path))
    assert report.files[0].figures()["tokens_sampled"] > 0


def test_multi_segment_episodes_count_every_segment(tmp_path):
    # Episodes whose prompts do not extend each other have several segments: tokens of all count.
    from agent_gym.types import Segment

    trajectories = make_batch(num_tasks=2, samples_per_task=1, kinds=("errors",))
    extra = Segment(prompt_tokens=[1, 2], response_tokens=[3, 4, 5], response_masks=[1, 0, 1],
                    response_logprobs=[0.0, 0.0, 0.0], first_step=1, last_step=1)
    trajectories[0].segments = [*trajectories[0].segments, extra]
    for suffix in (".jsonl", ".parquet"):
        path = tmp_path / f"m{suffix}"
        (write_jsonl if suffix == ".jsonl" else write_parquet)(trajectories, path)
        _assert_cli_figures(load_report(path).files[0].figures(), read_trajectories(path))


def test_in_memory_batch_equals_the_file(batch, tmp_path):
    write_jsonl(batch, tmp_path / "r.jsonl")
    from_file = load_report(tmp_path / "r.jsonl").files[0]
    in_memory = Report.from_trajectories(batch).files[0]
    assert from_file.figures() == in_memory.figures()
    assert from_file.error_kinds() == in_memory.error_kinds()


def test_rows_by_family_with_pass_at_k(batch):
    report = Report.from_trajectories(batch)
    assert report.by == "family"  # the ToolUse tasks have one
    rows = report.files[0].rows(report.by)
    assert sum(r.episodes for r in rows) == len(batch)
    for row in rows:
        assert row.k == 2
        episodes = [t for t in batch if t.task["family"] == row.value]
        groups = {}
        for t in episodes:
            groups.setdefault(t.group_id, []).append(t.metrics["res_reward"] > 0)
        # k = n = 2: a task passes when either sample succeeded
        assert row.pass_at_k == pytest.approx(sum(any(v) for v in groups.values()) / len(groups))
        assert row.pass_at_1 == pytest.approx(sum(sum(v) / len(v) for v in groups.values()) / len(groups))
        assert row.ci[0] <= row.success_rate <= row.ci[1]


def test_by_any_task_field(batch):
    report = Report.from_trajectories(batch, by="answer_type")
    values = {r.value for r in report.files[0].rows(report.by)}
    assert values == {t.task["answer_type"] for t in batch}
    assert "answer_type" in report.to_text()
    missing = Report.from_trajectories(batch, by="no_such_field").files[0].rows("no_such_field")
    assert [r.value for r in missing] == ["-"]


def test_error_observations_by_kind_and_failing_tools(batch):
    summary = Report.from_trajectories(batch).files[0]
    kinds = summary.error_kinds()
    errors_episodes = 4  # ((i + s) % 3 == 1) for 6 tasks x 2 samples
    for kind in ("malformed_call", "unknown_tool", "bad_arguments", "tool_error", "no_action"):
        assert kinds[kind] == errors_episodes, kind
    assert kinds["timeout"] == 0
    assert summary.failing_tools()[:2] == [("calculator", 2 * errors_episodes), ("teleport", errors_episodes)]


def test_mixed_envs_split_by_env(tmp_path):
    mixed = make_batch(num_tasks=2, env_id="agent_gym/ToolUse-v0") + make_batch(num_tasks=3, start=5,
                                                                                 env_id="other/Env-v0")
    write_jsonl(mixed, tmp_path / "mixed.jsonl")
    report = load_report(tmp_path / "mixed.jsonl")
    rows = report.files[0].rows(report.by)
    per_env = {}
    for r in rows:
        per_env[r.env] = per_env.get(r.env, 0) + r.episodes
    assert per_env == {"agent_gym/ToolUse-v0": 4, "other/Env-v0": 6}


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_trajectories_record_their_env_id_and_the_report_splits_by_it(tmp_path, suffix):
    from agent_gym import TrajectoryWrapper

    trajectories = []
    for env_id in ("agent_gym/ToolUse-v0", "agent_gym/Conversation-v0"):
        env = TrajectoryWrapper(gym.make(env_id))
        for seed in range(2):
            env.reset(seed=seed)
            while True:
                *_, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                if terminated or truncated:
                    break
            trajectory = info["trajectory"]
            assert trajectory.env_id == env_id and "env_id" not in trajectory.task
            trajectories.append(trajectory)
    path = tmp_path / f"mixed.{suffix}"
    (write_jsonl if suffix == "jsonl" else write_parquet)(trajectories, path)
    report = load_report(path)
    per_env = {}
    for r in report.files[0].rows(report.by):
        per_env[r.env] = per_env.get(r.env, 0) + r.episodes
    assert per_env == {"agent_gym/ToolUse-v0": 2, "agent_gym/Conversation-v0": 2}


def test_several_files_side_by_side(batch, other_batch, tmp_path):
    write_jsonl(batch, tmp_path / "before.jsonl")
    write_parquet(other_batch, tmp_path / "after.parquet")
    report = load_report(tmp_path / "before.jsonl", tmp_path / "after.parquet")
    assert [f.label for f in report.files] == ["before.jsonl", "after.parquet"]
    headers, rows = report.overview_rows()
    assert headers == ["", "before.jsonl", "after.parquet"]
    assert rows[0] == ["episodes", str(len(batch)), str(len(other_batch))]
    assert report.files[1].total().k == 3
    _assert_cli_figures(report.files[1].figures(), other_batch)


def test_an_interrupted_jsonl_file_still_reports(batch, tmp_path):
    path = tmp_path / "cut.jsonl"
    write_jsonl(batch, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])  # Ctrl-C in the middle of the last record
    loaded = load_report(path).files[0]
    assert loaded.skipped_lines == 1
    assert len(loaded.episodes) == len(batch) - 1
    _assert_cli_figures(loaded.figures(), batch[:-1])
    assert re.search(r"skipped lines\s+1", load_report(path).to_text())


def test_same_file_names_in_different_folders_get_their_paths(batch, tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_jsonl(batch[:2], tmp_path / name / "r.jsonl")
    report = load_report(tmp_path / "a" / "r.jsonl", tmp_path / "b" / "r.jsonl")
    assert len({f.label for f in report.files}) == 2


# ------------------------------------------------------------------ bad input
def test_bad_inputs_raise_errors_naming_the_file(batch, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    not_traj = tmp_path / "other.jsonl"
    not_traj.write_text('{"question": "hi", "answer": 3}\n')
    not_json = tmp_path / "text.jsonl"
    not_json.write_text("hello\nworld\n")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not a parquet file at all")
    cases = [
        (empty, "holds no trajectories"),
        (not_traj, "expected a trajectory record"),
        (not_json, "invalid JSON"),
        (garbage, "expected a Parquet trajectory file"),
        (tmp_path / "missing.jsonl", "no such file"),
        (tmp_path / "r.csv", ".jsonl or .parquet"),
    ]
    for path, message in cases:
        with pytest.raises(ReportInputError, match=re.escape(message)) as info:
            load_report(path)
        assert str(path) in str(info.value)


def test_a_file_from_a_newer_format_version_is_refused(batch, tmp_path):
    record = orjson.loads(orjson.dumps(batch[0].to_dict()))
    versioned = tmp_path / "v2.jsonl"
    versioned.write_bytes(orjson.dumps({**record, "format_version": 2}) + b"\n")
    with pytest.raises(ReportInputError, match="format version 2") as info:
        load_report(versioned)
    assert str(versioned) in str(info.value)
    new_field = tmp_path / "new.jsonl"
    new_field.write_bytes(orjson.dumps({**record, "reward_model": "rm-2"}) + b"\n")
    with pytest.raises(ReportInputError, match="newer agent_gym") as info:
        load_report(new_field)
    assert f"{new_field}:1" in str(info.value)


def test_a_parquet_file_with_unknown_columns_is_refused(batch, tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "r.parquet"
    write_parquet(batch, path)
    table = pq.read_table(path)
    table = table.append_column("reward_model", table.column("status"))
    pq.write_table(table, tmp_path / "new.parquet")
    with pytest.raises(ReportInputError, match="newer agent_gym"):
        load_report(tmp_path / "new.parquet")


# ------------------------------------------------------------------ HTML and plots
def test_html_is_self_contained(batch, other_batch, tmp_path):
    write_jsonl(batch, tmp_path / "a.jsonl")
    write_jsonl(other_batch, tmp_path / "b.jsonl")
    path = load_report(tmp_path / "a.jsonl", tmp_path / "b.jsonl").write_html(tmp_path / "report.html", dpi=40)
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    links = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    assert links and all(link.startswith("data:image/png;base64,") for link in links)
    assert not re.search(r"https?://", text)
    assert "a.jsonl" in text and "b.jsonl" in text and "calculator" in text


def test_plots_return_figures_with_one_panel_per_file(batch, other_batch):
    from matplotlib.figure import Figure

    from agent_gym.report import plot_distributions, plot_rewards, plot_time_split, plot_tool_use

    report = Report.from_trajectories({"before": batch, "after": other_batch})
    fig = plot_distributions(report, ("reward", "steps", "prompt_tokens_per_turn"))
    assert isinstance(fig, Figure) and len(fig.axes) == 3 * 2
    assert len(plot_rewards(batch).axes) == 1  # a plain list of trajectories is one batch
    assert len(plot_tool_use(report).axes) == 2 * 3
    assert isinstance(plot_time_split(report), Figure)
    with pytest.raises(ValueError, match="metrics"):
        plot_distributions(report, ("nope",))


def test_missing_matplotlib_names_the_extra_and_tables_still_work(batch, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    from agent_gym.report import plot_rewards

    report = Report.from_trajectories(batch)
    assert "mean reward" in report.to_text()
    with pytest.raises(MissingExtraError, match=re.escape("agent-gym[report]")) as info:
        plot_rewards(report)
    assert info.value.extra == "report" and info.value.module == "matplotlib"
    with pytest.raises(MissingExtraError, match="report"):
        report.to_html()
