"""Memory and process limits of a whole sandbox with a Linux control group.

A per-process address-space limit (``RLIMIT_AS``) stops programs that reserve far more
virtual memory than they use (a JVM reserves its heap, code cache and class space at
start) long before they use much. A memory cgroup bounds what the sandbox's processes
really use, together, and counts the processes the kernel killed for it, so a command's
output can say why it died. A pids cgroup bounds the number of processes of the sandbox
whatever user runs them.

Both cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``) and the v1 ``memory`` and ``pids``
hierarchies are handled. Creating a cgroup needs write access to the hierarchy (root,
or a delegated subtree); :func:`cgroup_unavailable_reason` says why not otherwise.
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
from pathlib import Path

__all__ = ["SandboxCgroup", "cgroup_unavailable_reason", "release_cgroup", "take_cgroup"]

_ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (``""`` for v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return "/"


def _v2() -> bool:
    return (_ROOT / "cgroup.controllers").is_file()


def _parents() -> dict[str, Path]:
    """The directories new cgroups are made in, per controller (``memory``, ``pids``)."""
    if _v2():
        base = _ROOT / _own_path("").lstrip("/")
        return {"memory": base, "pids": base}
    return {name: _ROOT / name / _own_path(name).lstrip("/") for name in ("memory", "pids")}


_REASON: list[str | None] = []


def cgroup_unavailable_reason() -> str | None:
    """None if sandbox cgroups can be made here, else why not (checked once per process)."""
    if _REASON:
        return _REASON[0]
    reason = None
    try:
        probe = SandboxCgroup(64, 16)
        probe.remove()
    except OSError as exc:
        reason = f"cannot create a memory cgroup ({exc}); memory is limited per process (RLIMIT_AS)"
    _REASON.append(reason)
    return reason


class SandboxCgroup:
    """One cgroup (v2) or one ``memory`` and one ``pids`` cgroup (v1) for one sandbox.

    Args:
        memory_mb: Memory of all its processes together (swap included where the kernel counts it).
        processes: Processes (and threads) at once.

    Raises:
        OSError: If the cgroup cannot be created or limited.
    """

    def __init__(self, memory_mb: int, processes: int) -> None:
        self.memory_mb = memory_mb
        self.processes = processes
        self.v2 = _v2()
        name = f"agent_gym_{os.getpid()}_{secrets.token_hex(4)}"
        self.dirs: list[Path] = []
        parents = _parents()
        try:
            if self.v2:
                directory = parents["memory"] / name
                directory.mkdir()
                self.dirs.append(directory)
                self._write(directory / "memory.max", memory_mb << 20)
                self._write(directory / "memory.swap.max", 0, optional=True)
                self._write(directory / "pids.max", processes)
            else:
                memory = parents["memory"] / name
                memory.mkdir()
                self.dirs.append(memory)
                self._write(memory / "memory.limit_in_bytes", memory_mb << 20)
                self._write(memory / "memory.memsw.limit_in_bytes", memory_mb << 20, optional=True)
                pids = parents["pids"] / name
                pids.mkdir()
                self.dirs.append(pids)
                self._write(pids / "pids.max", processes)
        except OSError:
            self.remove()
            raise

    def set_limits(self, memory_mb: int, processes: int) -> None:
        """Change the limits (of an empty cgroup being reused) and reset its peak."""
        self.memory_mb, self.processes = memory_mb, processes
        memory, pids = self.dirs[0], self.dirs[-1]
        if self.v2:
            self._write(memory / "memory.max", memory_mb << 20)
            self._write(memory / "memory.peak", 0, optional=True)
        else:
            self._write(memory / "memory.memsw.limit_in_bytes", -1, optional=True)
            self._write(memory / "memory.limit_in_bytes", memory_mb << 20)
            self._write(memory / "memory.memsw.limit_in_bytes", memory_mb << 20, optional=True)
            self._write(memory / "memory.max_usage_in_bytes", 0, optional=True)
        self._write(pids / "pids.max", processes)

    def empty(self) -> bool:
        """True when no process is in the cgroup (any more)."""
        try:
            return all(not (d / "cgroup.procs").read_text().strip() for d in self.dirs) and bool(self.dirs)
        except OSError:
            return False

    @staticmethod
    def _write(path: Path, value: int, optional: bool = False) -> None:
        try:
            path.write_text(str(value))
        except OSError:
            if not optional:
                raise

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        """Processes the kernel killed so far for reaching the memory limit."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = (self.dirs[0] / name).read_text()
        except (OSError, IndexError):
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_mb(self) -> float:
        """The most memory the sandbox used at once so far, MiB (0 where the kernel does not say)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.dirs[0] / name).read_text().split()[0]) / (1 << 20)
        except (OSError, IndexError, ValueError):
            return 0.0

    def remove(self) -> None:
        """Remove the cgroups (once their processes are gone; a busy one is left to the next try)."""
        for directory in list(self.dirs):
            try:
                directory.rmdir()
                self.dirs.remove(directory)
            except FileNotFoundError:
                self.dirs.remove(directory)
            except OSError:
                pass


_FREE: list[SandboxCgroup] = []
_BUSY: list[SandboxCgroup] = []  # released while the kernel was still emptying them
_FREE_LOCK = threading.Lock()
_KEEP = 32


def take_cgroup(memory_mb: int, processes: int) -> SandboxCgroup:
    """A cgroup with these limits: a released one if any (making one costs milliseconds), else a new one.

    Raises:
        OSError: If a cgroup cannot be created or limited.
    """
    with _FREE_LOCK:
        emptied = [c for c in _BUSY if c.empty()]
        for c in emptied:
            _BUSY.remove(c)
        room = max(0, _KEEP - len(_FREE))
        _FREE.extend(emptied[:room])
        extra = emptied[room:]
        cgroup = _FREE.pop() if _FREE else None
    for c in extra:
        c.remove()
    if cgroup is None:
        return SandboxCgroup(memory_mb, processes)
    try:
        cgroup.set_limits(memory_mb, processes)
    except OSError:
        cgroup.remove()
        return SandboxCgroup(memory_mb, processes)
    return cgroup


def release_cgroup(cgroup: SandboxCgroup) -> None:
    """Keep a cgroup whose processes are gone for :func:`take_cgroup` (all are removed at exit).

    One the kernel is still emptying (its processes were killed a moment ago) waits in a list
    that the next :func:`take_cgroup` looks at; nothing here waits.
    """
    with _FREE_LOCK:
        if not cgroup.empty():
            _BUSY.append(cgroup)
            return
        if len(_FREE) < _KEEP:
            _FREE.append(cgroup)
            return
    cgroup.remove()


@atexit.register
def _remove_free() -> None:
    with _FREE_LOCK:
        free, _FREE[:], _BUSY[:] = list(_FREE) + list(_BUSY), [], []
    for cgroup in free:
        for _ in range(50):  # the kernel empties a cgroup a moment after its last process exits
            cgroup.remove()
            if not cgroup.dirs:
                break
            threading.Event().wait(0.01)
