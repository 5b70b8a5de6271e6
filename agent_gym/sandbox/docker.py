"""``DockerSandbox``: the :class:`~agent_gym.sandbox.base.Sandbox` protocol in one Docker container per episode.

For tasks that name a container image. Needs the Docker SDK (``pip install
'agent-gym[terminal]'``) and a Docker engine. Each sandbox owns one container started
from the image with no network (``network_mode="none"``), every capability dropped but
those a root shell needs for files (``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``, ``FSETID``,
``SETUID``, ``SETGID``, ``KILL``), ``no-new-privileges``, and the limits of
:class:`~agent_gym.sandbox.base.SandboxLimits`: memory (``mem_limit`` = ``memswap_limit``),
processes (``pids_limit``), CPUs (``nano_cpus``), and ``ulimit`` for CPU time, file size
and open files (the container's disk is not limited: most storage drivers cannot).
Containers carry the label ``agent_gym.sandbox`` (and ``agent_gym.sandbox.owner``: host and
process id) and are removed (forced) on ``close``, at garbage collection and at interpreter
exit; those of a process killed before its exit handlers ran are removed by the next process
that starts a sandbox on the host (:func:`remove_orphans`).

The persistent session: every :meth:`DockerSandbox.run` is one ``docker exec`` of bash
that restores the shell state saved by the previous command (variables, functions,
aliases, options, working directory) and saves it again when the command ends, so ``cd``,
``export`` and functions persist as in a terminal. The command itself is copied into the
container as a file (any length, heredocs included), reads EOF on stdin, and on timeout
every process started since the command began is killed inside the container. Output is
kept up to the limit (head and tail around a marker).

:class:`DockerPool` keeps pre-started containers per (image, limits, working directory)
so that an episode does not wait for a container to start.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

from agent_gym.checks import check_timeout
from agent_gym.errors import SandboxError, SandboxUnavailableError
from agent_gym.sandbox.base import Result, SandboxLimits
from agent_gym.sandbox.docker_pool import pool_for, remove_container, start_container
from agent_gym.utils.runtime import WorkerPool

__all__ = [
    "DockerSandbox",
    "container_options",
    "docker_client",
    "docker_unavailable_reason",
    "image_config",
    "remove_orphans",
    "shared_client",
]

LABEL = "agent_gym.sandbox"
_CTL = "/run/agent_gym"
_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"]
_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat",
        "PYTHONDONTWRITEBYTECODE": "1", "DEBIAN_FRONTEND": "noninteractive"}
# Kills every process whose start time (field 22 of /proc/PID/stat) is at or after the tick in
# $__tick, except itself, PID 1 and the container's main process ($__keep); builtins only, so
# it forks nothing it could kill.
_KILL_SINCE = r"""
for __d in /proc/[0-9]*; do
  __p=${__d#/proc/}
  case " 1 $$ $__keep " in *" $__p "*) continue;; esac
  read -r __s <"$__d/stat" 2>/dev/null || continue; __s=${__s##*) }; set -- $__s
  [ "${20}" -ge "$__tick" ] 2>/dev/null && kill -9 "$__p" 2>/dev/null
done
"""
_RUN = r"""
read -r __s </proc/$$/stat; __s=${__s##*) }; set -- $__s; echo "${20}" >/run/agent_gym/tick.$__ag_seq
if [ -f /run/agent_gym/state ]; then . /run/agent_gym/state >/dev/null 2>&1; fi
set +e +u +o pipefail; shopt -s expand_aliases; trap - ERR DEBUG RETURN; unset __s
__ag_pre() { return "${1:-0}"; }
__ag_save() {
  __ag_rc=$?
  { declare -p; declare -f; alias -p; shopt -p; set +o; umask -p; printf 'cd -- %q\n' "$PWD"; } \
    >/run/agent_gym/state.new 2>/dev/null
  mv -f /run/agent_gym/state.new /run/agent_gym/state
}
trap __ag_save EXIT
__ag_pre "$__ag_rc"; . /run/agent_gym/cmd </dev/null 2>&1
"""



def docker_client() -> Any:
    """A Docker client from the environment (``DOCKER_HOST`` or the local socket), checked with ``ping``.

    Raises:
        ImportError: If the Docker SDK is not installed (names the extra).
        SandboxUnavailableError: If no Docker engine answers.
    """
    try:
        import docker
    except ImportError:
        raise ImportError("the Docker sandbox needs the Docker SDK: pip install 'agent-gym[terminal]'") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise SandboxUnavailableError(f"no Docker engine answers ({type(exc).__name__}: {exc}); start Docker "
                                      "or set DOCKER_HOST") from None
    return client


_SHARED: list[Any] = []
_SHARED_LOCK = threading.Lock()
_OUTPUT_READERS = WorkerPool(name="agent-gym-docker-output")  # read a command's output while it runs


def shared_client() -> Any:
    """One :func:`docker_client` per process (sandboxes share it, and with it their container pools).

    At its creation, containers that earlier processes of this host left behind (killed before
    their exit handlers ran) are removed: see :func:`remove_orphans`.
    """
    with _SHARED_LOCK:
        if not _SHARED:
            client = docker_client()
            remove_orphans(client)
            _SHARED.append(client)
        return _SHARED[0]


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(client: Any) -> list[str]:
    """Remove the sandbox containers whose owning process (on this host) is gone; returns their ids."""
    removed = []
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        owner = str((getattr(container, "labels", None) or {}).get(f"{LABEL}.owner", ""))
        name, _, pid = owner.rpartition(":")
        if name == host and pid.isdigit() and not _pid_alive(int(pid)):
            remove_container(container)
            removed.append(container.id)
    return removed


def docker_unavailable_reason() -> str | None:
    """None if the Docker SDK is installed and an engine answers ``ping``, else why not."""
    try:
        docker_client().close()
    except (ImportError, SandboxUnavailableError) as exc:
        return str(exc)
    return None


def image_config(client: Any, image: str) -> tuple[dict[str, str], str | None]:
    """The image's environment (``ENV``) and working directory (``WORKDIR``; None when unset).

    Raises:
        SandboxUnavailableError: If the engine does not have the image (no registry is asked).
    """
    try:
        config = client.images.get(image).attrs.get("Config") or {}
    except Exception as exc:
        raise SandboxUnavailableError(f"the Docker engine has no image {image!r} ({type(exc).__name__}: {exc}); "
                                      "build or load it first") from None
    env = dict(str(item).partition("=")[::2] for item in config.get("Env") or [])
    return env, (config.get("WorkingDir") or None)


def container_options(image: str, limits: SandboxLimits, workdir: str = "/app") -> dict[str, Any]:
    """The keyword arguments of ``client.containers.run`` for one sandbox container."""
    mib = 1 << 20
    return {
        "image": image,
        "command": ["sleep", "infinity"],
        "detach": True,
        "init": True,
        "stdin_open": False,
        "tty": False,
        "network_mode": "none",
        "working_dir": workdir,
        "environment": dict(_ENV),
        "labels": {LABEL: "1", f"{LABEL}.owner": _owner()},
        "mem_limit": limits.memory_mb * mib,
        "memswap_limit": limits.memory_mb * mib,
        "pids_limit": limits.processes,
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [
            {"name": "cpu", "soft": limits.cpu_seconds, "hard": limits.cpu_seconds},
            {"name": "fsize", "soft": limits.file_size_mb * mib, "hard": limits.file_size_mb * mib},
            {"name": "nofile", "soft": limits.open_files, "hard": limits.open_files},
            {"name": "core", "soft": 0, "hard": 0},
        ],
        "cap_drop": ["ALL"],
        "cap_add": list(_CAPS),
        "security_opt": ["no-new-privileges"],
        "hostname": "sandbox",
    }


def _tar_one(path: str, data: bytes, mode: int) -> bytes:
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(os.path.basename(path))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class DockerSandbox:
    """One container per sandbox with a persistent bash session (see the module docstring).

    Args:
        image: The container image (it needs ``bash``; pytest-graded tasks need ``python3 -m pytest``).
        limits: Resource limits (default :class:`SandboxLimits`).
        timeout: Default seconds per command.
        env: Extra environment variables of every command.
        workdir: Working directory of the shell (default ``/app``).
        client: A Docker client (default :func:`shared_client`).
        pool_size: Pre-started containers kept per configuration (0: start one per sandbox).

    Raises:
        ImportError: Without the Docker SDK (``pip install 'agent-gym[terminal]'``).
        SandboxUnavailableError: If no Docker engine answers or the container does not start.
    """

    def __init__(
        self,
        image: str,
        limits: SandboxLimits | None = None,
        *,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        workdir: str = "/app",
        client: Any = None,
        pool_size: int = 2,
    ) -> None:
        if not isinstance(image, str) or not image:
            raise ValueError(f"image: expected a non-empty str, got {image!r}")
        if limits is not None and not isinstance(limits, SandboxLimits):
            raise TypeError(f"limits: expected SandboxLimits or None, got {type(limits).__name__}")
        self.image = image
        self.limits = limits or SandboxLimits()
        self.timeout = check_timeout("timeout", timeout, allow_none=False)
        self.workdir = workdir
        self.env = {**_ENV, "HOME": "/root", **{str(k): str(v) for k, v in dict(env or {}).items()}}
        self.client = client if client is not None else shared_client()
        self._lock = threading.Lock()
        self._closed = False
        self._seq = 0
        self._oom_kills = 0
        options = container_options(image, self.limits, workdir)
        try:
            if pool_size > 0:
                self.container = pool_for(self.client, options, pool_size).acquire()
            else:
                self.container = start_container(self.client, options)
        except Exception as exc:
            raise SandboxUnavailableError(f"could not start a container from {image!r}: {exc}") from None
        self._finalizer = weakref.finalize(self, remove_container, self.container)
        first = self._exec(["bash", "-c", f"mkdir -p {_CTL} {workdir} && read -r s </proc/$$/stat && "
                            "s=${s##*) } && set -- $s && echo ${20} && cat /proc/1/task/1/children"],
                           {}, "/", 30.0)
        words = first.output.split()
        if first.exit_code != 0 or not words or not words[0].isdigit():
            self.close()
            raise SandboxUnavailableError(f"the image {image!r} cannot run a sandbox (it needs bash): "
                                          f"{first.output[-300:]}")
        self._session_tick = int(words[0])
        self._keep = " ".join(w for w in words[1:] if w.isdigit())  # the main process under the init

    @staticmethod
    def image_config(image: str, client: Any = None) -> tuple[dict[str, str], str | None]:
        """The image's ``ENV`` and ``WORKDIR`` (see :func:`image_config`; default client :func:`shared_client`)."""
        return image_config(client if client is not None else shared_client(), image)

    # ------------------------------------------------------------------ protocol

    def run(self, command: str, timeout: float | None = None) -> Result:
        """Run ``command`` in the persistent session (see :meth:`Sandbox.run`); never raises for the command."""
        if not isinstance(command, str):
            raise TypeError(f"command: expected str, got {type(command).__name__}")
        seconds = self._seconds(timeout)
        with self._lock:
            self._seq += 1
            seq = self._seq
        try:
            self.write_file(f"{_CTL}/cmd", command.encode("utf-8", "surrogatepass"), 0o600)
        except SandboxError as exc:
            return Result(exit_code=125, output=f"[sandbox error: {exc}]")
        env = {**self.env, "__ag_seq": str(seq)}
        return self._exec(["bash", "--norc", "--noprofile", "-c", _RUN], env, self.workdir, seconds,
                          tick_file=f"{_CTL}/tick.{seq}")

    def exec(self, command: str, timeout: float | None = None, env: Mapping[str, str] | None = None,
             cwd: str | None = None) -> Result:
        """Run ``bash -c command`` in a fresh process (the sandbox's environment plus ``env``)."""
        if not isinstance(command, str):
            raise TypeError(f"command: expected str, got {type(command).__name__}")
        seq_file = f"{_CTL}/tick.x{time.monotonic_ns()}"
        script = (f'read -r __s </proc/$$/stat; __s=${{__s##*) }}; set -- $__s; echo "${{20}}" >{seq_file}; '
                  f"unset __s; exec bash --norc --noprofile -c {_quote(command)} </dev/null 2>&1")
        return self._exec(["bash", "-c", script], {**self.env, **dict(env or {})}, cwd or self.workdir,
                          self._seconds(timeout), tick_file=seq_file)

    def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` in the container (parents are created).

        Raises:
            SandboxError: If the sandbox is closed or the write failed.
        """
        path = self._inside(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        parent = os.path.dirname(path) or "/"
        try:
            self._check_open()
            if parent not in ("/", self.workdir, _CTL):
                self.container.exec_run(["mkdir", "-p", parent])
            if not self.container.put_archive(parent, _tar_one(path, payload, mode)):
                raise SandboxError(f"write {path}: the engine refused the file")
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"write {path}: {exc}") from None

    def write_files(self, entries: list[tuple[str, bytes | None, int]]) -> None:
        """Write several files and directories in one transfer: ``(path, data or None for a directory, mode)``.

        Parents are created (owned by root, mode 0755) as the engine unpacks the archive at ``/``.

        Raises:
            SandboxError: If the sandbox is closed or the engine refused the archive.
        """
        import tarfile

        buffer = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, data, mode in entries:
                info = tarfile.TarInfo(self._inside(path).lstrip("/") or ".")
                info.mtime, info.mode = now, mode
                if data is None:
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        try:
            self._check_open()
            if not self.container.put_archive("/", buffer.getvalue()):
                raise SandboxError("write: the engine refused the files")
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"write {len(entries)} files: {exc}") from None

    def read_file(self, path: str, limit: int = 16 << 20) -> bytes:
        """Read up to ``limit`` bytes of ``path`` in the container.

        Raises:
            SandboxError: If the sandbox is closed or the file cannot be read.
        """
        import tarfile

        path = self._inside(path)
        try:
            self._check_open()
            chunks, _ = self.container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None else None
                if handle is None:
                    raise SandboxError(f"read {path}: not a regular file")
                return handle.read(limit)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"read {path}: {exc}") from None

    def stop_shell(self) -> None:
        """Kill every process started in the sandbox (files and the saved shell state stay)."""
        self._kill_since(self._session_tick)

    @property
    def alive(self) -> bool:
        """False once closed."""
        return not self._closed

    def close(self) -> None:
        """Remove the container (every process and file with it); safe to call twice."""
        self._closed = True
        if hasattr(self, "_finalizer"):
            self._finalizer()

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DockerSandbox(image={self.image!r}, {'closed' if self._closed else 'running'})"

    # ------------------------------------------------------------------ internals

    def _seconds(self, timeout: float | None) -> float:
        value = self.timeout if timeout is None else check_timeout("timeout", timeout, allow_none=False)
        assert value is not None
        return float(value)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")

    def _inside(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise ValueError(f"path: expected a non-empty str, got {path!r}")
        return path if path.startswith("/") else f"{self.workdir}/{path}"

    def _kill_since(self, tick: int | str) -> None:
        try:
            self.container.exec_run(["bash", "-c", f"__tick={int(tick)} __keep='{self._keep}'\n{_KILL_SINCE}"])
        except Exception:
            pass

    def _exec(self, argv: list[str], env: Mapping[str, str], workdir: str, seconds: float,
              tick_file: str | None = None) -> Result:
        """One ``docker exec``: output kept up to the limit, processes killed after ``seconds``."""
        if self._closed:
            return Result(exit_code=125, output="[sandbox error: the sandbox is closed]")
        api = self.client.api
        limit = self.limits.output_bytes
        cap = max(4 * limit, 1 << 20)
        state: dict[str, Any] = {"head": b"", "tail": b"", "size": 0, "big": False, "error": None}

        def pump() -> None:
            try:
                for chunk in api.exec_start(exec_id, stream=True, demux=False):
                    state["size"] += len(chunk)
                    if len(state["head"]) < limit:
                        state["head"] += chunk[: limit - len(state["head"])]
                    state["tail"] = (state["tail"] + chunk)[-limit:]
                    if state["size"] > cap and not state["big"]:
                        state["big"] = True
                        if tick_file:
                            self._kill_from_file(tick_file)
            except Exception as exc:
                state["error"] = exc

        try:
            exec_id = api.exec_create(self.container.id, argv, stdout=True, stderr=True, stdin=False, tty=False,
                                      environment=dict(env), workdir=workdir)["Id"]
        except Exception as exc:
            return Result(exit_code=125, output=f"[sandbox error: {exc}]")
        reader = _OUTPUT_READERS.submit(pump)
        timed_out = not concurrent.futures.wait([reader], seconds).done
        if timed_out:
            if tick_file:
                self._kill_from_file(tick_file)
            concurrent.futures.wait([reader], 10.0)  # past that the reader is abandoned
        if state["error"] is not None and not self._closed:
            return Result(exit_code=125, output=f"[sandbox error: {state['error']}]")
        try:
            code = api.exec_inspect(exec_id).get("ExitCode")
        except Exception:
            code = None
        size = state["size"]
        if size <= limit:
            data, truncated = state["head"], False
        else:
            marker = f"\n[... output truncated: {size - limit} bytes cut ...]\n".encode()
            data, truncated = state["head"][: limit // 2] + marker + state["tail"][-(limit - limit // 2):], True
        text = data.decode("utf-8", "replace")
        notes = []
        if state["big"]:
            truncated = True
            notes.append("[the command was stopped: its output exceeded the limit]")
        if timed_out:
            code = 124
            notes.append(f"[the command timed out after {seconds:g} s and was killed]")
        killed = None
        seen = self._oom_kills
        if not timed_out and (code == 137 or "Killed" in text[-2000:]) and self._oom_kills_now() > seen:
            killed = "memory"
            notes.append(f"[a process was killed: the sandbox reached its memory limit of {self.limits.memory_mb} MiB]")
        if notes:
            text += ("\n" if text and not text.endswith("\n") else "") + "\n".join(notes)
        return Result(exit_code=137 if code is None else int(code), output=text, timed_out=timed_out,
                      truncated=truncated, killed=killed)

    def _oom_kills_now(self) -> int:
        """Processes the kernel killed for the container's memory limit so far (read in the container's cgroup)."""
        try:
            _, out = self.container.exec_run(["cat", "/sys/fs/cgroup/memory.events",
                                              "/sys/fs/cgroup/memory/memory.oom_control"])
        except Exception:
            return self._oom_kills
        for line in (out or b"").decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                count, self._oom_kills = int(value), max(self._oom_kills, int(value))
                return count
        return self._oom_kills

    def _kill_from_file(self, tick_file: str) -> None:
        try:
            self.container.exec_run(["bash", "-c", f"read -r __tick <{tick_file} || __tick={self._session_tick}; "
                                     f"__keep='{self._keep}'\n{_KILL_SINCE}"])
        except Exception:
            pass


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
