"""The ``Sandbox`` protocol, its ``Result`` and the limits every backend applies.

A sandbox is one isolated place where an agent's shell commands run: a persistent
shell session (``run``), fresh processes for graders (``exec``), and file transfer
(``write_file``, ``read_file``). ``close`` ends every process and removes every file
of the sandbox; it is safe to call twice, and a sandbox is a context manager.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agent_gym.checks import check_float, check_int

__all__ = ["Result", "Sandbox", "SandboxLimits"]


@dataclass(frozen=True)
class Result:
    """The outcome of one command.

    Attributes:
        exit_code: The command's exit status (124 when it timed out, 128+N for signal N).
        output: Standard output and standard error, interleaved as a terminal shows them.
        timed_out: True if the command ran past its timeout and was killed.
        truncated: True if the output was cut at the size limit (a marker shows where).
        killed: Why the kernel killed a process of the command, where the sandbox knows
            (``"memory"``: the sandbox's memory limit; the output says so too), else None.
    """

    exit_code: int
    output: str
    timed_out: bool = False
    truncated: bool = False
    killed: str | None = None

    @property
    def ok(self) -> bool:
        """True for exit code 0 without a timeout."""
        return self.exit_code == 0 and not self.timed_out

    def transcript(self) -> str:
        """The output as a shell tool shows it to an agent: the text, then ``[exit code: N]`` on its own line."""
        output = self.output if self.output.endswith("\n") or not self.output else self.output + "\n"
        return f"{output}[exit code: {self.exit_code}]"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of every process in a sandbox (the sandboxed shell cannot raise them).

    Attributes:
        memory_mb: Memory, MiB: of the whole sandbox where a memory cgroup bounds it (the
            Docker backend, and the local one with ``cgroup``), else the address space of
            each process (``RLIMIT_AS``).
        processes: Processes of the sandbox user (``RLIMIT_NPROC``).
        cpu_seconds: CPU time per process (``RLIMIT_CPU``).
        file_size_mb: Largest file a process may write (``RLIMIT_FSIZE``), MiB.
        open_files: Open file descriptors per process (``RLIMIT_NOFILE``).
        workspace_mb: Size of the workspace file system (``/app``), MiB.
        tmp_mb: Size of ``/tmp`` (and of the home directory), MiB.
        output_bytes: Output kept per command; longer output keeps its head and tail around a marker.
        cpus: CPUs the sandbox may use at once (the Docker backend's ``nano_cpus``; the local
            backend limits CPU time per process only).
        address_space_mb: Address space per process (``RLIMIT_AS``), MiB, where a cgroup bounds
            the memory; None: unlimited there (a JVM reserves several GiB of address space it
            never uses). Without a cgroup ``memory_mb`` is the per-process limit.
    """

    memory_mb: int = 2048
    processes: int = 128
    cpu_seconds: int = 600
    file_size_mb: int = 128
    open_files: int = 1024
    workspace_mb: int = 512
    tmp_mb: int = 256
    output_bytes: int = 16384
    cpus: float = 1.0
    address_space_mb: int | None = None

    def __post_init__(self) -> None:
        for name in ("memory_mb", "processes", "cpu_seconds", "file_size_mb", "open_files", "workspace_mb",
                     "tmp_mb", "output_bytes"):
            check_int(f"SandboxLimits.{name}", getattr(self, name), low=1)
        check_float("SandboxLimits.cpus", self.cpus, low=0.0, low_open=True)
        if self.address_space_mb is not None:
            check_int("SandboxLimits.address_space_mb", self.address_space_mb, low=1)

    def rlimits(self, cgroup: bool = False) -> dict[str, int]:
        """``resource`` limit names and values (``cgroup``: a cgroup bounds the memory; -1 is unlimited)."""
        mib = 1 << 20
        if cgroup:
            address_space = -1 if self.address_space_mb is None else self.address_space_mb * mib
        else:
            address_space = self.memory_mb * mib
        return {
            "RLIMIT_AS": address_space,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_CPU": self.cpu_seconds,
            "RLIMIT_FSIZE": self.file_size_mb * mib,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


@runtime_checkable
class Sandbox(Protocol):
    """An isolated shell session with file transfer.

    Model output is untrusted: ``run`` never raises because of what the command does
    (a crash, a timeout, huge output, a killed shell all come back as a :class:`Result`).
    """

    def run(self, command: str, timeout: float | None = None) -> Result:
        """Run ``command`` in the persistent shell (``cd``, variables and functions persist).

        The command's stdin is empty (a command waiting for input gets EOF). After
        ``timeout`` seconds every process the command started is killed; the session stays usable.
        """
        ...

    def exec(self, command: str, timeout: float | None = None, env: Mapping[str, str] | None = None) -> Result:
        """Run ``command`` with ``bash -c`` in a fresh process with a clean environment (for graders)."""
        ...

    def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        """Write a file inside the sandbox (parents are created)."""
        ...

    def read_file(self, path: str) -> bytes:
        """Read a file inside the sandbox."""
        ...

    def stop_shell(self) -> None:
        """Kill the persistent shell and every process it started (files stay)."""
        ...

    def close(self) -> None:
        """Kill every process and remove every file of the sandbox; safe to call twice."""
        ...

    def __enter__(self) -> Sandbox:
        ...

    def __exit__(self, *exc: object) -> None:
        ...
