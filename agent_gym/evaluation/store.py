"""The results directory of an evaluation: config, manifest, episodes and summary.

Layout of a results directory::

    config.json      what was asked for: envs, k, tasks, split, seed, sampling, endpoint (never a key)
    manifest.json    per env: version, entry point, the evaluated task indices and their hash
    episodes.jsonl   one line per finished attempt, appended, flushed and fsynced one by one
    summary.json     the statistics (written at the end of a run, a resume or a reverify)
    summary.txt      the same as a table

An episode is keyed by ``(env, task index, sample index)``. Each line of
``episodes.jsonl`` is one attempt at one key: its outcome (``success``, ``res_reward``),
whether the infrastructure failed (then it is not scored) and the whole trajectory.
A line is written in one ``write`` call, flushed and fsynced before the next episode is
recorded, so a ``kill -9`` at any moment loses at most the episodes in flight and leaves
at most one torn last line; :meth:`EpisodeStore.open_append` cuts that line off before
appending, and :func:`read_records` ignores it.

Example:
    >>> store = EpisodeStore("results")  # doctest: +SKIP
    >>> with store.open_append() as log:  # doctest: +SKIP
    ...     log.append(record)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

__all__ = [
    "CONFIG_FILE",
    "EPISODES_FILE",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "SUMMARY_FILE",
    "SUMMARY_TEXT_FILE",
    "AppendLog",
    "EpisodeStore",
    "read_records",
    "record_key",
    "tasks_hash",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of the results directory layout (``config.json["format"]``)."""
CONFIG_FILE = "config.json"
MANIFEST_FILE = "manifest.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
SUMMARY_TEXT_FILE = "summary.txt"


def tasks_hash(tasks: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of a task list as canonical JSON (sorted keys): the data hash of an evaluation.

    Args:
        tasks: Task dicts, in order.

    Returns:
        ``"sha256:<hex>"``.
    """
    data = json.dumps(list(tasks), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def record_key(record: Mapping[str, Any]) -> tuple[str, int, int]:
    """The ``(env, task index, sample index)`` key of an episode record."""
    env, task, sample = record["key"]
    return str(env), int(task), int(sample)


def read_records(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Read the records of an ``episodes.jsonl`` file.

    A last line without its newline (a writer killed mid-line) is ignored whether or not it
    parses: the writer only counts a record once its newline is on disk. Any other line that
    does not parse raises.

    Args:
        path: The file (a missing file has no records).

    Returns:
        The records in file order and the number of torn lines ignored (0 or 1).

    Raises:
        ValueError: A complete line is not a JSON object.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = 1 if lines and lines[-1].strip() else 0
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: expected a JSON object, got invalid JSON ({exc})") from exc
        if not isinstance(record, dict) or "key" not in record:
            raise ValueError(f"{path}:{number}: expected an episode record with a 'key', got {str(record)[:80]!r}")
        records.append(record)
    if torn:
        logger.warning("%s: ignoring a torn last line (a run was killed while writing it)", path)
    return records, torn


class AppendLog:
    """Append-only, crash-safe writer of episode records (see the module docstring).

    Args:
        path: The ``episodes.jsonl`` file; a torn last line is cut off before the first append.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.truncated = _cut_torn_tail(self.path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.count = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line, then flush it to disk (``fsync``) before returning.

        Thread-safe: lines from several threads never interleave.

        Raises:
            ValueError: The log is closed.
        """
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        with self._lock:
            if self._fd is None:
                raise ValueError("AppendLog.append: the log is closed")
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
            self.count += 1

    def close(self) -> None:
        """Close the file; safe to call twice."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _cut_torn_tail(path: Path) -> int:
    """Cut a last line without its newline off ``path``; return the bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        # Scan back for the last newline in blocks.
        position, end = size, size
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        while position > 0:
            start = max(0, position - 65536)
            fh.seek(start)
            block = fh.read(position - start)
            index = block.rfind(b"\n")
            if index >= 0:
                keep = start + index + 1
                break
            position = start
        else:
            keep = 0
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    logger.warning("%s: cut off a torn last line (%d bytes) before appending", path, end - keep)
    return end - keep


class EpisodeStore:
    """One results directory (see the module docstring for its files).

    Args:
        root: The directory (created on the first write).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def episodes_path(self) -> Path:
        """``episodes.jsonl`` of the directory."""
        return self.root / EPISODES_FILE

    def exists(self) -> bool:
        """Whether the directory holds an evaluation (a ``config.json``)."""
        return (self.root / CONFIG_FILE).is_file()

    def write_json(self, name: str, data: Mapping[str, Any]) -> Path:
        """Write ``data`` to ``name`` atomically (a temporary file, fsynced, then renamed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / name
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as fh:
            fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Write a text file of the directory (e.g. ``summary.txt``) atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        return path

    def read_json(self, name: str) -> dict[str, Any]:
        """Read a JSON file of the directory.

        Raises:
            FileNotFoundError: The file is missing.
            ValueError: It is not a JSON object.
        """
        data = orjson.loads((self.root / name).read_bytes())
        if not isinstance(data, dict):
            raise ValueError(f"{self.root / name}: expected a JSON object, got {type(data).__name__}")
        return data

    def open_append(self) -> AppendLog:
        """The episode log, ready to append (a torn last line cut off)."""
        return AppendLog(self.episodes_path)

    def records(self) -> list[dict[str, Any]]:
        """Every complete record of the episode log, in file order."""
        return read_records(self.episodes_path)[0]

    def iter_scored(self) -> Iterator[dict[str, Any]]:
        """The scored record of each key (the first one; infrastructure failures are not scored)."""
        seen: set[tuple[str, int, int]] = set()
        for record in self.records():
            key = record_key(record)
            if record.get("scored") and key not in seen:
                seen.add(key)
                yield record
