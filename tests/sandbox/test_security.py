"""Attacks run as model actions in the persistent shell; each must be contained, and the host is checked after.

Every attack runs against the read-only root and against the writable root (copy-on-write
layers, memory and pids cgroups), where the host allows one.
"""

import dataclasses
import os
import secrets
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from sandbox_helpers import SMALL, needs_bwrap, sandbox_processes

from agent_gym.errors import SandboxError
from agent_gym.sandbox import LocalSandbox
from agent_gym.sandbox.rootfs import writable_root_unavailable_reason

pytestmark = needs_bwrap

# The writable root bounds memory with a cgroup; an address-space limit stays so that
# ``ulimit -v`` cannot be raised (a JVM-sized reservation still fits).
WRITABLE = dataclasses.replace(SMALL, address_space_mb=4096)


@pytest.fixture(params=["read-only root", "writable root"])
def box(request):
    writable = request.param == "writable root"
    if writable and writable_root_unavailable_reason() is not None:
        pytest.skip(f"no writable root here: {writable_root_unavailable_reason()}")
    sandbox = LocalSandbox(WRITABLE if writable else SMALL, timeout=10, writable_root=writable)
    yield sandbox
    sandbox.close()
    assert sandbox_processes(sandbox) == [], "processes of the sandbox survived close()"


def test_no_connection_to_a_listener_on_the_host_loopback(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    result = box.run(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"; "
                     f"echo > /dev/tcp/127.0.0.1/{port}", timeout=8)
    assert result.exit_code != 0 and "refused" in result.output.lower()
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


def test_no_external_network(box):
    result = box.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\"", timeout=8)
    assert result.exit_code != 0 and "unreachable" in result.output.lower()
    assert box.run("ls /sys/class/net 2>/dev/null; grep -c : /proc/net/dev").output.strip().splitlines()[-1] == "1"


def test_no_raw_sockets(box):
    result = box.run("python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)\"")
    assert result.exit_code != 0 and "PermissionError" in result.output


def test_cannot_read_another_directory_under_tmp(box):
    with tempfile.TemporaryDirectory() as other:
        secret = Path(other, "secret.txt")
        secret.write_text("host secret")
        result = box.run(f"cat {secret}; ls {other}; grep -r 'host secret' /tmp")
        assert "host secret" not in result.output and result.exit_code != 0


def test_cannot_read_the_home_directory(box):
    content = secrets.token_hex(8)
    path = Path.home() / f".agent_gym_secret_{secrets.token_hex(4)}"
    path.write_text(content)
    try:
        result = box.run(f"cat {path}; ls -a ~ {Path.home()} /home; cat ~/.agent_gym_secret_*")
        assert content not in result.output and path.name not in result.output.replace(f"cat: {path}", "")
    finally:
        path.unlink()


def test_root_only_host_files_are_not_readable(box):
    result = box.run("cat /etc/shadow; ls /root/.ssh")
    assert result.exit_code != 0 and "root:" not in result.output


def test_host_processes_are_invisible(box):
    result = box.run(f"ls /proc | grep -c '^[0-9]'; cat /proc/{os.getpid()}/cmdline; ps -e | wc -l")
    count = int(result.output.split()[0])
    assert count < 10 and "pytest" not in result.output


def test_no_process_of_the_sandbox_shows_the_host_paths_it_was_made_with(tmp_path):
    hidden = tmp_path / "hidden_host_dir"
    hidden.mkdir()
    with LocalSandbox(SMALL, hide=[str(hidden)]) as fresh:
        result = fresh.run("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
    assert result.exit_code == 0 and "-c" in result.output  # the driver's own command line is there
    assert str(tmp_path) not in result.output and "--ro-bind" not in result.output and "--tmpfs" not in result.output


def test_host_environment_is_not_visible(box, monkeypatch):
    token = secrets.token_hex(8)
    monkeypatch.setenv("AGENT_GYM_HOST_SECRET", token)
    fresh = LocalSandbox(SMALL)
    try:
        result = fresh.run("env; cat /proc/*/environ 2>&1 | tr '\\0' '\\n'")
        assert token not in result.output and "AGENT_GYM_HOST_SECRET" not in result.output
    finally:
        fresh.close()


def test_cannot_write_outside_the_workspace(box):
    target = Path(sys_prefix := os.path.realpath(os.sys.prefix), "agent_gym_written")
    result = box.run(f"touch /usr/x; echo x >> /etc/hostname; touch {target}; mkdir /newdir; echo $?")
    assert result.output.count("Read-only file system") + result.output.count("Permission denied") >= 3
    assert not target.exists() and not Path("/usr/x").exists() and not Path("/newdir").exists()
    assert sys_prefix


def test_root_setup_writes_stay_in_the_sandbox(box):
    """What root setup steps write in /usr, /etc and new top directories lands in memory, never on the host."""
    if not box.as_root:
        pytest.skip("setup steps run as root only when the host runs the sandbox as root")
    marker = f"agent_gym_{secrets.token_hex(4)}"
    result = box.exec(f"mkdir -p /opt/{marker} && touch /usr/local/bin/{marker} && echo x > /etc/{marker} && "
                      f"echo done", as_root=True)
    if not box.writable_root:
        assert not result.ok and "done" not in result.output
    else:
        assert result.output == "done\n"
        box.finish_setup()
        assert box.run(f"echo agent >> /etc/{marker} && cat /etc/{marker}").output == "x\nagent\n"
    for path in (f"/opt/{marker}", f"/usr/local/bin/{marker}", f"/etc/{marker}"):
        assert not Path(path).exists()


def test_symlink_escape(box):
    result = box.run("ln -s /etc/shadow /app/s; cat /app/s; ln -s / /app/r; echo x > /app/r/escaped; "
                     "ls /app/r/proc/1/root")
    assert "root:" not in result.output and not Path("/escaped").exists()
    with pytest.raises(SandboxError):
        box.read_file("/app/s")


def test_hardlink_escape(box):
    result = box.run("ln /etc/passwd /app/pw && echo linked; ln /usr/bin/bash /tmp/b && echo linked")
    assert "linked" not in result.output


def test_fork_bomb_is_contained(box):
    result = box.run(":(){ :|:& };:; sleep 1", timeout=3)
    assert isinstance(result.exit_code, int)
    assert len(sandbox_processes(box)) <= SMALL.processes + 2
    assert box.run("echo alive", timeout=5).output.endswith("alive\n")


def test_memory_bomb_is_contained(box):
    result = box.run("python3 -c 'x = bytearray(8 * 1024 ** 3)'; "
                     "python3 -c 'a = []\nwhile True: a.append(bytearray(10 ** 8))'", timeout=20)
    if box.cgroup is None:
        assert result.output.count("MemoryError") == 2
    else:  # past the address space: MemoryError; past the sandbox's memory: killed, and the output says so
        assert result.output.count("MemoryError") == 1 and result.killed == "memory"
        assert f"memory limit of {SMALL.memory_mb} MiB" in result.output
    assert box.run("echo alive").output == "alive\n"


def test_filling_the_disk_is_contained(box):
    before = shutil.disk_usage(tempfile.gettempdir()).used
    result = box.run("for i in 1 2 3 4; do head -c 30M /dev/zero > /app/f$i; done; "
                     "head -c 100M /dev/zero > /tmp/big; df -m /app | tail -1", timeout=20)
    assert "No space left" in result.output or "File size limit" in result.output
    assert shutil.disk_usage(tempfile.gettempdir()).used - before < 50 * 2 ** 20


def test_processes_outliving_the_command_and_the_episode_are_killed_on_close():
    box = LocalSandbox(SMALL)
    box.run("nohup sleep 1000 >/dev/null 2>&1 & (setsid sh -c 'sleep 1001 & sleep 1002' &) ; disown -a")
    assert len(sandbox_processes(box)) >= 3
    box.close()
    assert sandbox_processes(box) == []


def test_killing_the_parent(box):
    result = box.run("kill -9 1; kill -9 $PPID; kill -STOP 2; echo $?", timeout=5)
    assert "Operation not permitted" in result.output or "not permitted" in result.output.lower()
    assert box.run("echo alive").output == "alive\n"
    result = box.run("kill -9 -1", timeout=5)
    assert box.run("echo alive").output == "alive\n"


def test_killing_everything_of_the_sandbox_user_leaves_the_host_alone(box):
    result = box.run("kill -9 -1")
    assert isinstance(result.exit_code, int)
    assert os.getpid() > 0 and box.run("echo ok").output == "ok\n"


def test_huge_output_is_cut(box):
    result = box.run("yes | head -c 50000000; cat /dev/zero | head -c 50000000", timeout=10)
    assert result.truncated and len(result.output) < SMALL.output_bytes + 500


def test_resource_limits_cannot_be_raised(box):
    result = box.run("ulimit -Hu unlimited; ulimit -Hv unlimited; ulimit -Hf unlimited; "
                     "python3 -c 'import resource as r; r.setrlimit(r.RLIMIT_NPROC, (10**6, 10**6))'; ulimit -Hu")
    assert result.output.count("not permitted") >= 3 and "ValueError" in result.output
    assert result.output.strip().endswith(str(SMALL.processes))
    if box.writable_root:  # root is what setup steps run as, never the agent
        assert box.run("id -u").output.strip() == str(box.uid) != "0"


def test_no_privileges_mounts_or_devices(box):
    result = box.run("mount -t tmpfs none /app/m; grep Cap /proc/self/status; ls /sys | wc -l; ls /dev")
    assert "Cap" in result.output
    for line in result.output.splitlines():
        if line.startswith("CapEff") or line.startswith("CapPrm"):
            assert line.split()[1] == "0000000000000000"
    assert "sda" not in result.output and "nvme" not in result.output


def test_cannot_trace_or_read_the_driver(box):
    result = box.run("cat /proc/2/environ; ls /proc/1/root; cat /proc/2/mem")
    assert result.exit_code != 0 and "Permission denied" in result.output


def test_concurrent_attacks_from_threads_leave_nothing():
    boxes = []
    def attack():
        b = LocalSandbox(SMALL)
        boxes.append(b)
        b.run("sleep 500 & :(){ :|:& };: ; sleep 0.5", timeout=2)
    threads = [threading.Thread(target=attack) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in boxes:
        b.close()
    assert all(sandbox_processes(b) == [] for b in boxes)
