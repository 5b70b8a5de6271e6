"""The process that runs inside a local sandbox and serves the host's requests.

This file is not imported by the host: the sandbox's Python interpreter starts with a
short loader (``python -I -S -B -c LOADER SIZE CONFIG``) that reads this module's code
object (compiled once by the host, sent with ``marshal``) from its standard input and
runs it. It uses only modules built into the interpreter or without imports of their
own (no ``json``, ``signal``, ``re``): the driver's start is most of a sandbox's setup time.

Protocol (over the driver's stdin and stdout). A request is a 10-digit length, a
``marshal``-ed dict (the host is trusted) and ``size`` raw bytes. A reply is one JSON
line (written by :func:`_json`; the host does not trust the sandbox) followed by ``size``
raw bytes. Requests: ``run`` (a command in the persistent shell), ``exec`` (a command in
a fresh process; with ``channel``, its output through a pipe and a private channel on its
fd 3), ``write``, ``mkdir``, ``read``, ``stop_shell`` and ``close``. End of input means
the host is gone: the driver exits, and with it every process of the sandbox's PID namespace.

When the driver starts as root (the host ran bubblewrap as root), it keeps only
CAP_SETUID and CAP_SETGID and runs every other process under the sandbox's own
unprivileged user id, so that nothing in the sandbox can signal or trace it.
"""

import marshal
import os
import resource
import select
import sys
import time

try:  # the C module behind ``signal`` (which imports ``enum``, slow to start)
    import _signal as signal
except ImportError:  # pragma: no cover - other interpreters
    import signal

CTL = "/run/agent_gym"
CONFIG = marshal.loads(bytes.fromhex(sys.argv[2]))
UID = CONFIG["uid"]
GID = CONFIG["gid"]
AS_ROOT = os.getuid() == 0 and UID != 0
LIMITS = CONFIG["rlimits"]
ENV = CONFIG["env"]
WORKDIR = CONFIG["workdir"]
TICKS = os.sysconf("SC_CLK_TCK")
BOOT = """
shopt -s expand_aliases
__ag_pre() { return "${1:-0}"; }
__ag_post() {
  __ag_rc=$1
  { declare -p; declare -f; alias -p; shopt -p; set +o; umask -p; printf 'cd -- %q\\n' "$PWD"; } \
    >/run/agent_gym/state 2>/dev/null
  printf '%s %d\\n' "$__ag_tok" "$__ag_rc" >&3
}
"""
RESTORE = """
if [ -f /run/agent_gym/state ]; then . /run/agent_gym/state >/dev/null 2>&1; fi
set +e +u +o pipefail; shopt -s expand_aliases; trap - EXIT ERR DEBUG RETURN
"""


def _limit_self():
    for name, value in LIMITS.items():
        which = getattr(resource, name)
        resource.setrlimit(which, (value, value))


def _drop(root=False):
    """In a child: become the sandbox user with no capabilities and the sandbox limits.

    ``root``: stay root (the setup steps of a task); only the limits apply.
    """
    _limit_self()
    if AS_ROOT and not root:
        os.setgroups([])
        os.setresgid(GID, GID, GID)
        os.setresuid(UID, UID, UID)


class As:
    """Run file operations with the sandbox user's rights (effective ids only; ``root``: keep root's)."""

    def __init__(self, root=False):
        self.switch = AS_ROOT and not root

    def __enter__(self):
        if self.switch:
            os.setegid(GID)
            os.seteuid(UID)

    def __exit__(self, *exc):
        if self.switch:
            os.seteuid(0)
            os.setegid(0)


def _ticks_now():
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS)


def _processes():
    """(pid, start tick) of every process of the sandbox."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        found.append((int(name), int(fields[19])))
    return found


def _kill_since(start_tick, keep):
    """SIGKILL every process started at or after ``start_tick`` except ``keep``, until none is left."""
    for _ in range(200):
        victims = [pid for pid, tick in _processes() if tick >= start_tick and pid not in keep and pid != 1]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def _read_output(path, limit):
    """The output file's text cut to ``limit`` bytes (head and tail) and whether it was cut."""
    try:
        with As():
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return b"", False
    try:
        size = os.fstat(fd).st_size
        if size <= limit:
            return os.read(fd, limit + 1)[:limit], False
        head = os.pread(fd, limit // 2, 0)
        tail = os.pread(fd, limit - limit // 2, size - (limit - limit // 2))
        marker = f"\n[... output truncated: {size - limit} bytes cut ...]\n".encode()
        return head + marker + tail, True
    finally:
        os.close(fd)
        with As():
            try:
                os.unlink(path)
            except OSError:
                pass


class Shell:
    """The persistent bash session: commands run in the shell itself; state is snapshotted after each."""

    def __init__(self):
        self.pid = self.ctl = self.mark = None
        self.seq = 0
        self.token = os.urandom(8).hex()
        self.start()

    def start(self):
        ctl_r, ctl_w = os.pipe()
        mark_r, mark_w = os.pipe()
        os.set_inheritable(ctl_r, True)
        os.set_inheritable(mark_w, True)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                os.dup2(ctl_r, 0)
                os.dup2(mark_w, 3)
                null = os.open("/dev/null", os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.closerange(4, 1 << 16)
                _drop()
                os.chdir(WORKDIR)
                env = dict(ENV, __ag_tok=self.token)
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile"], env)
            finally:
                os._exit(127)
        os.close(ctl_r)
        os.close(mark_w)
        self.pid, self.ctl, self.mark = pid, ctl_w, mark_r
        self.buffer = b""
        os.write(self.ctl, (BOOT + RESTORE).encode())

    def alive(self):
        return self.ctl is not None

    def kill(self):
        if self.ctl is None:
            return
        _kill_since(0, {os.getpid()})
        for fd in (self.ctl, self.mark):
            try:
                os.close(fd)
            except OSError:
                pass
        self.ctl = self.mark = None
        if self.pid is not None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        self.pid = None

    def _wait_mark(self, deadline, out_path, out_cap):
        """Wait for the done line; returns (exit code or None, reason) with reason in ok/timeout/big/died."""
        while True:
            if b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                parts = line.split()
                if len(parts) == 2 and parts[0] == self.token.encode():
                    return int(parts[1]), "ok"
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, "timeout"
            ready, _, _ = select.select([self.mark, 0], [], [], min(remaining, 0.05))
            if 0 in ready and not os.read(0, 1 << 16):
                _exit_all()
            if self.mark in ready:
                chunk = os.read(self.mark, 4096)
                if not chunk:
                    return None, "died"
                self.buffer += chunk
            elif out_cap:
                try:
                    if os.stat(out_path).st_size > out_cap:
                        return None, "big"
                except OSError:
                    pass

    def run(self, command, timeout, limit):
        self.seq += 1
        cmd_path = f"{CTL}/cmd"
        out_path = f"{CTL}/out"
        with As():
            for path in (cmd_path, out_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            fd = os.open(cmd_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as f:
                f.write(command)
        start_tick = _ticks_now()
        line = ('{ __ag_pre "$__ag_rc"; . /run/agent_gym/cmd; } </dev/null >/run/agent_gym/out 2>&1 3>&-; '
                "__ag_post $?\n")
        notes = []
        try:
            os.write(self.ctl, line.encode())
        except OSError:
            pass
        code, reason = self._wait_mark(time.monotonic() + timeout, out_path, max(4 * limit, 1 << 20))
        timed_out = reason == "timeout"
        if reason in ("timeout", "big"):
            _kill_since(start_tick, {os.getpid(), self.pid})
            code, again = self._wait_mark(time.monotonic() + 1.0, out_path, 0)
            if again != "ok":
                reason = "stuck" if again == "timeout" else again
            elif reason == "big":
                notes.append("[the command was stopped: its output exceeded the limit]")
        if reason in ("stuck", "died"):
            status = None
            if reason == "died":
                try:
                    _, status = os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
                self.pid = None
            self.kill()
            if status is not None and os.WIFEXITED(status):
                code = os.WEXITSTATUS(status)
                notes.append(f"[the shell exited with code {code}; a new shell was started with the "
                             "saved variables, functions and working directory]")
            else:
                notes.append("[the command was killed together with the shell; a new shell was started "
                             "with the saved variables, functions and working directory]")
            self.start()
        data, truncated = _read_output(out_path, limit)
        if reason == "big":
            truncated = True
        if timed_out:
            code = 124 if code is None or code == 137 else code
            notes.append(f"[the command timed out after {timeout:g} s and was killed]")
        if code is None:
            code = 137
        if notes:
            data += ("\n" if data and not data.endswith(b"\n") else "").encode() + "\n".join(notes).encode()
        return {"exit_code": code, "timed_out": timed_out, "truncated": truncated}, data


def _exec(script, timeout, limit, env, cwd, root=False):
    """Run ``bash -c script`` in a fresh process with a clean environment (``root``: as root)."""
    out_path = f"{CTL}/exec.out"
    with As():
        try:
            os.unlink(out_path)
        except OSError:
            pass
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    start_tick = _ticks_now()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.closerange(3, 1 << 16)
            _drop(root)
            os.chdir(cwd)
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-c", script], dict(ENV, **env))
        finally:
            os._exit(127)
    os.close(out)
    deadline = time.monotonic() + timeout
    status = None
    timed_out = False
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        if time.monotonic() > deadline:
            timed_out = True
            _kill_since(start_tick, {os.getpid()})
            _, status = os.waitpid(pid, 0)
            break
        ready, _, _ = select.select([0], [], [], 0.005)
        if ready and not os.read(0, 1 << 16):
            _exit_all()
    _kill_since(start_tick, {os.getpid()} | ({SHELL.pid} if SHELL.pid else set()))
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    data, truncated = _read_output(out_path, limit)
    if timed_out:
        code = 124
    return {"exit_code": code, "timed_out": timed_out, "truncated": truncated}, data


class _Kept:
    """Head and tail of a stream read in chunks, cut as ``_read_output`` cuts a file."""

    def __init__(self, limit):
        self.limit, self.size, self.head, self.tail = limit, 0, b"", b""

    def add(self, chunk):
        self.size += len(chunk)
        if len(self.head) < self.limit:
            self.head += chunk[: self.limit - len(self.head)]
        self.tail = (self.tail + chunk)[-self.limit:]

    def data(self):
        if self.size <= self.limit:
            return self.head, False
        keep = self.limit - self.limit // 2
        marker = f"\n[... output truncated: {self.size - self.limit} bytes cut ...]\n".encode()
        return self.head[: self.limit // 2] + marker + self.tail[-keep:], True


def _exec_channel(script, timeout, limit, env, cwd, send, cap):
    """``_exec`` with the output read from a pipe and a private channel on the command's fd 3.

    Nothing in the sandbox can open, block or replace the output (no file holds it). fd 3 is one
    end of a socket pair (a socket cannot be opened again through ``/proc``): ``send`` is written
    into it before the command starts, and up to ``cap`` bytes the command's processes write there
    come back after the output. The command runs as the sandbox user; every process it left is
    killed before the streams are read to their end.
    """
    import _socket

    out_r, out_w = os.pipe()
    mine, theirs = (s.detach() for s in _socket.socketpair())
    view = memoryview(send)
    while view:
        view = view[os.write(mine, view):]
    start_tick = _ticks_now()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(theirs, 3)
            os.set_inheritable(3, True)
            os.closerange(4, 1 << 16)
            _drop()
            os.chdir(cwd)
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-c", script], dict(ENV, **env))
        finally:
            os._exit(127)
    os.close(out_w)
    os.close(theirs)
    for fd in (out_r, mine):
        os.set_blocking(fd, False)
    output, channel, overflow = _Kept(limit), [], False
    open_fds = {out_r, mine}

    def pump(wait):
        nonlocal overflow
        ready, _, _ = select.select([0, *open_fds], [], [], wait)
        if 0 in ready and not os.read(0, 1 << 16):
            _exit_all()
        for fd in ready:
            if fd == 0:
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                output.add(chunk)
            elif sum(map(len, channel)) + len(chunk) <= cap:
                channel.append(chunk)
            else:
                overflow = True

    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            _kill_since(start_tick, {os.getpid()})
            _, status = os.waitpid(pid, 0)
            break
        pump(0.005)
    _kill_since(start_tick, {os.getpid()} | ({SHELL.pid} if SHELL.pid else set()))
    end = time.monotonic() + 5.0
    while open_fds and time.monotonic() < end:  # every writer is gone: read to the end
        pump(0.05)
    for fd in (out_r, mine):
        os.close(fd)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    data, truncated = output.data()
    if timed_out:
        code = 124
    extra = b"".join(channel)
    return ({"exit_code": code, "timed_out": timed_out, "truncated": truncated, "output_size": len(data),
             "channel_overflow": overflow}, data + extra)


def _write(path, data, mode, root=False):
    with As(root):
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with open(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
    return {}, b""


def _mkdirs(paths, root=False):
    with As(root):
        for path in paths:
            os.makedirs(path, exist_ok=True)
    return {}, b""


def _read(path, limit):
    with As():
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    return {"truncated": len(data) > limit}, data[:limit]


def _read_exact(n):
    chunks = []
    while n > 0:
        chunk = os.read(0, min(n, 1 << 20))
        if not chunk:
            _exit_all()
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_request():
    return marshal.loads(_read_exact(int(_read_exact(10))))


def _quote(text):
    """``text`` as a JSON string (ASCII only: control characters and surrogates escaped)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code > 0x7E:
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json(value):
    """A reply header (a flat dict of bools, ints, floats, strings and None) as JSON text."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(_quote(str(k)) + ": " + _json(v) for k, v in value.items()) + "}"
    return _quote(str(value))


def _send(header, payload=b""):
    header = dict(header, size=len(payload))
    os.write(1, _json(header).encode() + b"\n")
    view = memoryview(payload)
    while view:
        written = os.write(1, view)
        view = view[written:]


def _exit_all():
    os._exit(0)


SHELL = None


def main():
    global SHELL
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.umask(0o022)
    with As():
        os.makedirs(CTL, exist_ok=True)
    SHELL = Shell()
    _send({"ok": True, "ready": True})
    while True:
        req = _read_request()
        payload = _read_exact(req.get("size", 0))
        op = req.get("op")
        try:
            if op == "run":
                if not SHELL.alive():
                    SHELL.start()
                header, data = SHELL.run(payload, req["timeout"], req["limit"])
            elif op == "exec" and "channel" in req:
                header, data = _exec_channel(payload.decode(), req["timeout"], req["limit"], req.get("env", {}),
                                             req.get("cwd", WORKDIR), req["channel"], req.get("cap", 1 << 22))
            elif op == "exec":
                header, data = _exec(payload.decode(), req["timeout"], req["limit"], req.get("env", {}),
                                     req.get("cwd", WORKDIR), bool(req.get("root")))
            elif op == "write":
                header, data = _write(req["path"], payload, req.get("mode", 0o644), bool(req.get("root")))
            elif op == "mkdir":
                header, data = _mkdirs(req["paths"], bool(req.get("root")))
            elif op == "read":
                header, data = _read(req["path"], req["limit"])
            elif op == "stop_shell":
                SHELL.kill()
                header, data = {}, b""
            elif op == "close":
                _send({"ok": True})
                _exit_all()
            else:
                header, data = {"ok": False, "error": f"unknown op {op!r}"}, b""
            header.setdefault("ok", True)
        except Exception as exc:  # report to the host; the driver keeps serving
            header, data = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, b""
        _send(header, data)


main()
