"""Sandbox overheads: a trivial command in the persistent session vs a bare subprocess, setup/teardown, episodes/s.

Setup is shown beside bubblewrap alone with the same mounts running ``/bin/true`` (the floor
without the in-sandbox driver), measured interleaved with the setups; and the writable root
(copy-on-write layers, memory cgroup: ``LocalSandbox(writable_root=True)``) interleaved with
the read-only one. With ``--docker-image IMAGE`` (an image the engine at ``DOCKER_HOST`` has)
the Docker backend's setup (a container started, no pool) and ``true`` are measured beside.

Run: python benchmarks/sandbox.py [--commands 200] [--episodes 64] [--parallel 16] [--docker-image IMAGE]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from agent_gym.envs.terminal import TerminalEnv
from agent_gym.sandbox import LocalSandbox, SandboxLimits
from agent_gym.sandbox.local import _mount_args
from agent_gym.sandbox.rootfs import writable_root_unavailable_reason


def median_ms(values):
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--setups", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--docker-image", default=None)
    parser.add_argument("--docker-setups", type=int, default=5)
    args = parser.parse_args()

    bare = []
    for _ in range(args.commands):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        bare.append(time.perf_counter() - t)
    bare_shell = []
    for _ in range(args.commands):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        bare_shell.append(time.perf_counter() - t)
    with LocalSandbox() as box:
        session = []
        for _ in range(args.commands):
            t = time.perf_counter()
            box.run("true")
            session.append(time.perf_counter() - t)
    floor_args = [
        "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--new-session", "--clearenv", *_mount_args(SandboxLimits(), ()), "/bin/true",
    ]
    floor = []
    setups, teardowns = [], []
    writable = writable_root_unavailable_reason() is None
    rw_setups, rw_teardowns, rw_session = [], [], []
    for _ in range(args.setups):
        t = time.perf_counter()
        subprocess.run(floor_args, check=True)
        floor.append(time.perf_counter() - t)
        t = time.perf_counter()
        box = LocalSandbox()
        t1 = time.perf_counter()
        box.close()
        setups.append(t1 - t)
        teardowns.append(time.perf_counter() - t1)
        if writable:
            t = time.perf_counter()
            box = LocalSandbox(writable_root=True)
            t1 = time.perf_counter()
            box.close()
            rw_setups.append(t1 - t)
            rw_teardowns.append(time.perf_counter() - t1)
    if writable:
        with LocalSandbox(writable_root=True) as box:
            for _ in range(args.commands):
                t = time.perf_counter()
                box.run("true")
                rw_session.append(time.perf_counter() - t)
    docker_setups, docker_session = [], []
    if args.docker_image:
        from agent_gym.sandbox import DockerSandbox

        for _ in range(args.docker_setups):
            t = time.perf_counter()
            dbox = DockerSandbox(args.docker_image, pool_size=0)
            docker_setups.append(time.perf_counter() - t)
            if not docker_session:
                for _ in range(min(args.commands, 50)):
                    t = time.perf_counter()
                    dbox.run("true")
                    docker_session.append(time.perf_counter() - t)
            dbox.close()

    def episode(i: int, writable_root: bool = False) -> float:
        env = TerminalEnv(writable_root=writable_root)
        env.reset(seed=i, options={"task_index": i % len(env.tasks)})
        env.step('<tool_call>{"name": "bash", "arguments": {"command": "ls; echo hi > /app/x"}}</tool_call>')
        env.step('<tool_call>{"name": "bash", "arguments": {"command": "cat /app/x"}}</tool_call>')
        env.close()
        return 1.0

    t = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(episode, range(args.episodes)))
    elapsed = time.perf_counter() - t
    rw_elapsed = None
    if writable:
        t = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda i: episode(i, True), range(args.episodes)))
        rw_elapsed = time.perf_counter() - t
    print(f"bare subprocess `true`          median {median_ms(bare):7.2f} ms")
    print(f"bare subprocess `bash -c true`  median {median_ms(bare_shell):7.2f} ms")
    print(f"persistent session `true`       median {median_ms(session):7.2f} ms")
    print(f"bubblewrap alone (same mounts)  median {median_ms(floor):7.2f} ms")
    print(f"sandbox setup                   median {median_ms(setups):7.2f} ms")
    print(f"sandbox teardown                median {median_ms(teardowns):7.2f} ms")
    if writable:
        print(f"writable-root setup             median {median_ms(rw_setups):7.2f} ms "
              f"({statistics.median(rw_setups) / statistics.median(setups):.2f}x the read-only root)")
        print(f"writable-root teardown          median {median_ms(rw_teardowns):7.2f} ms")
        print(f"writable-root session `true`    median {median_ms(rw_session):7.2f} ms")
    else:
        print(f"writable root: not here ({writable_root_unavailable_reason()})")
    if docker_setups:
        print(f"Docker setup (container, no pool) median {median_ms(docker_setups):7.2f} ms")
        print(f"Docker session `true`           median {median_ms(docker_session):7.2f} ms")
    print(f"{args.episodes} short episodes (reset, 2 bash calls, close, no grading) at n_parallel "
          f"{args.parallel}: {args.episodes / elapsed:.1f} episodes/s (read-only root)"
          + (f", {args.episodes / rw_elapsed:.1f} episodes/s (writable root)" if rw_elapsed else ""))


if __name__ == "__main__":
    main()
