"""Shared helpers of the sandbox and Terminal-v0 tests (importable by name from any test module)."""

import os

import pytest

from agent_gym.sandbox import SandboxLimits, bwrap_available

needs_bwrap = pytest.mark.skipif(
    bwrap_available() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

SMALL = SandboxLimits(memory_mb=512, processes=64, file_size_mb=32, workspace_mb=64, tmp_mb=32, output_bytes=4096)


def sandbox_processes(box):
    """Host PIDs of processes that belong to ``box`` (its user id as root, else its namespace's first process)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid = int(status.split("\nUid:\t", 1)[1].split()[0])
        if (os.geteuid() == 0 and uid == box.uid) or int(name) == box.host_pid:
            found.append(int(name))
    return found


# ---------------------------------------------------------------- a Docker engine of the test session

DOCKER_IMAGE = "agent-gym-test:bookworm"
"""The image the Docker tests use: Debian bookworm (minbase) with python3, pytest, git, make and procps."""

_PACKAGES = "python3,python3-pytest,git,make,procps"
_ENGINE: dict = {}


def _cache_dir():
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / "agent_gym_docker_test"
    path.mkdir(exist_ok=True)
    return path


def _root_tarball():
    """A root file system tarball built with debootstrap (cached across test sessions), or why not."""
    import shutil
    import subprocess

    cache = _cache_dir()
    tarball = cache / f"bookworm-{_PACKAGES.replace(',', '-')}.tar"
    if tarball.is_file():
        return tarball, None
    if shutil.which("debootstrap") is None:
        return None, "debootstrap is not installed (apt-get install debootstrap)"
    build = cache / f"rootfs-{os.getpid()}"
    try:
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={_PACKAGES}", "bookworm", str(build)],
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return None, f"debootstrap failed: {(proc.stdout + proc.stderr)[-500:]}"
        for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "usr/share/doc/*", "usr/share/man/*",
                        "usr/share/locale/*", "usr/share/info/*", "var/lib/apt/lists/*_dists_*"):
            for path in build.glob(pattern):  # what the tests never read: half the size, faster container starts
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        partial = tarball.with_suffix(f".{os.getpid()}.part")
        subprocess.run(["tar", "-C", str(build), "-cf", str(partial), "."], check=True, timeout=600)
        partial.rename(tarball)
        return tarball, None
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"debootstrap failed: {exc}"
    finally:
        shutil.rmtree(build, ignore_errors=True)


def docker_engine():
    """``(DOCKER_HOST, None)`` of a dockerd this process started (overlay2 or vfs storage, no network) with
    :data:`DOCKER_IMAGE` imported, or ``(None, why not)``. Started once per process, stopped at exit.

    The image's root file system is built with debootstrap once (a few minutes, Debian's mirror) and cached
    under the temporary directory; ``AGENT_GYM_DOCKER_TESTS=0`` turns these tests off."""
    if _ENGINE:
        return _ENGINE["host"], _ENGINE["reason"]
    import shutil

    _ENGINE.update(host=None, reason=None)
    if os.environ.get("AGENT_GYM_DOCKER_TESTS") == "0":
        _ENGINE["reason"] = "AGENT_GYM_DOCKER_TESTS=0: the Docker engine tests are turned off"
        return None, _ENGINE["reason"]
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        _ENGINE["reason"] = ("no Docker engine can start here: " +
                             ("dockerd is not installed (apt-get install docker.io)" if dockerd is None
                              else "dockerd needs root"))
        return None, _ENGINE["reason"]
    try:
        import docker  # noqa: F401
    except ImportError:
        _ENGINE["reason"] = "the Docker SDK is not installed (pip install 'agent-gym[terminal]')"
        return None, _ENGINE["reason"]
    tarball, why = _root_tarball()
    if tarball is None:
        _ENGINE["reason"] = f"no test image: {why}"
        return None, _ENGINE["reason"]
    drivers = [os.environ["AGENT_GYM_TEST_DOCKER_STORAGE"]] if os.environ.get("AGENT_GYM_TEST_DOCKER_STORAGE") \
        else ["overlay2", "vfs"]  # overlay2 starts a container without copying the image; vfs works everywhere
    failures = []
    for driver in drivers:
        client = _start_dockerd(dockerd, driver, failures)
        if client is not None:
            break
    else:
        _ENGINE["reason"] = "dockerd did not start: " + "; ".join(failures)
        return None, _ENGINE["reason"]
    client.api.import_image_from_file(str(tarball), repository=DOCKER_IMAGE.split(":")[0],
                                      tag=DOCKER_IMAGE.split(":")[1])
    client.close()
    _ENGINE["host"] = _ENGINE["started"]
    return _ENGINE["host"], None


def _start_dockerd(dockerd, driver, failures):
    """Start dockerd with ``driver`` (own socket, data and exec roots, no iptables, no bridge); a client, or None."""
    import atexit
    import shutil
    import subprocess
    import tempfile
    import time

    import docker

    base = tempfile.mkdtemp(prefix="agd")
    host = f"unix://{base}/docker.sock"
    log = open(f"{base}/dockerd.log", "wb")  # noqa: SIM115 - closed when the engine stops
    proc = subprocess.Popen([dockerd, "--storage-driver", driver, "--iptables=false", "--ip6tables=false",
                             "--bridge=none", "--host", host, "--data-root", f"{base}/data", "--exec-root",
                             f"{base}/exec", "--pidfile", f"{base}/dockerd.pid"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop():
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(base, ignore_errors=True)

    deadline = time.monotonic() + 90
    while True:
        client = None
        try:
            client = docker.DockerClient(base_url=host, timeout=120)
            client.ping()
            break
        except Exception as exc:
            if client is not None:
                client.close()
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(f"{base}/dockerd.log", "rb") as f:
                    tail = f.read()[-300:].decode(errors="replace")
                stop()
                failures.append(f"{driver}: {exc} {tail}".strip())
                return None
            time.sleep(0.3)
    atexit.register(stop)
    _ENGINE["started"] = host
    _ENGINE["driver"] = driver
    return client


def require_docker_engine():
    """The DOCKER_HOST of :func:`docker_engine` (also set in the environment), or skip the test with the reason."""
    host, reason = docker_engine()
    if host is None:
        pytest.skip(reason)
    os.environ["DOCKER_HOST"] = host
    return host
