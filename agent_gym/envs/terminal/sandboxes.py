"""Opening a terminal task's sandbox: the backend it runs in, and its Dockerfile's steps applied.

:func:`open_task_sandbox` starts a sandbox for one task exactly as an episode starts (the local
bubblewrap sandbox, a Docker container, or a ``sandbox_factory``'s sandbox) and runs the task's
setup in it (:func:`apply_setup`); Terminal-v0 opens one per episode, and one more, untouched,
when it needs to know what the task's test runner does on the initial state
(:mod:`~agent_gym.envs.terminal.baseline`).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_gym.envs.terminal.loader import BUILTIN_TASK_DIR, resolve_setup
from agent_gym.errors import ConfigError, SandboxError
from agent_gym.sandbox import LocalSandbox, SandboxLimits
from agent_gym.sandbox.local import sandbox_base_env
from agent_gym.sandbox.rootfs import writable_root_unavailable_reason

__all__ = ["BACKENDS", "SandboxSpec", "apply_setup", "open_task_sandbox", "select_backend"]

BACKENDS = ("auto", "local", "docker")
"""Sandbox backends of Terminal-v0: ``auto`` uses Docker for tasks that name an image."""


def select_backend(task: Mapping[str, Any], backend: str = "auto") -> str:
    """``"local"`` or ``"docker"``: the backend an episode of ``task`` runs in.

    ``auto`` picks Docker for a task that names an image (``task["image"]``) and the local
    bubblewrap sandbox otherwise; ``local`` and ``docker`` force one (``local`` refuses a task
    that names an image: its files and programs are in that image).

    Raises:
        ValueError: For an unknown backend or a task with an image forced to ``local``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    image = task.get("image")
    if backend == "local" and image:
        raise ValueError(f"task {task.get('id')!r} names the image {image!r}: it needs backend='docker' or 'auto'")
    if backend == "auto":
        return "docker" if image else "local"
    return backend


@dataclass(frozen=True)
class SandboxSpec:
    """How an env opens its tasks' sandboxes (the arguments of :class:`~agent_gym.envs.terminal.TerminalEnv`).

    Attributes:
        backend: One of :data:`BACKENDS`.
        limits: The sandbox's limits.
        limits_given: The limits were given (a task's own memory limit does not replace them).
        command_timeout: Default seconds per command.
        docker_image: Image of tasks without one under the Docker backend.
        docker_pool_size: Pre-started containers kept per image.
        writable_root: Give the local sandbox its copy-on-write root.
        sandbox_factory: ``(task, env_vars) -> sandbox`` replacing the backends.
    """

    backend: str = "auto"
    limits: SandboxLimits = dataclasses.field(default_factory=SandboxLimits)
    limits_given: bool = False
    command_timeout: float = 30.0
    docker_image: str | None = None
    docker_pool_size: int = 2
    writable_root: bool = False
    sandbox_factory: Callable[[Mapping[str, Any], Mapping[str, str]], Any] | None = None


def open_task_sandbox(task: Mapping[str, Any], spec: SandboxSpec) -> Any:
    """A new sandbox for ``task`` with its setup applied (closed again if the setup fails).

    Raises:
        SandboxError: When a setup step fails (naming the task, the step and the backend).
        ConfigError: For a Docker task without an image.
    """
    limits = spec.limits
    if task.get("memory_mb") and not spec.limits_given:
        limits = dataclasses.replace(limits, memory_mb=int(task["memory_mb"]))
    if spec.sandbox_factory is not None:
        env_vars = {str(k): str(v) for k, v in dict(task.get("env") or {}).items()}
        sandbox = spec.sandbox_factory(task, env_vars)
        steps, backend = list(task.get("setup") or []), "sandbox_factory"
    elif select_backend(task, spec.backend) == "docker":
        from agent_gym.sandbox.docker import DockerSandbox

        image = task.get("image") or spec.docker_image or task.get("base_image")
        if not image:
            raise ConfigError(f"task {task['id']!r}: the Docker backend needs an image (the task names none; "
                              "pass docker_image=...)")
        base_env, base_workdir = DockerSandbox.image_config(image)
        if task.get("image"):  # the task's image holds its environment
            plan: dict[str, Any] = {"env": {**base_env, **dict((task.get("compose") or {}).get("env") or {})},
                                    "workdir": (task.get("compose") or {}).get("workdir") or base_workdir or "/app",
                                    "steps": []}
        else:
            plan = resolve_setup(task, base_env, base_workdir or "/app")
        sandbox = DockerSandbox(image, limits, timeout=spec.command_timeout, env=plan["env"],
                                workdir=plan["workdir"], pool_size=spec.docker_pool_size)
        steps, backend = plan["steps"], "docker"
    else:
        plan = resolve_setup(task, sandbox_base_env())
        # the task's files (solution, tests) may lie under a directory the sandbox shows (a regular
        # install puts the shipped tasks under the Python prefix): the agent must not read them
        hidden = [p for p in (str(BUILTIN_TASK_DIR), task.get("path")) if p and os.path.exists(p)]
        sandbox = LocalSandbox(limits, timeout=spec.command_timeout, env=plan["env"], workdir=plan["workdir"],
                               writable_root=spec.writable_root, hide=hidden)
        steps, backend = plan["steps"], "local"
    try:
        apply_setup(sandbox, task, steps, backend)
    except BaseException:
        sandbox.close()
        raise
    return sandbox


def apply_setup(sandbox: Any, task: Mapping[str, Any], steps: list[Any], backend: str) -> None:
    """Run the Dockerfile's steps in order (as root where the sandbox can), then hand the files over.

    Raises:
        SandboxError: Naming the task, the step and the backend, when a step fails.
    """
    as_root = isinstance(sandbox, LocalSandbox) and sandbox.as_root
    kw = {"as_root": True} if as_root else {}
    where = "the local sandbox" + ("" if getattr(sandbox, "writable_root", True) else " (read-only root)")
    where = {"docker": "the Docker backend", "sandbox_factory": "the sandbox_factory's sandbox"}.get(backend, where)
    hint = ""
    if backend == "local":
        base = task.get("base_image")
        hint = ("; the local sandbox runs the steps without network on the host's programs"
                + (f", not on the image {base!r}" if base else "")
                + ("" if getattr(sandbox, "writable_root", True) else
                   f", with a read-only root (writable_root=False or unavailable here: "
                   f"{writable_root_unavailable_reason()})")
                + "; run the task with backend='docker' and an image built from its Dockerfile")
    batch = getattr(sandbox, "write_files", None)
    pending: list[tuple[str, bytes | None, int]] = []
    for index, (kind, first, second) in enumerate(steps):
        try:
            if batch is not None and kind in ("file", "dir"):  # one transfer for a run of COPY/WORKDIR steps
                data, mode = second if isinstance(second, tuple) else (second, 0o644)
                pending.append((first, data, mode) if kind == "file" else (first, None, 0o755))
                if index + 1 == len(steps) or steps[index + 1][0] not in ("file", "dir"):
                    batch(pending)
                    pending = []
                continue
            if kind == "file":
                data, mode = second if isinstance(second, tuple) else (second, 0o644)
                sandbox.write_file(first, data, mode, **kw) if kw else sandbox.write_file(first, data, mode)
                continue
            env: dict[str, str] | None = None
            cwd: str | None = "/"
            if kind == "dir" and hasattr(sandbox, "make_dirs"):
                sandbox.make_dirs([first], **kw)
                continue
            if kind == "dir":
                command = f"mkdir -p -- {shlex.quote(first)}"
            else:
                command = first
                env, cwd = (second or {}).get("env"), (second or {}).get("cwd")
                if cwd:
                    command = f"mkdir -p -- {shlex.quote(cwd)} && cd -- {shlex.quote(cwd)} && {{\n{command}\n}}"
                later = sorted(k for k in dict(getattr(sandbox, "env", None) or {}) if k not in (env or {}))
                if env is not None and later:  # variables an ENV after this step defines
                    command = f"unset {' '.join(map(shlex.quote, later))}\n{command}"
            result = sandbox.exec(command, timeout=300.0, env=env, **kw)
        except SandboxError as exc:
            what = "making the directory" if kind == "dir" else "COPY to"
            raise SandboxError(f"task {task['id']!r}: {what} {first} failed on {where}: {exc}{hint}") from None
        if not result.ok:
            label = "WORKDIR" if kind == "dir" else "RUN"
            raise SandboxError(f"task {task['id']!r}: {label} {first!r:.200} failed on {where} with exit code "
                               f"{result.exit_code}: {result.output[-500:]}{hint}")
    if as_root:
        sandbox.finish_setup()
