"""Read trajectory files into light per-episode figures, without building trajectories.

A report needs a few numbers per episode (status, reward, steps, token counts,
tool calls and their errors), not the token tensors. :func:`load_file` reads them
straight from the export formats of :mod:`agent_gym.export`:

* JSONL: each line is decoded with ``orjson`` and its fields are read in place.
  A last line cut short by an interrupted writer is skipped and counted.
* Parquet: scalar columns are read column-wise with pyarrow (rewards, metrics,
  statuses, token-mask sums); only the JSON ``steps`` and ``task`` columns are
  decoded row by row.

Every problem with an input names the file (and the line, for JSONL): a file
that is not a trajectory file, an empty one, or one written by a newer version
of the format.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agent_gym.errors import ReportInputError
from agent_gym.report.errors import step_errors

__all__ = [
    "FORMAT_VERSION",
    "EpisodeStats",
    "LoadedFile",
    "episode_stats",
    "load_file",
    "stats_from_trajectories",
]

FORMAT_VERSION = 1
"""Newest trajectory format version this reader understands (records without a version are version 1)."""

_REQUIRED = ("trajectory_reward", "metrics", "status")
_KIND_KEY = "_kind"
_VERSION_KEYS = ("format_version", "_format_version")


@dataclass
class EpisodeStats:
    """The figures of one episode a report uses.

    Attributes:
        source: Label of the file (or batch) the episode came from.
        env: Env id recorded with the episode (its ``env_id``, else ``task["env_id"]`` or ``task["env"]``), or ``"-"``.
        task: The episode's task dict (None if unknown).
        group: ``group_id`` (siblings of one task share it), else ``rollout_id``.
        status: The episode status ("" when unknown).
        reward: ``trajectory_reward``.
        res_reward: ``metrics["res_reward"]``; the episode succeeded when it is > 0.
        steps: ``metrics["steps"]``.
        env_time: ``metrics["env_time"]`` in seconds.
        llm_time: ``metrics["llm_time"]`` in seconds.
        reward_time: ``metrics["reward_time"]`` in seconds.
        tokens_sampled: Sampled ids over every segment (sum of the loss masks).
        prompt_tokens_per_turn: Prompt ids of each turn (from the steps' info).
        sampled_tokens_per_turn: Sampled ids of each turn (from the steps' info).
        tool_calls: Tool calls the episode made.
        errors: Error observations by kind (see :data:`agent_gym.report.errors.ERROR_KINDS`).
        failing_tools: Failed calls by tool name.
        role_rewards: The reward of each role with one (``Segment.role_reward``: multi-agent
            episodes; the best of the role's segments, e.g. of several solvers); {} for
            single-agent episodes.
        summaries: Memory summaries written (the steps' ``info["memory"]``; 0 without memory).
        failed_summaries: Memory summary calls that failed (refused by the template, server errors).
        rubric_scores: Each rubric criterion's score (the last step's ``info["rubric"]``; {} when not judged).
        judge_calls: Judge requests spent on the episode; ``judge_cache_hits``: verdicts from the cache.
        judge_failure: The judge's failure kind when the episode ended ``JUDGE_ERROR`` (None otherwise).
    """

    source: str
    env: str = "-"
    task: Any = None
    group: str = ""
    status: str = ""
    reward: float = 0.0
    res_reward: float = 0.0
    steps: int = 0
    env_time: float = 0.0
    llm_time: float = 0.0
    reward_time: float = 0.0
    tokens_sampled: int = 0
    prompt_tokens_per_turn: list[int] = field(default_factory=list)
    sampled_tokens_per_turn: list[int] = field(default_factory=list)
    tool_calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    failing_tools: dict[str, int] = field(default_factory=dict)
    role_rewards: dict[str, float] = field(default_factory=dict)
    summaries: int = 0
    failed_summaries: int = 0
    rubric_scores: dict[str, float] = field(default_factory=dict)
    judge_calls: int = 0
    judge_cache_hits: int = 0
    judge_failure: str | None = None

    @property
    def success(self) -> bool:
        """True when the answer earned a positive ``res_reward`` (the CLI summary's definition)."""
        return self.res_reward > 0


@dataclass
class LoadedFile:
    """The episodes of one file.

    Attributes:
        path: The file read.
        episodes: One :class:`EpisodeStats` per record, in file order.
        skipped_lines: Incomplete last lines skipped (an interrupted JSONL writer), 0 or 1.
    """

    path: Path
    episodes: list[EpisodeStats]
    skipped_lines: int = 0


def _known_fields() -> frozenset[str]:
    from agent_gym.types import StepTrajectory

    return frozenset({f.name for f in dataclasses.fields(StepTrajectory)} | {_KIND_KEY})


def _check_version(where: str, record: Mapping[str, Any]) -> None:
    for key in _VERSION_KEYS:
        version = record.get(key)
        if version is None:
            continue
        if not isinstance(version, int) or isinstance(version, bool):
            raise ReportInputError(f"{where}: expected an int {key}, got {version!r}")
        if version > FORMAT_VERSION:
            raise ReportInputError(
                f"{where}: written in trajectory format version {version}, newer than version {FORMAT_VERSION} "
                "read by this agent_gym; upgrade agent_gym to report on it"
            )


def _check_record(where: str, record: Any, known: frozenset[str]) -> None:
    if not isinstance(record, dict):
        raise ReportInputError(f"{where}: expected a trajectory record (a JSON object), got {type(record).__name__}")
    _check_version(where, record)
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise ReportInputError(
            f"{where}: expected a trajectory record with {list(_REQUIRED)}, got keys {sorted(record)[:8]} "
            f"(missing {missing}); is this a file written by agent_gym.export?"
        )
    unknown = sorted(set(record) - known - set(_VERSION_KEYS))
    if unknown:
        raise ReportInputError(
            f"{where}: unknown trajectory fields {unknown}; the file was written by a newer agent_gym "
            "(upgrade agent_gym to report on it)"
        )
    if not isinstance(record["metrics"], dict):
        raise ReportInputError(f"{where}: expected 'metrics' to be an object, got {type(record['metrics']).__name__}")


def _env_of(record: Mapping[str, Any], task: Any) -> str:
    for value in (record.get("env_id"), *((task.get("env_id"), task.get("env")) if isinstance(task, dict) else ())):
        if isinstance(value, str) and value:
            return value
    return "-"


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportInputError(f"{where}: expected a number for {name}, got {value!r:.60}")
    return float(value)


def _fill_steps(stats: EpisodeStats, steps: Any) -> None:
    """Per-turn token counts, tool calls and error kinds from the steps' info dicts."""
    if not isinstance(steps, list):
        return
    for step in steps:
        info = step.get("info") if isinstance(step, dict) else None
        if not isinstance(info, dict):
            continue
        prompt, sampled = info.get("num_prompt_tokens"), info.get("num_sampled_tokens")
        if isinstance(prompt, int):
            stats.prompt_tokens_per_turn.append(prompt)
        if isinstance(sampled, int):
            stats.sampled_tokens_per_turn.append(sampled)
        calls = info.get("tool_calls")
        if isinstance(calls, list):
            stats.tool_calls += len(calls)
        memory = info.get("memory")
        if isinstance(memory, dict):  # running counters: the latest step holds the episode's
            for name in ("summaries", "failed_summaries"):
                value = memory.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    setattr(stats, name, max(getattr(stats, name), value))
        _fill_rubric(stats, info.get("rubric"))
        for kind, tool in step_errors(info):
            stats.errors[kind] = stats.errors.get(kind, 0) + 1
            if tool is not None:
                stats.failing_tools[tool] = stats.failing_tools.get(tool, 0) + 1


def _fill_rubric(stats: EpisodeStats, rubric: Any) -> None:
    """Criterion scores and judge usage from a step's ``info["rubric"]`` (see :mod:`agent_gym.judges`)."""
    if not isinstance(rubric, dict):
        return
    scores = rubric.get("scores")
    if isinstance(scores, dict):
        stats.rubric_scores = {str(k): float(v) for k, v in scores.items() if isinstance(v, (int, float))}
    usage = rubric.get("judge")
    if isinstance(usage, dict):
        stats.judge_calls = int(usage.get("calls") or 0)
        stats.judge_cache_hits = int(usage.get("cache_hits") or 0)
    failure = rubric.get("failure")
    stats.judge_failure = str(failure.get("kind")) if isinstance(failure, dict) else None


def _mask_sum(value: Any) -> int:
    return int(sum(value)) if isinstance(value, list) else 0


def episode_stats(record: Mapping[str, Any], source: str, *, where: str | None = None) -> EpisodeStats:
    """Read the figures of one trajectory record (the dict ``export`` writes per line).

    Args:
        record: A record from a JSONL line or ``Trajectory.to_dict()``.
        source: Label of the file or batch it belongs to.
        where: Location used in error messages (defaults to ``source``).

    Returns:
        The episode's figures.

    Raises:
        ReportInputError: If a figure has the wrong type.
    """
    where = where or source
    metrics = record["metrics"]
    task = record.get("task")
    segments = record.get("segments") or []
    tokens = _mask_sum(record.get("response_masks"))
    tokens += sum(_mask_sum(s.get("response_masks")) for s in segments[1:] if isinstance(s, dict))
    stats = EpisodeStats(
        source=source,
        env=_env_of(record, task),
        task=task,
        group=str(record.get("group_id") or record.get("rollout_id") or ""),
        status=str(record.get("status") or ""),
        reward=_number(where, "trajectory_reward", record["trajectory_reward"]),
        res_reward=_number(where, "metrics.res_reward", metrics.get("res_reward", 0.0)),
        steps=int(_number(where, "metrics.steps", metrics.get("steps", 0))),
        env_time=_number(where, "metrics.env_time", metrics.get("env_time", 0.0)),
        llm_time=_number(where, "metrics.llm_time", metrics.get("llm_time", 0.0)),
        reward_time=_number(where, "metrics.reward_time", metrics.get("reward_time", 0.0)),
        tokens_sampled=tokens,
    )
    for segment in segments:
        if isinstance(segment, dict) and segment.get("role_reward") is not None:
            role, value = str(segment.get("role") or ""), _number(where, "segments.role_reward", segment["role_reward"])
            stats.role_rewards[role] = max(value, stats.role_rewards.get(role, value))
    _fill_steps(stats, record.get("steps"))
    return stats


# --------------------------------------------------------------------------- JSONL
def _load_jsonl(path: Path, label: str) -> LoadedFile:
    known = _known_fields()
    episodes: list[EpisodeStats] = []
    skipped = 0
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                # Only the last line can lack its newline: the writer was cut off in the middle of it.
                if not line.endswith(b"\n") and episodes:
                    skipped += 1
                    continue
                raise ReportInputError(f"{where}: expected a JSON trajectory record, got invalid JSON ({exc})") \
                    from None
            _check_record(where, record, known)
            episodes.append(episode_stats(record, label, where=where))
    return LoadedFile(path, episodes, skipped)


# --------------------------------------------------------------------------- Parquet
def _per_row(column: Any, chunk_totals: Callable[[Any], Any]) -> Any:
    """Per-row int64 totals of a list column: ``chunk_totals`` of every non-empty chunk, concatenated."""
    import numpy as np

    chunks = column.chunks if hasattr(column, "chunks") else [column]
    out = [chunk_totals(chunk) for chunk in chunks if len(chunk)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _column_sums(column: Any) -> Any:
    """Per-row sums of a ``list<int>`` column, as a numpy array."""
    import numpy as np
    import pyarrow.compute as pc

    def sums(chunk: Any) -> Any:
        values = pc.list_flatten(chunk).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=values, minlength=len(chunk)).astype(np.int64)

    return _per_row(column, sums)


def _later_segment_sums(column: Any) -> Any:
    """Per-row sums of the masks of every segment after the first."""
    import numpy as np
    import pyarrow.compute as pc

    def sums(chunk: Any) -> Any:
        n = len(chunk)
        segments = pc.list_flatten(chunk)
        rows = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False)
        if not len(segments):
            return np.zeros(n, dtype=np.int64)
        # ``offsets`` index the underlying values: re-base them on this chunk's first segment.
        offsets = chunk.offsets.to_numpy(zero_copy_only=False)[:-1]
        position = np.arange(len(rows)) - (offsets[rows] - offsets[0])
        masks = _column_sums(segments.field("response_masks"))
        keep = position >= 1
        return np.bincount(rows[keep], weights=masks[keep], minlength=n).astype(np.int64)

    return _per_row(column, sums)


def _role_rewards(column: Any, n: int, where: str) -> list[dict[str, float]]:
    """Per-row best ``role_reward`` of each role from a ``segments`` column (empty dicts without the fields)."""
    import pyarrow.compute as pc

    out: list[dict[str, float]] = [{} for _ in range(n)]
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    start = 0
    for chunk in chunks:
        segments = pc.list_flatten(chunk)
        kinds = segments.type
        if len(segments) and kinds.get_field_index("role_reward") >= 0 and kinds.get_field_index("role") >= 0:
            rows = pc.list_parent_indices(chunk).to_pylist()
            roles = segments.field("role").to_pylist()
            values = segments.field("role_reward").to_pylist()
            for row, role, value in zip(rows, roles, values, strict=True):
                if value is not None:
                    found = out[start + row]
                    number = _number(f"{where} (row {start + row})", "segments.role_reward", value)
                    key = str(role or "")
                    found[key] = max(number, found.get(key, number))
        start += len(chunk)
    return out


def _parquet_batch(batch: Any, path: Path, label: str, first_row: int, episodes: list[EpisodeStats]) -> None:
    """Append the episodes of one record batch of a Parquet trajectory file."""
    names = set(batch.schema.names)
    n = batch.num_rows
    rewards = batch.column("trajectory_reward").to_pylist()
    statuses = batch.column("status").to_pylist()
    metrics = batch.column("metrics")
    metric = {name: metrics.field(name).to_pylist() for name in
              ("res_reward", "steps", "env_time", "llm_time", "reward_time")
              if metrics.type.get_field_index(name) >= 0}
    groups = batch.column("group_id").to_pylist() if "group_id" in names else [None] * n
    rollouts = batch.column("rollout_id").to_pylist() if "rollout_id" in names else [None] * n
    tokens = _column_sums(batch.column("response_masks")) if "response_masks" in names else [0] * n
    role_rewards: list[dict[str, float]] = [{} for _ in range(n)]
    if "segments" in names:
        tokens = tokens + _later_segment_sums(batch.column("segments"))
        role_rewards = _role_rewards(batch.column("segments"), n, f"{path} from row {first_row}")
    tasks = batch.column("task").to_pylist() if "task" in names else [None] * n
    env_ids = batch.column("env_id").to_pylist() if "env_id" in names else [None] * n
    steps = batch.column("steps").to_pylist()

    def number(values: list[Any] | None, i: int) -> float:
        return float(values[i] or 0.0) if values is not None else 0.0

    for i in range(n):
        where = f"{path} (row {first_row + i})"
        try:
            task_json = tasks[i]
            task = orjson.loads(task_json) if task_json is not None else None
            step_list = orjson.loads(steps[i]) if steps[i] is not None else None
        except orjson.JSONDecodeError as exc:
            raise ReportInputError(f"{where}: expected JSON in the task/steps columns, got invalid JSON ({exc})") \
                from None
        stats = EpisodeStats(
            source=label,
            env=_env_of({"env_id": env_ids[i]}, task),
            task=task,
            group=str(groups[i] or rollouts[i] or ""),
            status=str(statuses[i] or ""),
            reward=_number(where, "trajectory_reward", rewards[i]),
            res_reward=number(metric.get("res_reward"), i),
            steps=int(number(metric.get("steps"), i)),
            env_time=number(metric.get("env_time"), i),
            llm_time=number(metric.get("llm_time"), i),
            reward_time=number(metric.get("reward_time"), i),
            tokens_sampled=int(tokens[i]),
            role_rewards=role_rewards[i],
        )
        _fill_steps(stats, step_list)
        episodes.append(stats)


def _load_parquet(path: Path, label: str) -> LoadedFile:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise ReportInputError(f"{path}: expected a Parquet trajectory file, got an unreadable file ({exc})") from None
    names = set(parquet.schema_arrow.names)
    metadata = parquet.schema_arrow.metadata or {}
    for key in _VERSION_KEYS:
        raw = metadata.get(key.encode())
        if raw is not None:
            try:
                version: Any = int(raw)
            except ValueError:
                version = raw.decode(errors="replace")
            _check_version(str(path), {key: version})
    missing = [k for k in (*_REQUIRED, "steps") if k not in names]
    if missing:
        raise ReportInputError(
            f"{path}: expected a trajectory file with columns {[*_REQUIRED, 'steps']}, got columns "
            f"{sorted(names)[:8]} (missing {missing}); is this a file written by agent_gym.export?"
        )
    known = _known_fields() | {"reward_is_int"}
    unknown = sorted(names - known - set(_VERSION_KEYS))
    if unknown:
        raise ReportInputError(
            f"{path}: unknown trajectory columns {unknown}; the file was written by a newer agent_gym "
            "(upgrade agent_gym to report on it)"
        )
    wanted = [c for c in ("trajectory_reward", "metrics", "status", "group_id", "rollout_id", "env_id",
                          "response_masks", "segments", "task", "steps") if c in names]
    episodes: list[EpisodeStats] = []
    # Row-group-sized batches keep the memory bounded by a batch, not the file.
    for batch in parquet.iter_batches(batch_size=4096, columns=wanted):
        _parquet_batch(batch, path, label, len(episodes), episodes)
    return LoadedFile(path, episodes, 0)


def load_file(path: str | os.PathLike[str], *, label: str | None = None) -> LoadedFile:
    """Read the episodes of a ``.jsonl`` or ``.parquet`` trajectory file.

    Args:
        path: The file.
        label: Name given to its episodes (default: the file name).

    Returns:
        The file's episodes and the number of incomplete lines skipped.

    Raises:
        ReportInputError: If the file is missing, empty, not a trajectory file or
            written by a newer format version; the message names the file.
    """
    path = Path(path)
    label = label or path.name
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ReportInputError(f"{path}: expected a trajectory file ending in .jsonl or .parquet, got {suffix!r}")
    if not path.is_file():
        raise ReportInputError(f"{path}: no such file")
    loaded = _load_parquet(path, label) if suffix == ".parquet" else _load_jsonl(path, label)
    if not loaded.episodes:
        raise ReportInputError(f"{path}: the file holds no trajectories")
    return loaded


def stats_from_trajectories(trajectories: Iterable[Any], label: str) -> list[EpisodeStats]:
    """Figures of in-memory trajectories (from ``collect`` or ``read_trajectories``)."""
    return [episode_stats(t.to_dict(), label, where=f"{label}[{i}]") for i, t in enumerate(trajectories)]
