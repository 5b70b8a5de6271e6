"""The local sandbox's writable root: copy-on-write layers over the read-only host.

A task's ``Dockerfile`` may ``COPY`` into ``/opt`` or ``RUN apt-get``-style steps that write
to ``/usr/local`` or ``/etc``. For that the sandbox's ``/usr`` and ``/etc`` are overlay file
systems (the host's directory below, an in-memory upper layer above) and its root
directory is an in-memory directory of its own: every write lands in memory, nothing
reaches the host, and everything vanishes with the sandbox. Where ``/usr`` and ``/etc`` are
on the root's file system, one overlay of ``/`` serves both (the sandbox sees only those two
directories of it); otherwise each gets its own.

The layers are mounted by a small ``sh`` script in a private mount namespace
(``unshare --mount --propagation private``) that then starts bubblewrap, which binds
them into the sandbox. The same script makes the process join the sandbox's cgroups
(:mod:`agent_gym.sandbox.cgroup`) before anything else runs. Mounting needs root (or an
unprivileged overlay in a user namespace, which this module does not set up):
:func:`writable_root_unavailable_reason` says why not.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "LAYERED",
    "chown_written",
    "layer_mount_args",
    "mount_point",
    "wrapper_command",
    "writable_root_unavailable_reason",
]

LAYERED = ("/usr", "/etc")
"""Host directories seen through a copy-on-write layer (the rest of the root is the sandbox's own)."""

_EMPTY_DIRS = ("/opt", "/srv", "/mnt", "/var/lib", "/var/log")
_SINGLE: list[bool] = []


def _single_layer() -> bool:
    """Whether one overlay of ``/`` serves every layered directory (they are all on the root's file system).

    One mount instead of one per directory: the script starts one process fewer. The sandbox still
    sees only the layered directories of it.
    """
    if not _SINGLE:
        try:
            device = os.stat("/").st_dev
            _SINGLE.append(all(os.stat(p).st_dev == device and not os.path.ismount(p) for p in LAYERED))
        except OSError:
            _SINGLE.append(False)
    return _SINGLE[0]


def _layers() -> list[tuple[str, str]]:
    """(lower directory, layer name) of each overlay."""
    return [("/", "all")] if _single_layer() else [(path, path.strip("/")) for path in LAYERED]


def _merged(path: str) -> str:
    """Where the layered directory ``path`` is, below the mount point, once the overlays are mounted."""
    return f"m/all{path}" if _single_layer() else f"m/{path.strip('/')}"


def mount_point() -> str:
    """The (empty, root-only) host directory the layers' memory file system is mounted on, privately."""
    path = Path(tempfile.gettempdir()) / "agent_gym_rootfs"
    path.mkdir(mode=0o700, exist_ok=True)
    return str(path)


def wrapper_command(layers_mb: int | None, cgroup_files: list[str], command: list[str]) -> list[str]:
    """``command`` (bubblewrap's argv) started by a script that joins cgroups and mounts the layers.

    Args:
        layers_mb: Size of the in-memory file system of the root and the upper layers, MiB;
            None: no layers (only the cgroups are joined).
        cgroup_files: ``cgroup.procs`` files to write the process's pid to.
        command: The command the script runs in its place (``exec``).
    """
    lines = ["set -e"]
    lines += [f"echo $$ > {shlex.quote(path)}" for path in cgroup_files]
    prefix: list[str] = []
    if layers_mb is not None:
        base = mount_point()
        q = shlex.quote(base)
        lines.append(f"mount -t tmpfs -o size={int(layers_mb)}m,mode=0755 agent_gym_rootfs {q}")
        made = [f"{q}/root"]
        for _, name in _layers():
            made += [f"{q}/u/{name}", f"{q}/w/{name}", f"{q}/m/{name}"]
        lines.append("mkdir -p " + " ".join(made))
        for lower, name in _layers():
            lines.append(f"mount -t overlay agent_gym_{name} -o lowerdir={lower},upperdir={q}/u/{name},"
                         f"workdir={q}/w/{name} {q}/m/{name}")
        unshare = shutil.which("unshare") or "unshare"
        prefix = [unshare, "--mount", "--propagation", "private", "--"]
    lines.append('exec "$@"')
    return [*prefix, "/bin/sh", "-c", "\n".join(lines), "sh", *command]


def layer_mount_args() -> list[str]:
    """Bubblewrap arguments: the in-memory root, the layered directories and the usual empty ones."""
    base = mount_point()
    args = ["--bind", f"{base}/root", "/"]
    for path in LAYERED:
        args += ["--bind", f"{base}/{_merged(path)}", path]
    for path in _EMPTY_DIRS:
        args += ["--dir", path]
    args += ["--perms", "01777", "--dir", "/var/tmp"]
    return args


def _chown_tree(top: str, uid: int, gid: int, skip: frozenset[str] = frozenset(), through: str | None = None) -> int:
    """``lchown`` everything below ``top`` (not ``top`` itself, no symlink followed); returns the count.

    ``through``: change each entry at the same relative path below ``through`` instead (an
    upper layer is read to find what was written, but changed through its overlay, which
    otherwise keeps the old owner in its own inodes).
    """
    count = 0
    try:
        device = os.lstat(top).st_dev
    except OSError:
        return 0
    for root, dirs, files in os.walk(top):
        if root == top:
            dirs[:] = [d for d in dirs if d not in skip]
        keep = []
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if st.st_dev != device:  # another file system mounted here (e.g. the host's Python, read-only)
                    continue
                if name in dirs and stat.S_ISDIR(st.st_mode):
                    keep.append(name)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # an overlay whiteout
                    continue
                if st.st_uid != uid or st.st_gid != gid:
                    target = path if through is None else through + path[len(top):]
                    os.chown(target, uid, gid, follow_symlinks=False)
                    count += 1
            except OSError:
                continue
        dirs[:] = keep
    return count


def chown_written(wrapper_pid: int, sandbox_pid: int, uid: int, gid: int, layered: bool,
                  dirs: tuple[str, ...]) -> int:
    """Give the sandbox user what the setup steps wrote as root; returns the entries changed.

    Reads the layers through ``/proc/<wrapper_pid>/root`` (the private mount namespace where
    they are mounted) and the sandbox's own file systems (``dirs``, e.g. ``/app``) through
    ``/proc/<sandbox_pid>/root``; symbolic links are changed themselves, never followed.
    """
    count = 0
    if layered:
        base = f"/proc/{wrapper_pid}/root{mount_point()}"
        for path in LAYERED:
            upper = f"{base}/u/all{path}" if _single_layer() else f"{base}/u/{path.strip('/')}"
            count += _chown_tree(upper, uid, gid, through=f"/proc/{sandbox_pid}/root{path}")
        skip = frozenset(p.strip("/").split("/")[0] for p in (*LAYERED, *dirs, "/proc", "/dev", "/run", "/sys"))
        count += _chown_tree(f"{base}/root", uid, gid, skip)
    for path in dirs:
        count += _chown_tree(f"/proc/{sandbox_pid}/root{path}", uid, gid)
    return count


_REASON: list[str | None] = []


def writable_root_unavailable_reason() -> str | None:
    """None if copy-on-write layers can be mounted here, else why not (checked once per process)."""
    if _REASON:
        return _REASON[0]
    reason = None
    if os.geteuid() != 0:
        reason = "the writable root needs root (it mounts overlay file systems in a private mount namespace)"
    elif shutil.which("unshare") is None:
        reason = "the writable root needs 'unshare' (util-linux)"
    else:
        try:
            probe = subprocess.run(wrapper_command(16, [], ["true"]), capture_output=True, timeout=30)
            if probe.returncode != 0:
                reason = f"overlay mounts failed: {probe.stderr.decode(errors='replace').strip()[-300:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"overlay mounts failed: {exc}"
    _REASON.append(reason)
    return reason
