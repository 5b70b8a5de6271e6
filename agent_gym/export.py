"""Write, read and convert trajectories: JSONL, Parquet and slime-style samples.

JSONL and Parquet files round-trip :class:`~agent_gym.types.StepTrajectory` (and
plain :class:`~agent_gym.types.Trajectory`) records exactly: reading a file gives
records equal to the ones written. Both formats are written incrementally by
:class:`TrajectoryWriter`, so a run that is interrupted leaves a readable file
holding every episode that finished:

* JSONL: one JSON object per line, flushed after every record. A final line cut
  short by a hard kill is skipped (with a warning) by :func:`read_jsonl`.
* Parquet: token columns are native ``list<int64>`` / ``list<float>`` columns a
  trainer can read directly; nested records (steps, task, conversation, sampling)
  and any field without a typed column are JSON strings, so every field of
  ``StepTrajectory`` has a column. Rows are written in row groups; the file footer is written when the
  writer closes, which happens on ``KeyboardInterrupt`` too.

:func:`to_slime_samples` turns trajectories into the dicts a slime/vime custom
generate function returns: one sample per trainable segment, siblings sharing
``rollout_id``, every field of the record carried in the sample or its ``metadata``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from agent_gym.checks import check_int
from agent_gym.integrations.contract import RewardAssignment
from agent_gym.integrations.slime_samples import slime_fields
from agent_gym.segments import split_segments
from agent_gym.types import METRIC_KEYS, StepTrajectory, Trajectory

__all__ = [
    "TrajectoryWriter",
    "iter_jsonl",
    "read_jsonl",
    "read_parquet",
    "read_trajectories",
    "to_slime_samples",
    "write_jsonl",
    "write_parquet",
]

logger = logging.getLogger(__name__)

_KIND_KEY = "_kind"


# --------------------------------------------------------------------------- records
def _record(trajectory: Trajectory) -> dict[str, Any]:
    if not isinstance(trajectory, Trajectory):
        raise TypeError(f"expected Trajectory or StepTrajectory, got {type(trajectory).__name__}")
    data = trajectory.to_dict()
    data[_KIND_KEY] = "StepTrajectory" if isinstance(trajectory, StepTrajectory) else "Trajectory"
    return data


def _from_record(data: dict[str, Any]) -> Trajectory:
    data = dict(data)
    kind = data.pop(_KIND_KEY, None) or ("StepTrajectory" if "steps" in data else "Trajectory")
    cls = StepTrajectory if kind == "StepTrajectory" else Trajectory
    return cls.from_dict(data)


def _check_suffix(path: Path, suffixes: Sequence[str], what: str) -> None:
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"{what}: expected a path ending in {' or '.join(suffixes)}, got {str(path)!r}")


# --------------------------------------------------------------------------- JSONL
def write_jsonl(trajectories: Iterable[Trajectory], path: str | os.PathLike[str], *, append: bool = False) -> Path:
    """Write trajectories to a JSON Lines file, one record per line.

    Args:
        trajectories: The records to write.
        path: Destination file.
        append: Add to an existing file instead of replacing it.

    Returns:
        The path written.
    """
    path = Path(path)
    with TrajectoryWriter(path, format="jsonl", append=append) as writer:
        writer.write_many(trajectories)
    return path


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the records of a JSON Lines file one at a time.

    A last line without its newline that does not parse (a run killed while
    writing) is skipped with a warning; any other malformed line raises.

    Args:
        path: The file to read.

    Yields:
        ``StepTrajectory`` (or ``Trajectory``) records in file order.

    Raises:
        ValueError: If a complete line is not a valid record.
    """
    path = Path(path)
    with path.open("r", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                # Only the file's last line can lack its newline: the writer was cut off mid-record.
                if not line.endswith("\n"):
                    logger.warning("%s: skipping an incomplete last line (the writer was interrupted)", path)
                    return
                raise ValueError(f"{path}:{number}: expected a JSON object, got invalid JSON ({exc})") from exc
            yield _from_record(data)


def read_jsonl(path: str | os.PathLike[str]) -> list[StepTrajectory]:
    """Read every record of a JSON Lines file written by :func:`write_jsonl`.

    Args:
        path: The file to read.

    Returns:
        The records, equal to those written.
    """
    return list(iter_jsonl(path))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Parquet
def _pyarrow() -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def _native_columns() -> dict[str, Any]:
    """Fields stored as typed Parquet columns; every other field is a JSON string column."""
    pa, _ = _pyarrow()
    metric_fields = [pa.field(k, pa.int64() if k == "steps" else pa.float64()) for k in METRIC_KEYS]
    segment = pa.struct(
        [
            pa.field("prompt_tokens", pa.list_(pa.int64())),
            pa.field("response_tokens", pa.list_(pa.int64())),
            pa.field("response_masks", pa.list_(pa.int64())),
            pa.field("response_logprobs", pa.list_(pa.float32())),
            pa.field("first_step", pa.int64()),
            pa.field("last_step", pa.int64()),
            pa.field("weight_versions", pa.list_(pa.int64())),
            pa.field("role", pa.string()),
            pa.field("parent_segment", pa.int64()),
            pa.field("spawn_step", pa.int64()),
            pa.field("role_reward", pa.float64()),
            pa.field("agent_index", pa.int64()),
        ]
    )
    return {
        "idx": pa.int64(),
        "rollout_id": pa.string(),
        "group_id": pa.string(),
        "status": pa.string(),
        "retokenized": pa.bool_(),
        "env_id": pa.string(),
        "trajectory_reward": pa.float64(),
        "prompt_tokens": pa.list_(pa.int64()),
        "response_tokens": pa.list_(pa.int64()),
        "response_masks": pa.list_(pa.int64()),
        "response_logprobs": pa.list_(pa.float32()),
        "metrics": pa.struct(metric_fields),
        "segments": pa.list_(segment),
        "weight_version_start": pa.int64(),
        "weight_version_end": pa.int64(),
    }


@functools.cache
def _columns(record_type: type) -> tuple[Any, tuple[str, ...]]:
    """The Parquet schema of ``record_type`` and the fields it stores as JSON strings.

    One column per field, plus the record kind and the reward's type; nested records and any
    field without a typed column are JSON strings.
    """
    pa, _ = _pyarrow()
    native = _native_columns()
    names = [f.name for f in dataclasses.fields(record_type)]
    columns = [pa.field(_KIND_KEY, pa.string()), pa.field("reward_is_int", pa.bool_())]
    columns += [pa.field(name, native.get(name, pa.string())) for name in names]
    return pa.schema(columns), tuple(name for name in names if name not in native)


def _schema() -> Any:
    return _columns(StepTrajectory)[0]


def _json_columns() -> tuple[str, ...]:
    return _columns(StepTrajectory)[1]


def _to_row(trajectory: Trajectory) -> dict[str, Any]:
    data = _record(trajectory)
    json_columns = _json_columns()
    row: dict[str, Any] = {k: data.get(k) for k in _schema().names if k not in json_columns}
    reward = data["trajectory_reward"]
    row["trajectory_reward"] = float(reward)
    row["reward_is_int"] = isinstance(reward, int)
    row["metrics"] = {k: data["metrics"][k] for k in METRIC_KEYS}
    for name in json_columns:
        row[name] = json.dumps(data[name]) if name in data else None
    return row


def _from_row(row: dict[str, Any]) -> Trajectory:
    data = dict(row)
    if data.pop("reward_is_int", False):
        data["trajectory_reward"] = int(data["trajectory_reward"])
    for name in _json_columns():
        value = data.pop(name, None)  # files written before a column existed lack it
        if value is not None:
            data[name] = json.loads(value)
    for name in ("segments", "weight_version_start", "weight_version_end"):
        if data.get(name) is None:  # a plain Trajectory's row, or a file written before the column existed
            data.pop(name, None)
    if data[_KIND_KEY] != "StepTrajectory":
        data.pop("segments", None)
    return _from_record(data)


def write_parquet(
    trajectories: Iterable[Trajectory], path: str | os.PathLike[str], *, row_group_size: int = 256
) -> Path:
    """Write trajectories to a Parquet file.

    Args:
        trajectories: The records to write.
        path: Destination file (replaced if it exists).
        row_group_size: Records per row group.

    Returns:
        The path written.
    """
    path = Path(path)
    with TrajectoryWriter(path, format="parquet", row_group_size=row_group_size) as writer:
        writer.write_many(trajectories)
    return path


def read_parquet(path: str | os.PathLike[str]) -> list[StepTrajectory]:
    """Read every record of a Parquet file written by :func:`write_parquet`.

    Args:
        path: The file to read.

    Returns:
        The records, equal to those written.
    """
    _, pq = _pyarrow()
    table = pq.read_table(Path(path))
    return [_from_row(row) for row in table.to_pylist()]  # type: ignore[misc]


def read_trajectories(path: str | os.PathLike[str]) -> list[StepTrajectory]:
    """Read a ``.jsonl`` or ``.parquet`` file, choosing the format by suffix.

    Args:
        path: The file to read.

    Returns:
        The records in file order.
    """
    path = Path(path)
    _check_suffix(path, (".jsonl", ".parquet"), "read_trajectories")
    return read_parquet(path) if path.suffix.lower() == ".parquet" else read_jsonl(path)


# --------------------------------------------------------------------------- writer
class TrajectoryWriter:
    """Incremental writer of trajectories; the format follows the file suffix.

    JSONL records are flushed to disk one by one. Parquet rows are buffered and
    written as a row group every ``row_group_size`` records; closing the writer
    (also on an exception such as ``KeyboardInterrupt`` when used as a context
    manager) writes the remaining rows and the footer, so the file is valid.

    Args:
        path: Destination, ending in ``.jsonl`` or ``.parquet``.
        format: ``"jsonl"`` or ``"parquet"``; inferred from the suffix when None.
        append: JSONL only: append to an existing file.
        row_group_size: Parquet only: records per row group.

    Example:
        >>> with TrajectoryWriter("out.jsonl") as writer:  # doctest: +SKIP
        ...     for trajectory in trajectories:
        ...         writer.write(trajectory)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        append: bool = False,
        row_group_size: int = 16,
    ) -> None:
        self.path = Path(path)
        if format is None:
            _check_suffix(self.path, (".jsonl", ".parquet"), "TrajectoryWriter")
            format = self.path.suffix.lower().lstrip(".")
        if format not in ("jsonl", "parquet"):
            raise ValueError(f"TrajectoryWriter.format: expected 'jsonl' or 'parquet', got {format!r}")
        check_int("TrajectoryWriter.row_group_size", row_group_size, low=1)
        if append and format == "parquet":
            raise ValueError("TrajectoryWriter.append: expected False for parquet (files cannot be appended to)")
        self.format = format
        self.row_group_size = row_group_size
        self.count = 0
        self._buffer: list[dict[str, Any]] = []
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if format == "jsonl":
            self._fh: Any = self.path.open("a" if append else "w", encoding="utf-8")
            self._pq_writer: Any = None
        else:
            pa, pq = _pyarrow()
            self._fh = None
            self._pq_writer = pq.ParquetWriter(str(self.path), _schema())
            # A file with zero row groups is still valid once closed.

    def write(self, trajectory: Trajectory) -> None:
        """Write one record (flushed now for JSONL, per row group for Parquet)."""
        if self._closed:
            raise ValueError("TrajectoryWriter.write: the writer is closed")
        if self.format == "jsonl":
            self._fh.write(json.dumps(_record(trajectory), ensure_ascii=False) + "\n")
            self._fh.flush()
        else:
            self._buffer.append(_to_row(trajectory))
            if len(self._buffer) >= self.row_group_size:
                self.flush()
        self.count += 1

    def write_many(self, trajectories: Iterable[Trajectory]) -> None:
        """Write several records in order."""
        for trajectory in trajectories:
            self.write(trajectory)

    def flush(self) -> None:
        """Push buffered records to the file (a new row group for Parquet)."""
        if self._closed:
            return
        if self.format == "jsonl":
            self._fh.flush()
            return
        if self._buffer:
            pa, _ = _pyarrow()
            table = pa.Table.from_pylist(self._buffer, schema=_schema())
            self._pq_writer.write_table(table)
            self._buffer = []

    def close(self) -> None:
        """Flush and close the file; safe to call twice."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._fh is not None:
                self._fh.close()
            if self._pq_writer is not None:
                self._pq_writer.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# --------------------------------------------------------------------------- slime
_SLIME_NATIVE = frozenset(
    {
        "prompt_tokens",
        "response_tokens",
        "response_masks",
        "response_logprobs",
        "segments",
        "trajectory_reward",
        "rollout_id",
        "status",
    }
)
"""Trajectory fields a slime sample carries in its own keys (``tokens``, ``loss_mask``,
``rollout_log_probs``, ``reward``, ``rollout_id``, ``metadata["episode_status"]``, the
segment's position); every other field goes to ``metadata`` under its own name."""


def to_slime_samples(
    trajectories: Iterable[Trajectory],
    *,
    include_empty: bool = False,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    pad_token_id: int | None = None,
) -> list[dict[str, Any]]:
    """Turn trajectories into slime/vime ``Sample``-style dicts, one per trainable segment.

    The samples follow the training contract and are built by the same code as the live
    adapter's (:func:`~agent_gym.integrations.slime_samples.slime_fields`): ``tokens`` (prompt +
    response ids), ``response_length``, ``loss_mask`` (one entry per response id: 1 on sampled
    ids), ``rollout_log_probs`` (0 where masked), ``reward`` (under ``reward_assignment``),
    ``status`` (slime's ``completed`` / ``truncated`` / ``aborted`` / ``failed``, see
    :data:`SLIME_STATUS`), ``remove_sample``, ``weight_versions`` (slime's own field: the
    version of each run of ids sampled under one version, as strings), ``label`` (the task's
    ``ground_truth``), ``rollout_id`` (the episode's id, shared by its segments),
    ``group_index`` (one per advantage group: the task, and the role of a segment that has one,
    in order of appearance), ``index`` and ``metadata``: the keys of
    :data:`~agent_gym.integrations.slime_samples.SAMPLE_METADATA_KEYS` and every other field of
    the segment's record (:func:`~agent_gym.segments.split_segments`) in its JSON form under its
    own name (``idx``, ``group_id``, ``env_id``, ``retokenized``, ``sampling``, ``metrics``,
    ``task``, ``chat_completions``, the ``steps`` the segment covers, ``weight_version_start`` /
    ``weight_version_end``).

    An episode that failed for infrastructure reasons (``ENV_ERROR``, ``POLICY_ERROR``,
    ``TIMEOUT``, ``JUDGE_ERROR``) gives samples with an all-zero ``loss_mask``, reward 0.0, ``remove_sample`` True
    and status ``failed`` (``aborted`` for a request the server aborted): slime drops them from
    the loss, and a GRPO post-process that reads ``remove_sample`` (as
    :func:`~agent_gym.integrations.slime.reward_post_process` does) leaves them out of their
    group's baseline. The episode's own total stays in ``metadata["episode_reward"]``.

    Args:
        trajectories: Records from ``collect`` or a file.
        include_empty: Keep segments with no response ids (an episode whose policy failed on its
            first turn) as rows with ``response_length`` 0; without it (and without
            ``pad_token_id``) they are dropped, as they carry nothing to train on.
        reward_assignment: ``"episode"`` (the full reward on every segment), ``"split"`` or ``"role"``
            (see :class:`~agent_gym.integrations.contract.RewardAssignment`).
        pad_token_id: When given, a segment without response ids (or prompt ids) gets this one id
            in their place, masked: a well-formed row instead of a dropped or empty one.

    Returns:
        The samples, in trajectory then segment order.
    """
    samples: list[dict[str, Any]] = []
    group_index: dict[str, int] = {}
    for trajectory in trajectories:
        fields = slime_fields(trajectory, reward_assignment=reward_assignment, pad_token_id=pad_token_id,
                              include_empty=include_empty)
        if not fields:
            continue
        records = split_segments([trajectory])  # type: ignore[list-item]
        for sample in fields:
            metadata = sample["metadata"]
            record = records[metadata["segment_index"]].to_dict()
            carried = {name: value for name, value in record.items() if name not in _SLIME_NATIVE}
            samples.append({
                **sample,
                "rollout_id": trajectory.rollout_id,
                "group_index": group_index.setdefault(metadata["group_key"], len(group_index)),
                "index": len(samples),
                "metadata": {**carried, **metadata},
            })
    return samples
