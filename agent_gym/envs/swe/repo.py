"""Repository snapshots of SWE tasks: one commit, no history, packed as a tar archive.

A task's *base* is the tree the agent starts from: the task's source (a shipped library,
a local git repository at a commit, or a plain directory), with the task's bug patch applied
when it has one (SWE-smith style). :func:`build_snapshot` turns it into a fresh git
repository holding exactly one commit of that tree, with no reflog, no remote, no other
refs and no objects of any other tree, and returns it as an uncompressed tar archive. An
episode extracts the archive into its sandbox (a copy in memory, milliseconds for a small
repository; no clone, no history to read the fix from). Archives are cached per process
(:func:`snapshot_for`), keyed by the source and the patch.

Also here: the git command line used on the host (:func:`git`), the split of a unified diff
into files (:func:`split_patch`, :func:`patch_files`) and the path of a shipped library
(:func:`library_path`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_gym.errors import ConfigError

__all__ = [
    "BASE_AUTHOR",
    "LIBRARIES",
    "Snapshot",
    "build_snapshot",
    "git",
    "library_path",
    "patch_files",
    "snapshot_for",
    "source_key",
    "split_patch",
]

LIBRARIES_DIR = Path(__file__).with_name("libraries")
LIBRARIES = ("textkit", "intervals", "gridpath", "ledger")
"""The shipped pure-Python libraries (each with its own test suite)."""

BASE_AUTHOR = {"GIT_AUTHOR_NAME": "base", "GIT_AUTHOR_EMAIL": "base@localhost",
               "GIT_COMMITTER_NAME": "base", "GIT_COMMITTER_EMAIL": "base@localhost",
               "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000"}
"""Identity and date of the base commit (fixed, so a tree always gives the same commit id)."""

_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir()}
_CACHE_SIZE = 64
_cache: OrderedDict[str, Snapshot] = OrderedDict()
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Snapshot:
    """A base repository packed for episodes.

    Attributes:
        archive: Uncompressed tar of the repository (with its ``.git``), paths relative to its root.
        commit: The id of its one commit.
        gold_patch: The fix (the bug patch reversed) for a task with a bug patch, else "".
        files: How many files the tree holds.
    """

    archive: bytes
    commit: str
    gold_patch: str
    files: int


def git(args: list[str], cwd: str | os.PathLike[str], input: bytes | None = None, check: bool = True,
        env: Mapping[str, str] | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:
    """Run ``git`` on the host with no user or system configuration.

    Raises:
        ConfigError: When ``check`` and git fails (the message has its output).
    """
    proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false", *args],
                          cwd=cwd, input=input, capture_output=True, timeout=timeout,
                          env={**_GIT_ENV, **dict(env or {})})
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        raise ConfigError(f"git {' '.join(args[:3])} failed in {cwd}: {err[-600:]}")
    return proc


def library_path(name: str) -> Path:
    """The directory of a shipped library (one of :data:`LIBRARIES`)."""
    if name not in LIBRARIES:
        raise ConfigError(f"library: expected one of {LIBRARIES}, got {name!r}")
    return LIBRARIES_DIR / name


def source_key(source: Mapping[str, Any], bug_patch: str = "") -> str:
    """A cache key for a task's source and bug patch (a library's files are hashed, so edits count)."""
    digest = hashlib.sha256()
    if source.get("library"):
        root = library_path(str(source["library"]))
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    else:
        digest.update(repr(sorted((k, str(v)) for k, v in source.items())).encode())
    digest.update(bug_patch.encode())
    return digest.hexdigest()[:24]


def _copy_tree(source: Mapping[str, Any], dest: Path) -> None:
    """Lay the source's files out in ``dest`` (no ``.git``)."""
    if source.get("library"):
        shutil.copytree(library_path(str(source["library"])), dest,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        return
    path = source.get("repo_path") or source.get("dir")
    if not path or not os.path.isdir(str(path)):
        raise ConfigError(f"the task's repository {path!r} is not a directory (tasks name a local repository; "
                          "nothing is downloaded)")
    if source.get("dir"):
        shutil.copytree(str(path), dest, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
        return
    commit = str(source.get("commit") or "HEAD")
    archive = git(["archive", "--format=tar", commit], cwd=str(path)).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="tar") if hasattr(tarfile, "tar_filter") else tar.extractall(dest)


def _apply(repo: Path, patch: str, what: str) -> None:
    if not patch.strip():
        return
    proc = git(["apply", "--binary", "--whitespace=nowarn", "-"], cwd=repo, input=patch.encode(), check=False)
    if proc.returncode != 0:
        raise ConfigError(f"the task's {what} does not apply to its source: "
                          f"{proc.stderr.decode(errors='replace').strip()[-400:]}")


def build_snapshot(source: Mapping[str, Any], bug_patch: str = "") -> Snapshot:
    """Build the base repository of a task (see the module docstring).

    Args:
        source: ``{"library": name}``, ``{"repo_path": path, "commit": rev}`` or ``{"dir": path}``.
        bug_patch: A patch applied to the source to make the base (SWE-smith style), or "".

    Raises:
        ConfigError: When the source is missing or the patch does not apply.
    """
    with tempfile.TemporaryDirectory(prefix="agent_gym_swe_") as tmp:
        work = Path(tmp) / "repo"
        _copy_tree(source, work)
        gold = ""
        if bug_patch.strip():
            git(["init", "-q"], cwd=work)
            git(["add", "-A"], cwd=work)
            git(["commit", "-q", "--no-verify", "-m", "clean"], cwd=work, env=BASE_AUTHOR)
            _apply(work, bug_patch, "bug patch")
            git(["add", "-A"], cwd=work)
            gold = git(["diff", "--cached", "--binary", "-R"], cwd=work).stdout.decode(errors="surrogateescape")
            shutil.rmtree(work / ".git")
        git(["init", "-q", "-b", "main"], cwd=work)
        git(["add", "-A"], cwd=work)
        git(["commit", "-q", "--no-verify", "-m", "base"], cwd=work, env=BASE_AUTHOR)
        commit = git(["rev-parse", "HEAD"], cwd=work).stdout.decode().strip()
        shutil.rmtree(work / ".git" / "logs", ignore_errors=True)
        for name in ("hooks", "description", "COMMIT_EDITMSG", "ORIG_HEAD"):
            target = work / ".git" / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        files = int(git(["ls-files", "-z"], cwd=work).stdout.count(b"\0"))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for entry in sorted(work.iterdir()):
                tar.add(entry, arcname=entry.name, filter=_normalise)
        return Snapshot(buffer.getvalue(), commit, gold, files)


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode |= 0o644 if info.isfile() else 0o755
    return info


def snapshot_for(source: Mapping[str, Any], bug_patch: str = "") -> Snapshot:
    """:func:`build_snapshot`, cached in this process (the last 64 bases)."""
    key = source_key(source, bug_patch)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    snapshot = build_snapshot(source, bug_patch)
    with _cache_lock:
        _cache[key] = snapshot
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return snapshot


def split_patch(patch: str) -> list[tuple[str, str]]:
    """``[(path, text)]``: a unified diff cut at each ``diff --git`` (or ``---`` header), in order.

    The path is the file's new name (its old name for a deletion), without ``a/`` / ``b/``.
    """
    lines = patch.splitlines(keepends=True)
    git_style = any(line.startswith("diff --git ") for line in lines)
    pieces: list[list[str]] = []
    for i, line in enumerate(lines):
        if git_style:
            starts = line.startswith("diff --git ")
        else:
            starts = line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        if starts or not pieces:
            pieces.append([])
        pieces[-1].append(line)
    texts = ["".join(piece) for piece in pieces]
    return [(path, text) for path, text in ((_path_of(t), t) for t in texts) if path]


def _strip(name: str) -> str:
    name = name.strip().split("\t", 1)[0]
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name[2:] if name[:2] in ("a/", "b/") else name


def _path_of(text: str) -> str:
    old = new = ""
    for line in text.splitlines():
        if line.startswith("diff --git "):
            parts = line[len("diff --git "):].split(" b/", 1)
            if len(parts) == 2:
                old, new = _strip(parts[0]), parts[1].strip()
        elif line.startswith("--- "):
            value = line[4:]
            old = "" if value.strip() == "/dev/null" else _strip(value)
        elif line.startswith("+++ "):
            value = line[4:]
            new = "" if value.strip() == "/dev/null" else _strip(value)
        elif line.startswith("@@") or line.startswith("GIT binary"):
            break
    return new or old


def patch_files(patch: str) -> list[str]:
    """The paths a unified diff touches (see :func:`split_patch`)."""
    return [path for path, _ in split_patch(patch)]
