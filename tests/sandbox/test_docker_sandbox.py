"""The Docker backend: SDK arguments and selection without an engine; the sandbox itself with one."""

import io
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time

import pytest
from sandbox_helpers import DOCKER_IMAGE

from agent_gym.envs.terminal import TerminalEnv, load_task, select_backend
from agent_gym.sandbox import (
    DockerPool,
    DockerSandbox,
    LocalSandbox,
    Result,
    SandboxLimits,
    bwrap_available,
    docker_pool,
)
from agent_gym.sandbox import docker as docker_backend
from agent_gym.sandbox.docker import container_options

IMAGE = DOCKER_IMAGE  # imported into the engine the tests start (sandbox_helpers.docker_engine)
LIMITS = SandboxLimits(memory_mb=256, processes=64, cpu_seconds=60, file_size_mb=8, open_files=256,
                       output_bytes=1000, cpus=0.5)


# ---------------------------------------------------------------- without an engine


class _Exec:
    def __init__(self, argv, environment, workdir):
        self.argv, self.environment, self.workdir = argv, environment, workdir


class _Container:
    """Records the calls a sandbox makes on its container."""

    def __init__(self, client, options):
        self.id = f"c{len(client.containers.started)}"
        self.options = options
        self.client = client
        self.archives = []
        self.exec_runs = []
        self.removed = 0

    def put_archive(self, path, data):
        self.archives.append((path, data))
        return True

    def exec_run(self, argv, **kwargs):
        self.exec_runs.append(argv)
        self.client.api.release.set()
        return (0, b"")

    def remove(self, force=False):
        assert force
        self.removed += 1


class _Containers:
    def __init__(self, client):
        self.client = client
        self.started = []

    def run(self, **options):
        container = _Container(self.client, options)
        self.started.append(container)
        return container


class _Api:
    """``client.api``: exec_create / exec_start / exec_inspect, answering from a script of outputs."""

    def __init__(self):
        self.execs = []
        self.outputs = []  # (chunks, exit code, block until release)
        self.release = threading.Event()

    def exec_create(self, container_id, argv, **kwargs):
        assert kwargs["stdin"] is False and kwargs["tty"] is False and kwargs["stdout"] and kwargs["stderr"]
        self.execs.append(_Exec(argv, kwargs["environment"], kwargs["workdir"]))
        return {"Id": str(len(self.execs) - 1)}

    def exec_start(self, exec_id, stream, demux):
        assert stream is True and demux is False
        chunks, code, block = self.outputs.pop(0) if self.outputs else ([b""], 0, False)
        self.execs[int(exec_id)].code = code
        yield from chunks
        if block:
            assert self.release.wait(10)

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.execs[int(exec_id)].code}


class _Client:
    """A recording stand-in for ``docker.DockerClient`` (only the calls the backend makes)."""

    def __init__(self):
        self.containers = _Containers(self)
        self.api = _Api()


def _boot(client):
    client.api.outputs.append(([b"4242\n7\n"], 0, False))  # session tick, then the main process's pid


def test_container_options_pass_through_the_sdk_unchanged():
    containers = pytest.importorskip("docker.models.containers", reason="Docker SDK: pip install 'agent-gym[terminal]'")
    options = container_options("img:1", LIMITS, "/work")
    assert options["detach"] is True
    create = containers._create_container_args({k: v for k, v in options.items() if k != "detach"}
                                               | {"version": "1.43"})
    host = create["host_config"]
    assert create["image"] == "img:1" and create["working_dir"] == "/work"
    assert create["labels"]["agent_gym.sandbox"] == "1"
    assert host["NetworkMode"] == "none" and host["Memory"] == host["MemorySwap"] == 256 << 20
    assert host["PidsLimit"] == 64 and host["NanoCpus"] == 500_000_000 and host["Init"] is True
    assert host["CapDrop"] == ["ALL"] and "NET_RAW" not in host["CapAdd"] and "SYS_ADMIN" not in host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert limits == {"cpu": (60, 60), "fsize": (8 << 20, 8 << 20), "nofile": (256, 256), "core": (0, 0)}


def test_sandbox_calls_without_an_engine():
    client = _Client()
    _boot(client)
    box = DockerSandbox("img:1", LIMITS, env={"TASK": "x"}, client=client, pool_size=0, timeout=5)
    (container,) = client.containers.started
    assert container.options == container_options("img:1", LIMITS, "/app")
    assert box._session_tick == 4242 and box._keep == "7"

    client.api.outputs.append(([b"hello ", b"world\n"], 3, False))
    result = box.run("cd /tmp && echo 'hello world'; exit 3")
    assert (result.exit_code, result.output, result.timed_out, result.truncated) == (3, "hello world\n", False, False)
    path, data = container.archives[-1]
    member = tarfile.open(fileobj=io.BytesIO(data))
    info = member.next()
    assert path == "/run/agent_gym" and info.name == "cmd" and info.mode == 0o600
    assert member.extractfile(info).read() == b"cd /tmp && echo 'hello world'; exit 3"
    run = client.api.execs[-1]
    assert run.argv[:4] == ["bash", "--norc", "--noprofile", "-c"] and ". /run/agent_gym/cmd </dev/null" in run.argv[4]
    assert run.environment["TASK"] == "x" and run.environment["__ag_seq"] == "1" and run.workdir == "/app"

    client.api.outputs.append(([b"x" * 5000], 0, False))
    result = box.run("yes | head -c 5000")
    assert result.truncated and "[... output truncated: 4000 bytes cut ...]" in result.output
    assert len(result.output) < 1100

    client.api.outputs.append(([b"started\n"], 137, True))  # blocks until the kill arrives
    result = box.run("sleep 100", timeout=0.3)
    assert result.timed_out and result.exit_code == 124 and result.output.startswith("started\n")
    kill = container.exec_runs[-1]
    assert kill[:2] == ["bash", "-c"] and "read -r __tick </run/agent_gym/tick.3" in kill[2]
    assert "__keep='7'" in kill[2] and "kill -9" in kill[2]

    client.api.outputs.append(([b"ok\n"], 0, False))
    result = box.exec("pytest -q", env={"TEST_DIR": "/tests"}, cwd="/tests", timeout=9)
    graded = client.api.execs[-1]
    assert result.output == "ok\n" and graded.workdir == "/tests" and graded.environment["TEST_DIR"] == "/tests"
    assert "'pytest -q'" in graded.argv[2]

    box.stop_shell()
    assert "__tick=4242" in container.exec_runs[-1][2]
    box.close()
    box.close()
    assert container.removed == 1 and not box.alive
    assert box.run("true").exit_code == 125


def test_pool_prestarts_and_refills_and_exit_removes_everything():
    client = _Client()
    options = container_options("img:2", LIMITS)
    pool = DockerPool(client, options, size=2)
    deadline = time.monotonic() + 10
    while len(pool._ready) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(client.containers.started) == 2 and all(c.options == options for c in client.containers.started)
    first = pool.acquire()
    assert first in client.containers.started
    while len(client.containers.started) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(client.containers.started) == 3  # refilled
    while len(pool._ready) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    docker_pool._remove_all()  # what runs at interpreter exit
    assert all(c.removed == 1 for c in client.containers.started)
    pool.close()


def test_sandboxes_share_one_client_and_one_pool_per_configuration(monkeypatch):
    client = _Client()
    made = []
    monkeypatch.setattr(docker_backend, "docker_client", lambda: made.append(1) or client)
    monkeypatch.setattr(docker_backend, "remove_orphans", lambda c: made.append(c))
    monkeypatch.setattr(docker_backend, "_SHARED", [])
    monkeypatch.setattr(docker_pool, "_POOLS", {})
    _boot(client)
    _boot(client)
    first, second = DockerSandbox("img:4", LIMITS, pool_size=1), DockerSandbox("img:4", LIMITS, pool_size=1)
    assert first.client is second.client is client and made == [1, client]  # orphans removed once
    assert len(docker_pool._POOLS) == 1 and first.container is not second.container
    (pool,) = docker_pool._POOLS.values()
    deadline = time.monotonic() + 10
    while pool._filling and time.monotonic() < deadline:  # refills in flight
        time.sleep(0.01)
    first.close()
    second.close()
    docker_pool._close_pools()
    assert all(c.removed == 1 for c in client.containers.started)


def test_orphans_of_dead_processes_on_this_host_are_removed():
    client = _Client()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    owners = [f"{host}:{dead.pid}", f"{host}:{os.getpid()}", f"elsewhere:{dead.pid}", "garbage"]
    for owner in owners:
        client.containers.run(labels={"agent_gym.sandbox": "1", "agent_gym.sandbox.owner": owner})
    listed = []

    def list_containers(all, filters):
        listed.append((all, filters))
        return [c for c in client.containers.started if "agent_gym.sandbox" in c.options["labels"]]

    client.containers.list = list_containers
    for container in client.containers.started:
        container.labels = container.options["labels"]
    removed = docker_backend.remove_orphans(client)
    assert listed == [(True, {"label": "agent_gym.sandbox"})]
    assert [c.removed for c in client.containers.started] == [1, 0, 0, 0] and removed == ["c0"]
    assert container_options("img", LIMITS)["labels"]["agent_gym.sandbox.owner"] == f"{host}:{os.getpid()}"


def test_backend_selection_and_task_images(tmp_path):
    assert select_backend({"id": "a", "image": None}) == "local"
    assert select_backend({"id": "a", "image": "img:1"}) == "docker"
    assert select_backend({"id": "a", "image": None}, "docker") == "docker"
    with pytest.raises(ValueError, match="needs backend='docker'"):
        select_backend({"id": "a", "image": "img:1"}, "local")
    with pytest.raises(ValueError, match="backend"):
        select_backend({"id": "a"}, "podman")
    tb = tmp_path / "tb"
    (tb / "tests").mkdir(parents=True)
    (tb / "task.yaml").write_text("instruction: do it\nimage: ghcr.io/example/task:1\n")
    (tb / "solution.sh").write_text("true\n")
    (tb / "run-tests.sh").write_text("true\n")
    (tb / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY x /app/x\n")
    (tb / "x").write_text("x")
    harbor = tmp_path / "hb"
    for sub in ("solution", "tests", "environment"):
        (harbor / sub).mkdir(parents=True)
    (harbor / "instruction.md").write_text("do it\n")
    (harbor / "task.toml").write_text('[environment]\ndocker_image = "example/harbor:2"\n')
    (harbor / "solution" / "solve.sh").write_text("true\n")
    (harbor / "tests" / "test.sh").write_text("true\n")
    task, htask = load_task(tb), load_task(harbor)
    assert (task["image"], task["base_image"]) == ("ghcr.io/example/task:1", "python:3.11-slim")
    assert htask["image"] == "example/harbor:2" and select_backend(htask) == "docker"


def test_terminal_env_hands_docker_tasks_to_the_docker_backend(monkeypatch):
    made = []

    class Recorded:
        def __init__(self, image, limits, **kwargs):
            made.append((image, kwargs))
            self.files = []

        @staticmethod
        def image_config(image):
            return {"PATH": "/usr/bin:/bin"}, None

        def write_file(self, path, data, mode=0o644):
            self.files.append(path)

        def exec(self, command, timeout=None, env=None):
            return Result(0, "")

        def close(self):
            made.append("closed")

    monkeypatch.setattr(docker_backend, "DockerSandbox", Recorded)
    task = dict(load_task(TerminalEnv().tasks[0]["path"]), image="example/img:3", id="t")
    env = TerminalEnv(tasks=[task], docker_pool_size=3)
    env.reset(seed=0)
    assert made[0][0] == "example/img:3" and made[0][1]["pool_size"] == 3 and env.sandbox.files == []
    env.close()
    assert made[-1] == "closed"
    plain = dict(load_task(TerminalEnv().tasks[0]["path"]))
    env = TerminalEnv(tasks=[plain], backend="docker", docker_image="example/py:1")
    env.reset(seed=0)
    assert made[-1][0] == "example/py:1" and env.sandbox.files  # the Dockerfile's files are copied in
    env.close()
    with pytest.raises(ValueError, match="backend"):
        TerminalEnv(backend="vm")


@pytest.mark.skipif(bwrap_available() is None, reason="bubblewrap (bwrap) is not installed")
def test_session_scripts_keep_state_and_kill_only_new_processes():
    """The backend's bash scripts, run by real bash (in a local sandbox, one process per command)."""
    with LocalSandbox(SandboxLimits(output_bytes=4000), timeout=20) as box:
        script = docker_backend._RUN.replace("/run/agent_gym", "/tmp/ctl")
        box.exec("mkdir -p /tmp/ctl")

        def run(command, seq):
            box.write_file("/tmp/ctl/cmd", command)
            return box.exec(f"__ag_seq={seq} bash --norc --noprofile -c {docker_backend._quote(script)}")

        assert run("cd /tmp && export A=5 && f() { echo fn$1; } && alias ll='echo aliased'", 1).ok
        result = run("echo $A; pwd; f 1; ll; false", 2)
        assert result.output == "5\n/tmp\nfn1\naliased\n" and result.exit_code == 1
        assert run("echo $?; cat <<'EOF'\nheredoc\nEOF\nexit 4", 3).output == "1\nheredoc\n"
        assert run("echo $A", 4).output == "5\n"  # state saved also when the command called exit
        box.run("sleep 300 &")  # the persistent shell leaves background processes running
        time.sleep(0.05)
        tick = box.run("(read -r s </proc/$BASHPID/stat; s=${s##*) }; set -- $s; echo ${20})").output.strip()
        box.run("(sleep 301 &); sleep 0.05")
        killer = f"__tick={tick} __keep=''\n{docker_backend._KILL_SINCE}"
        box.run(f"bash -c {docker_backend._quote(killer)}")
        left = box.run("ps -eo args | grep '^sleep 30'").output
        assert left == "sleep 300\n"  # the older sleep survives, the newer one was killed


# ---------------------------------------------------------------- with an engine


def test_docker_sandbox_session_timeout_network_and_cleanup(docker_host):
    with DockerSandbox(IMAGE, LIMITS, timeout=20, pool_size=0) as box:
        assert box.run("cd /tmp && export X=1 && g() { echo g; }").ok
        assert box.run("echo $X; pwd; g").output == "1\n/tmp\ng\n"
        result = box.run("(sleep 300 &); sleep 300", timeout=1)
        assert result.timed_out and box.exec("ps -eo args | grep -c '^sleep 300'").output.strip() == "0"
        assert not box.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\"").ok
        assert box.run("cat", timeout=5).ok  # stdin is at EOF
        killed = box.run("python3 -c 'b = bytearray(600 << 20)'; echo exit=$?")
        assert killed.killed == "memory" and "exit=137" in killed.output and "memory limit of 256 MiB" in killed.output
        box.write_file("/app/x.txt", "hi")
        assert box.read_file("/app/x.txt") == b"hi"
        container_id = box.container.id
    import docker

    client = docker.DockerClient(base_url=docker_host)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(container_id)
    client.close()


def test_containers_are_removed_at_interpreter_exit(docker_host):
    code = ("import os, socket\nfrom agent_gym.sandbox import DockerSandbox\n"
            f"box = DockerSandbox({IMAGE!r}, pool_size=1)\nprint(f'{{socket.gethostname()}}:{{os.getpid()}}')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    import docker

    label = f"agent_gym.sandbox.owner={out.stdout.split()[0]}"
    client = docker.DockerClient(base_url=docker_host)
    assert client.containers.list(all=True, filters={"label": label}) == []  # the pool's container too
    client.close()
