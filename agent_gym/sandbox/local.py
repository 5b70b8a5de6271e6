"""``LocalSandbox``: a persistent shell under Linux namespaces with bubblewrap.

Every sandbox is one ``bwrap`` process tree with its own PID, network (no interface
but its own loopback), IPC, UTS and cgroup namespaces. The host file system is
visible read-only and only in part: ``/usr``, ``/etc``, the library directories and
the running Python installation (so graders can use the host's ``python3`` and
``pytest``). ``/app`` (the workspace and working directory), ``/tmp``, the home
directory ``/root``, ``/tests`` and ``/logs`` are size-limited in-memory file
systems of this sandbox alone: nothing of them is ever written to the host disk, and
they vanish with the sandbox.

Inside runs a small driver (``_driver.py``) that owns the persistent bash session.
When the host runs as root, bubblewrap runs privileged and the driver keeps only
CAP_SETUID/CAP_SETGID to start every other process under a fresh unprivileged user
id per sandbox, so the process limit (``RLIMIT_NPROC``) applies per sandbox and the
agent can neither signal the driver nor read root-only host files. As another user,
bubblewrap makes a user namespace and the driver runs as that user.

Limits (:class:`SandboxLimits`) are hard resource limits, set before the sandbox user
is entered: the shell cannot raise them. ``close`` (also at garbage collection and at
interpreter exit) kills the sandbox's first process, which makes the kernel kill every
process of its PID namespace; if the host dies, the driver reads end-of-file and exits
with the same effect.
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_gym.checks import check_timeout
from agent_gym.errors import SandboxError, SandboxUnavailableError
from agent_gym.sandbox.base import Result, SandboxLimits
from agent_gym.sandbox.cgroup import SandboxCgroup, cgroup_unavailable_reason, release_cgroup, take_cgroup
from agent_gym.sandbox.rootfs import (
    chown_written,
    layer_mount_args,
    wrapper_command,
    writable_root_unavailable_reason,
)
from agent_gym.utils.creation_limit import wait_for_creation

__all__ = ["DEFAULT_ENV", "LocalSandbox", "bwrap_available", "sandbox_base_env"]

_DRIVER_PATH = Path(__file__).with_name("_driver.py")
_DRIVER_CODE: bytes | None = None
_LOADER = (
    "import os,sys,marshal\nn=int(sys.argv[1])\nb=b''\nwhile len(b)<n:\n c=os.read(0,n-len(b))\n"
    " if not c: raise SystemExit(1)\n b+=c\nexec(marshal.loads(b))"
)


def _driver_code() -> bytes:
    """The driver's code object, compiled once per process and marshalled (the sandbox runs the same Python)."""
    global _DRIVER_CODE
    if _DRIVER_CODE is None:
        source = _DRIVER_PATH.read_text(encoding="utf-8")
        _DRIVER_CODE = marshal.dumps(compile(source, "agent_gym_sandbox_driver", "exec", dont_inherit=True))
    return _DRIVER_CODE
_STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

DEFAULT_ENV: dict[str, str] = {
    "HOME": "/root",
    "USER": "root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "DEBIAN_FRONTEND": "noninteractive",
}
"""Environment of every process in a sandbox (plus ``PATH``); nothing comes from the host's environment."""

_SIZE_MIB = 1 << 20


def sandbox_base_env() -> dict[str, str]:
    """The environment of a local sandbox's processes before any ``env=`` (``DEFAULT_ENV``, ``PATH``, ``HOSTNAME``)."""
    path_dirs = [os.path.dirname(os.path.abspath(sys.executable)), _STANDARD_PATH]
    return {**DEFAULT_ENV, "PATH": ":".join(path_dirs), "HOSTNAME": "sandbox"}


def bwrap_available() -> str | None:
    """The path of a working ``bwrap``, or None."""
    return shutil.which("bwrap")


def _python_dirs() -> list[str]:
    """Directories of the running Python that must be visible inside (outside /usr)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    keep: list[str] = []
    for d in sorted(dirs, key=len):
        real = os.path.realpath(d)
        for path in {d, real}:
            if path.startswith("/usr/") or path == "/usr" or not os.path.isdir(path):
                continue
            if not any(path == k or path.startswith(k + "/") for k in keep):
                keep.append(path)
    return keep


_SANDBOX_DIRS = ("/app", "/root", "/tmp", "/home", "/tests", "/logs")
"""The sandbox's own in-memory file systems (their files go to the sandbox user after root setup steps)."""


_HOST_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Host directories every local sandbox shows (read-only, or as copy-on-write layers)."""


def _inside(path: str, dirs: tuple[str, ...] | list[str]) -> bool:
    return any(path == d or path.startswith(d + "/") for d in dirs)


def _hide_args(paths: tuple[str, ...], shown: tuple[str, ...]) -> list[str]:
    """Cover host paths visible in the sandbox: a directory by an empty read-only tmpfs, a file by ``/dev/null``.

    A bind mount of a device node cannot be opened (bubblewrap binds with ``nodev``), so a covered file
    reads as "Permission denied". Paths outside the host directories the sandbox shows (``shown``),
    and paths inside a directory already covered, need nothing.
    """
    args: list[str] = []
    covered: list[str] = []
    for path in sorted(set(paths), key=len):
        if not _inside(path, shown) or _inside(path, covered):
            continue
        if os.path.isdir(path):
            covered.append(path)
            args += ["--perms", "0555", "--size", str(_SIZE_MIB), "--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    return args


def _mount_args(limits: SandboxLimits, binds: tuple[str, ...], writable_root: bool = False) -> list[str]:
    args = layer_mount_args() if writable_root else ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    if not writable_root:
        args += ["--ro-bind", "/etc", "/etc"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    sizes = {"/tmp": limits.tmp_mb, "/root": limits.tmp_mb, "/app": limits.workspace_mb, "/tests": 64,
             "/logs": 16, "/run/agent_gym": max(64, 2 * limits.file_size_mb)}
    for path, size in sizes.items():
        perms = "01777" if path in ("/tmp", "/run/agent_gym") else "0777"
        args += ["--perms", perms, "--size", str(size * _SIZE_MIB), "--tmpfs", path]
    args += ["--tmpfs", "/home"]
    made: set[str] = set()
    for path in (*_python_dirs(), *binds):
        parent = os.path.dirname(path)
        chain = []
        while parent not in ("/", "") and parent not in made:
            chain.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(chain):
            args += ["--perms", "0755", "--dir", d]
            made.add(d)
        args += ["--ro-bind", path, path]
        made.add(path)
    return args


def _options_file(options: list[str]) -> int:
    """A file descriptor of an in-memory file holding ``options``, NUL-separated (bubblewrap's ``--args``)."""
    fd = os.memfd_create("agent_gym-sandbox-options")
    try:
        data = b"".join(option.encode() + b"\0" for option in options)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _teardown(proc: subprocess.Popen, init_pid: list[int], cgroup: SandboxCgroup | None = None) -> None:
    """Kill the sandbox's PID namespace (through its first process), reap bubblewrap, drop the cgroup."""
    if init_pid and init_pid[0] > 0:
        try:
            os.kill(init_pid[0], signal.SIGKILL)
        except OSError:
            pass
    try:
        # bubblewrap exits (and reaps the first process) once that process is gone
        proc.wait(timeout=2 if init_pid and init_pid[0] > 0 else 0.01)
    except subprocess.TimeoutExpired:
        proc.kill()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - the kernel kills a namespace promptly
        pass
    if cgroup is not None:
        release_cgroup(cgroup)


class LocalSandbox:
    r"""A bubblewrap sandbox with a persistent bash session (see the module docstring).

    Args:
        limits: Resource limits (default :class:`SandboxLimits`).
        timeout: Default seconds per command of :meth:`run` and :meth:`exec`.
        env: Extra environment variables of every process inside.
        binds: Extra host directories made visible read-only at the same path.
        hide: Host paths (existing files or directories) the sandbox must not see although they
            may lie under a directory it shows (e.g. task data installed under the Python prefix):
            there, a directory appears empty and read-only, a file cannot be opened; paths it does
            not show are left alone.
        workdir: Working directory of the shell (default ``/app``).
        writable_root: Give the sandbox a writable root (:mod:`agent_gym.sandbox.rootfs`):
            ``/usr`` and ``/etc`` become copy-on-write layers over the host's, the rest of the
            root is the sandbox's own, all in memory (never on the host). Needs root.
        cgroup: Bound the memory (``limits.memory_mb``, all processes together) and the
            processes with a cgroup (:mod:`agent_gym.sandbox.cgroup`) instead of per-process
            limits; a command whose process the kernel killed for memory says so in its
            output. None (default): with ``writable_root`` where cgroups can be made.

    Raises:
        SandboxUnavailableError: If ``bwrap`` is not installed or cannot start a sandbox
            (never falls back to an unconfined shell), or a writable root or a cgroup was
            asked for and cannot be had (the message says why).

    Example:
        >>> with LocalSandbox() as box:  # doctest: +SKIP
        ...     box.run("cd /tmp && export X=1")
        ...     box.run("echo $X; pwd").output
        '1\\n/tmp\\n'
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        binds: tuple[str, ...] | list[str] = (),
        hide: tuple[str, ...] | list[str] = (),
        workdir: str = "/app",
        writable_root: bool = False,
        cgroup: bool | None = None,
    ) -> None:
        bwrap = bwrap_available()
        if bwrap is None:
            raise SandboxUnavailableError(
                "the local sandbox needs bubblewrap ('bwrap'), which is not installed; install it with "
                "'apt-get install bubblewrap' (Debian/Ubuntu) or 'dnf install bubblewrap' (Fedora). "
                "Commands are never run outside a sandbox."
            )
        if limits is not None and not isinstance(limits, SandboxLimits):
            raise TypeError(f"limits: expected SandboxLimits or None, got {type(limits).__name__}")
        self.limits = limits or SandboxLimits()
        self.timeout = check_timeout("timeout", timeout, allow_none=False)
        for path in binds:
            if not isinstance(path, str) or not os.path.isabs(path) or not os.path.isdir(path):
                raise ValueError(f"binds: expected absolute paths of existing directories, got {path!r}")
        for path in hide:
            if not isinstance(path, str) or not os.path.isabs(path) or not os.path.exists(path):
                raise ValueError(f"hide: expected absolute paths of existing files or directories, got {path!r}")
        self.workdir = workdir
        self._lock = threading.Lock()
        self._dead: str | None = None
        self._closed = False
        self.env = {**sandbox_base_env(), **dict(env or {})}
        as_root = os.geteuid() == 0
        self.as_root = as_root
        self.writable_root = bool(writable_root)
        if self.writable_root:
            reason = writable_root_unavailable_reason()
            if reason is not None:
                raise SandboxUnavailableError(f"the local sandbox cannot have a writable root: {reason}")
        if cgroup is None:
            cgroup = self.writable_root and cgroup_unavailable_reason() is None
        self.cgroup: SandboxCgroup | None = None
        if cgroup:
            try:
                self.cgroup = take_cgroup(self.limits.memory_mb, self.limits.processes)
            except OSError as exc:
                raise SandboxUnavailableError(f"the local sandbox cannot have a memory cgroup: {exc}") from None
        self.uid = 200_000 + secrets.randbelow(1 << 28) if as_root else os.getuid()
        args = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--hostname", "sandbox", "--new-session", "--clearenv"]
        if as_root:
            caps = ["SETUID", "SETGID"] + (["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"] if self.writable_root else [])
            args += [a for cap in caps for a in ("--cap-add", f"CAP_{cap}")]
        else:
            args += ["--unshare-user"]
        args += _mount_args(self.limits, tuple(binds), self.writable_root)
        shown = (*_HOST_DIRS, *_python_dirs(), *(os.path.normpath(b) for b in binds))
        args += _hide_args(tuple(q for p in hide for q in (os.path.normpath(p), os.path.realpath(p))), shown)
        if workdir != "/" and workdir not in _SANDBOX_DIRS:  # a working directory bubblewrap must make
            if self.writable_root or any(workdir.startswith(d + "/") for d in _SANDBOX_DIRS):
                args += ["--perms", "0777", "--dir", workdir]
            else:
                args += ["--perms", "0777", "--size", str(self.limits.workspace_mb * _SIZE_MIB), "--tmpfs", workdir]
        info_r, info_w = os.pipe()
        args += ["--info-fd", str(info_w), "--chdir", workdir]
        config = {"uid": self.uid, "gid": self.uid, "rlimits": self.limits.rlimits(self.cgroup is not None),
                  "env": self.env, "workdir": workdir}
        source = _driver_code()
        options_fd = _options_file(args[1:])  # not on the command line: /proc/1/cmdline would show host paths
        args = [bwrap, "--args", str(options_fd),
                sys.executable, "-I", "-S", "-B", "-c", _LOADER, str(len(source)), marshal.dumps(config).hex()]
        if self.writable_root or self.cgroup is not None:
            args = wrapper_command(self.limits.workspace_mb if self.writable_root else None,
                                   self.cgroup.procs_files if self.cgroup else [], args)
        wait_for_creation("sandbox")  # the host-wide creation-rate limit, when one is set
        self._init_pid: list[int] = [0]
        try:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(info_w, options_fd), env={"PATH": _STANDARD_PATH}, bufsize=0,
            )
        finally:
            os.close(info_w)
            os.close(options_fd)
        self._finalizer = weakref.finalize(self, _teardown, self._proc, self._init_pid, self.cgroup)
        try:
            assert self._proc.stdin is not None
            view = memoryview(source)
            while view:
                view = view[os.write(self._proc.stdin.fileno(), view):]
            self._init_pid[0] = self._read_info(info_r)
            header = self._read_header(time.monotonic() + 30.0)
        except SandboxError as exc:
            self._finalizer()
            stderr = self._proc.stderr.read().decode(errors="replace").strip() if self._proc.stderr else ""
            raise SandboxUnavailableError(f"bubblewrap could not start a sandbox: {stderr or exc}") from None
        finally:
            os.close(info_r)
        if not header.get("ready"):  # pragma: no cover - the driver sends ready first
            self._finalizer()
            raise SandboxUnavailableError(f"the sandbox driver did not start: {header}")

    # ------------------------------------------------------------------ protocol

    def run(self, command: str, timeout: float | None = None) -> Result:
        """Run ``command`` in the persistent shell (see :meth:`Sandbox.run`); never raises for the command."""
        return self._command("run", command, timeout, {})

    def exec(self, command: str, timeout: float | None = None, env: Mapping[str, str] | None = None,
             cwd: str | None = None, as_root: bool = False) -> Result:
        """Run ``bash -c command`` in a fresh process (clean environment plus ``env``), then kill what it left.

        ``as_root``: run it as root inside the sandbox (a task's setup steps; see
        :meth:`finish_setup`). Needs a host running as root.
        """
        extra = {"env": dict(env or {}), "cwd": cwd or self.workdir, "root": self._root_ok(as_root)}
        return self._command("exec", command, timeout, extra)

    def exec_with_channel(self, command: str, channel: bytes, timeout: float | None = None,
                          env: Mapping[str, str] | None = None, cwd: str | None = None,
                          cap: int = 4 * _SIZE_MIB) -> tuple[Result, bytes]:
        """:meth:`exec` with a private channel: ``(result, the bytes that came back on the channel)``.

        The output is read from a pipe (nothing in the sandbox can block, replace or reopen it as a
        file), and the command's fd 3 is one end of a socket pair (which no process can open again
        through ``/proc``): ``channel`` is written into it before the command starts, and up to
        ``cap`` bytes that the command's processes write there come back. Every process the command
        left is killed before either stream is read to its end. Runs as the sandbox user.

        Raises:
            ValueError: If ``channel`` is over 64 KiB (it must fit the socket's buffer).
        """
        if not isinstance(channel, (bytes, bytearray)):
            raise TypeError(f"channel: expected bytes, got {type(channel).__name__}")
        if len(channel) > 1 << 16:
            raise ValueError(f"channel: expected at most 65536 bytes, got {len(channel)}")
        extra = {"env": dict(env or {}), "cwd": cwd or self.workdir, "root": False, "channel": bytes(channel),
                 "cap": int(cap)}
        return self._command_parts("exec", command, timeout, extra)

    def write_file(self, path: str, data: str | bytes, mode: int = 0o644, as_root: bool = False) -> None:
        """Write ``data`` to ``path`` inside the sandbox as the sandbox user (parents are created).

        ``as_root``: write it as root (a task's ``COPY``), see :meth:`exec`.

        Raises:
            SandboxError: If the sandbox is closed or the write failed.
        """
        payload = data.encode() if isinstance(data, str) else bytes(data)
        self._file_op({"op": "write", "path": self._inside(path), "mode": int(mode), "root": self._root_ok(as_root)},
                      payload)

    def make_dirs(self, paths: list[str], as_root: bool = False) -> None:
        """Create directories (with their parents) inside the sandbox, as the sandbox user or as root.

        Raises:
            SandboxError: If the sandbox is closed or a directory cannot be made.
        """
        self._file_op({"op": "mkdir", "paths": [self._inside(p) for p in paths], "root": self._root_ok(as_root)}, b"")

    def finish_setup(self) -> int:
        """Give the sandbox user every file the root setup steps wrote; returns how many changed.

        Call it once after the steps run with ``as_root`` and before the agent's first command:
        the agent's shell and the tests run as the sandbox user and must be able to change
        what the task's ``COPY`` and ``RUN`` made (as in an image where everything runs as root).
        """
        if not self.as_root or self._init_pid[0] <= 0:
            return 0
        return chown_written(self._proc.pid, self._init_pid[0], self.uid, self.uid, self.writable_root,
                             _SANDBOX_DIRS)

    @property
    def memory_limited_by_cgroup(self) -> bool:
        """True when a cgroup bounds the sandbox's memory (see the ``cgroup`` argument)."""
        return self.cgroup is not None

    def read_file(self, path: str, limit: int = 16 * _SIZE_MIB) -> bytes:
        """Read up to ``limit`` bytes of ``path`` inside the sandbox, as the sandbox user.

        Raises:
            SandboxError: If the sandbox is closed or the file cannot be read.
        """
        return self._file_op({"op": "read", "path": self._inside(path), "limit": int(limit)}, b"")

    def stop_shell(self) -> None:
        """Kill the persistent shell and every process started from it (files stay)."""
        self._file_op({"op": "stop_shell"}, b"")

    @property
    def alive(self) -> bool:
        """False once closed or once the sandbox's processes are gone."""
        return not self._closed and self._dead is None and self._proc.poll() is None

    @property
    def host_pid(self) -> int:
        """Host PID of the sandbox's first process (its PID namespace lives as long as it does)."""
        return self._init_pid[0]

    def close(self) -> None:
        """Kill every process of the sandbox and drop its file systems; safe to call twice."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("dead" if self._dead else "running")
        return f"LocalSandbox(uid={self.uid}, {state})"

    # ------------------------------------------------------------------ internals

    def _inside(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise ValueError(f"path: expected a non-empty str, got {path!r}")
        return path if path.startswith("/") else f"{self.workdir}/{path}"

    def _root_ok(self, as_root: bool) -> bool:
        if as_root and not self.as_root:
            raise SandboxError("as_root: the local sandbox runs steps as root only when the host runs it as root")
        return bool(as_root)

    def _command(self, op: str, command: str, timeout: float | None, extra: dict[str, Any]) -> Result:
        return self._command_parts(op, command, timeout, extra)[0]

    def _command_parts(self, op: str, command: str, timeout: float | None,
                       extra: dict[str, Any]) -> tuple[Result, bytes]:
        """The command's :class:`Result` and the bytes its reply carried after the output (a channel's)."""
        if not isinstance(command, str):
            raise TypeError(f"command: expected str, got {type(command).__name__}")
        seconds = self.timeout if timeout is None else check_timeout("timeout", timeout, allow_none=False)
        assert seconds is not None
        header = {"op": op, "timeout": seconds, "limit": self.limits.output_bytes, **extra}
        kills = self.cgroup.oom_kills() if self.cgroup is not None else 0
        try:
            reply, data = self._request(header, command.encode("utf-8", "surrogatepass"), seconds + 15.0)
        except SandboxError as exc:
            return Result(exit_code=125, output=f"[sandbox error: {exc}]"), b""
        if not reply.get("ok"):
            return Result(exit_code=125, output=f"[sandbox error: {reply.get('error')}]"), b""
        after = b""
        if "output_size" in reply:
            data, after = data[:int(reply["output_size"])], data[int(reply["output_size"]):]
        text = data.decode("utf-8", "replace")
        killed = None
        if self.cgroup is not None and self.cgroup.oom_kills() > kills:
            killed = "memory"
            text += ("\n" if text and not text.endswith("\n") else "") + (
                f"[a process was killed: the sandbox reached its memory limit of {self.limits.memory_mb} MiB]")
        return Result(exit_code=int(reply["exit_code"]), output=text, timed_out=bool(reply["timed_out"]),
                      truncated=bool(reply["truncated"]), killed=killed), after

    def _file_op(self, header: dict[str, Any], payload: bytes) -> bytes:
        reply, data = self._request(header, payload, 60.0)
        if not reply.get("ok"):
            raise SandboxError(f"{header['op']} {header.get('path', '')}: {reply.get('error')}")
        return data

    def _request(self, header: dict[str, Any], payload: bytes, wait: float) -> tuple[dict[str, Any], bytes]:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed")
            if self._dead is not None:
                raise SandboxError(self._dead)
            assert self._proc.stdin is not None
            try:
                request = marshal.dumps({**header, "size": len(payload)})
                view = memoryview(b"%010d" % len(request) + request + payload)
                while view:
                    view = view[os.write(self._proc.stdin.fileno(), view):]
                deadline = time.monotonic() + wait
                reply = self._read_header(deadline)
                data = self._read_exact(int(reply.get("size", 0)), deadline)
            except (OSError, SandboxError) as exc:
                self._dead = ("the sandbox is no longer running (its processes were killed or it stopped "
                              f"answering: {exc}); start a new episode")
                self._finalizer()
                raise SandboxError(self._dead) from None
            return reply, data

    def _read_info(self, fd: int) -> int:
        data = b""
        deadline = time.monotonic() + 30.0
        while b"}" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise SandboxError("no answer from bubblewrap")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise SandboxError("bubblewrap exited before the sandbox started")
            data += chunk
        return int(json.loads(data.decode())["child-pid"])

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        chunks = []
        while n > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise SandboxError("the sandbox did not answer in time")
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise SandboxError("the sandbox closed its output")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_header(self, deadline: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise SandboxError("the sandbox did not answer in time")
            chunk = os.read(fd, 1)
            if not chunk:
                raise SandboxError("the sandbox closed its output")
            line += chunk
        return json.loads(line)
