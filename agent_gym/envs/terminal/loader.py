"""Terminal tasks in the layouts the field uses: Terminal-Bench and Harbor.

Terminal-Bench layout (one directory per task)::

    task.yaml           instruction, max_agent_timeout_sec, max_test_timeout_sec
    Dockerfile          optional: COPY/ADD, RUN, ENV and WORKDIR are applied to the sandbox
    solution.sh         the reference solution
    run-tests.sh        runs the tests (with TEST_DIR=/tests)
    tests/              test_outputs.py (pytest), copied to /tests only after the episode

Harbor layout::

    instruction.md, task.toml ([agent] timeout_sec, [verifier] timeout_sec)
    environment/Dockerfile, solution/solve.sh, tests/test.sh (writes /logs/verifier/reward.txt)

Without a container image, the ``Dockerfile`` is read as Docker reads it
(:mod:`agent_gym.envs.terminal.dockerfile`): ``ARG``/``ENV`` in order with ``$VAR``
expansion, ``WORKDIR`` (where the shell, the solution and the tests start), ``COPY``/``ADD``
anywhere, ``RUN`` as root in the sandbox without network. A ``docker-compose.yaml`` with one
service gives the Dockerfile, the environment, the working directory and the memory limit
(more than one service is an error). ``task.yaml``'s ``parser_name`` (default ``pytest``)
picks the test parser (:mod:`agent_gym.envs.terminal.grading`) and
``run_tests_in_same_shell`` is read but the tests never run in the agent's shell (see
:mod:`~agent_gym.envs.terminal.runner`). A task that names an image
(``image`` in ``task.yaml``, ``[environment] docker_image`` in ``task.toml``) runs in that
image with the Docker backend.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_gym.envs.terminal.dockerfile import DEFAULT_PATH, expand, parse_dockerfile, resolve_dockerfile
from agent_gym.envs.terminal.grading import get_parser
from agent_gym.errors import ConfigError

__all__ = [
    "BUILTIN_TASK_DIR",
    "builtin_tasks",
    "find_task_dirs",
    "load_task",
    "read_compose",
    "resolve_setup",
]

BUILTIN_TASK_DIR = Path(__file__).with_name("tasks")
"""Directory of the shipped tasks (Terminal-Bench layout)."""

_DEFAULT_AGENT_TIMEOUT = 360.0
_DEFAULT_TEST_TIMEOUT = 60.0


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # a dependency of transformers

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a YAML mapping, got {type(data).__name__}")
    return data


def _files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` by relative path (sorted)."""
    if not root.is_dir():
        return {}
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


_COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_TBENCH_VARS = {"T_BENCH_TEST_DIR": "/tests", "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
                "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs"}
_SIZE = {"": 1 / (1 << 20), "b": 1 / (1 << 20), "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1, "g": 1024,
         "gb": 1024}


def _memory_mb(value: Any, where: str) -> int:
    text = str(value).strip().lower()
    number = text.rstrip("kmgbi")
    unit = text[len(number):].replace("i", "")
    try:
        return max(1, int(float(number) * _SIZE[unit]))
    except (KeyError, ValueError):
        raise ConfigError(f"{where}: expected a memory size like '4g' or '512m', got {value!r}") from None


def read_compose(root: Path) -> dict[str, Any] | None:
    """The one service of a task's docker-compose file, as the settings a sandbox uses; None without a file.

    Returns:
        ``{"path", "service", "dockerfile", "context", "image", "env", "workdir", "memory_mb"}``:
        ``image`` is None when the file names only the harness's variable (Terminal-Bench's
        ``${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}``, the image built from the Dockerfile).

    Raises:
        ConfigError: For more than one service (the sandboxes run one container) or a bad value.
    """
    path = next((root / name for name in _COMPOSE_NAMES if (root / name).is_file()), None)
    if path is None:
        return None
    data = _read_yaml(path)
    services = data.get("services")
    if not isinstance(services, dict) or not services:
        raise ConfigError(f"{path}: expected a 'services' mapping with one service")
    if len(services) > 1:
        raise ConfigError(f"{path}: {len(services)} services ({', '.join(map(str, services))}); the sandboxes run "
                          "one container per episode, so a task can have only one service")
    name, service = next(iter(services.items()))
    service = service or {}
    build = service.get("build") or {}
    if isinstance(build, str):
        build = {"context": build}
    image = service.get("image")
    if isinstance(image, str) and ("${T_BENCH_" in image or "$T_BENCH_" in image):
        image = None
    raw_env = service.get("environment") or {}
    items = raw_env.items() if isinstance(raw_env, dict) else (str(e).partition("=")[::2] for e in raw_env)
    env = {str(k): expand("" if v is None else str(v), _TBENCH_VARS) for k, v in items}
    memory = service.get("mem_limit") or (((service.get("deploy") or {}).get("resources") or {}).get("limits")
                                          or {}).get("memory")
    return {
        "path": str(path),
        "service": str(name),
        "dockerfile": str(build.get("dockerfile") or "Dockerfile"),
        "context": str(build.get("context") or "."),
        "image": image,
        "env": env,
        "workdir": service.get("working_dir"),
        "memory_mb": _memory_mb(memory, f"{path} {name}.mem_limit") if memory else None,
    }


def resolve_setup(task: Mapping[str, Any], base_env: Mapping[str, str], workdir: str = "/app") -> dict[str, Any]:
    """The task's Dockerfile walked against ``base_env`` (see :func:`.dockerfile.resolve_dockerfile`).

    Returns ``{"env", "workdir", "steps"}``; a task without a Dockerfile has its ``env``,
    ``workdir`` and ``setup`` as they are. The compose file's environment is applied last.
    ``workdir`` is the base image's working directory (``/app`` for the local sandbox, as in
    Terminal-Bench's base images).
    """
    spec = task.get("dockerfile")
    if not spec:
        return {"env": {**dict(base_env), **dict(task.get("env") or {})}, "workdir": task.get("workdir") or "/app",
                "steps": list(task.get("setup") or [])}
    resolved = resolve_dockerfile(spec["instructions"], base_env, Path(spec["context"]), spec["source"], workdir)
    compose = task.get("compose") or {}
    env = {**resolved["env"], **dict(compose.get("env") or {})}
    workdir = compose.get("workdir") or resolved["workdir"]
    return {"env": env, "workdir": workdir, "steps": resolved["steps"]}


def load_task(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Load one task directory (Terminal-Bench or Harbor layout) as a task dict.

    The dict has ``id``, ``question`` (the instruction), ``ground_truth`` (what passing
    means), ``format``, ``path``, ``agent_timeout``, ``test_timeout``, ``setup`` (files and
    commands applied before the episode), ``env``, ``image`` (the container image the task
    names: ``image``/``docker_image`` in ``task.yaml``, ``[environment] docker_image`` in
    ``task.toml``; such a task runs in the Docker backend), ``base_image`` (the Dockerfile's
    ``FROM``), ``solution_script``, ``test_files`` and ``test_command``.

    Raises:
        ConfigError: If the directory has neither layout or a required file is missing.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"task directory: expected an existing directory, got {str(directory)!r}")
    if (root / "task.yaml").is_file():
        meta = _read_yaml(root / "task.yaml")
        instruction = meta.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise ConfigError(f"{root}/task.yaml: expected a non-empty 'instruction'")
        for required in ("solution.sh", "run-tests.sh"):
            if not (root / required).is_file():
                raise ConfigError(f"{root}: expected a {required} (Terminal-Bench layout)")
        compose = read_compose(root)
        context = (root / compose["context"]).resolve() if compose else root
        dockerfile = context / compose["dockerfile"] if compose else root / "Dockerfile"
        tests = {f"/tests/{k}": v for k, v in _files(root / "tests").items()}
        tests["/tests/run-tests.sh"] = (root / "run-tests.sh").read_bytes()
        parser_name = str(meta.get("parser_name") or "pytest")
        task: dict[str, Any] = {
            "format": "terminal-bench",
            "question": instruction.strip(),
            "agent_timeout": float(meta.get("max_agent_timeout_sec", _DEFAULT_AGENT_TIMEOUT)),
            "test_timeout": float(meta.get("max_test_timeout_sec", _DEFAULT_TEST_TIMEOUT)),
            "solution_script": (root / "solution.sh").read_text(encoding="utf-8"),
            "test_files": tests,
            "test_command": "bash /tests/run-tests.sh",
            "category": meta.get("category"),
            "image": meta.get("image") or meta.get("docker_image") or (compose or {}).get("image"),
            "parser_name": parser_name,
            "run_tests_in_same_shell": bool(meta.get("run_tests_in_same_shell", False)),
            "compose": compose,
            "memory_mb": (compose or {}).get("memory_mb"),
        }
    elif (root / "instruction.md").is_file() and (root / "task.toml").is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib

        meta = tomllib.loads((root / "task.toml").read_text(encoding="utf-8"))
        for required in ("solution/solve.sh", "tests/test.sh"):
            if not (root / required).is_file():
                raise ConfigError(f"{root}: expected {required} (Harbor layout)")
        context = root / "environment"
        dockerfile = context / "Dockerfile"
        memory = meta.get("environment", {}).get("memory_mb") or meta.get("environment", {}).get("memory")
        task = {
            "format": "harbor",
            "question": (root / "instruction.md").read_text(encoding="utf-8").strip(),
            "agent_timeout": float(meta.get("agent", {}).get("timeout_sec", _DEFAULT_AGENT_TIMEOUT)),
            "test_timeout": float(meta.get("verifier", {}).get("timeout_sec", _DEFAULT_TEST_TIMEOUT)),
            "solution_script": (root / "solution" / "solve.sh").read_text(encoding="utf-8"),
            "test_files": {f"/tests/{k}": v for k, v in _files(root / "tests").items()},
            "test_command": "bash /tests/test.sh",
            "category": meta.get("metadata", {}).get("category"),
            "image": meta.get("environment", {}).get("docker_image") or meta.get("environment", {}).get("image"),
            "parser_name": "harbor",
            "run_tests_in_same_shell": False,
            "compose": None,
            "memory_mb": (int(memory) if isinstance(memory, (int, float)) else _memory_mb(memory, str(root)))
            if memory else None,
        }
    else:
        raise ConfigError(f"{root}: expected a task directory with task.yaml (Terminal-Bench) or "
                          "instruction.md and task.toml (Harbor)")
    if task["parser_name"] != "harbor":
        get_parser(task["parser_name"])  # an unknown parser is an error at load time
    if dockerfile.is_file():
        instructions = parse_dockerfile(dockerfile)
        task["dockerfile"] = {"instructions": instructions, "context": str(context), "source": str(dockerfile)}
        resolved = resolve_dockerfile(instructions, {"PATH": DEFAULT_PATH}, context, str(dockerfile))
        task["base_image"] = resolved["image"]
    else:
        task["dockerfile"] = None
        task["base_image"] = None
    base = {"PATH": DEFAULT_PATH}
    default = resolve_setup({**task, "env": {}, "setup": [], "workdir": "/app"}, base)
    task["setup"], task["workdir"] = default["steps"], default["workdir"]
    task["env"] = {k: v for k, v in default["env"].items() if base.get(k) != v}  # what the task sets
    if task["image"] is not None and (not isinstance(task["image"], str) or not task["image"].strip()):
        raise ConfigError(f"{root}: expected the image to be a non-empty string, got {task['image']!r}")
    task["id"] = root.name
    task["path"] = str(root)
    task["ground_truth"] = "the task's tests pass"
    return task


def find_task_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` itself if it is a task directory, else its task subdirectories (sorted)."""
    root = Path(path)
    if (root / "task.yaml").is_file() or (root / "task.toml").is_file():
        return [root]
    if not root.is_dir():
        raise ConfigError(f"tasks: expected a task directory or a directory of tasks, got {str(path)!r}")
    found = sorted(p for p in root.iterdir() if (p / "task.yaml").is_file() or (p / "task.toml").is_file())
    if not found:
        raise ConfigError(f"tasks: no task directories (task.yaml or task.toml) under {str(path)!r}")
    return found


_BUILTIN: tuple[dict[str, Any], ...] | None = None


def builtin_tasks() -> tuple[dict[str, Any], ...]:
    """The shipped tasks (loaded once per process)."""
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = tuple(load_task(p) for p in find_task_dirs(BUILTIN_TASK_DIR))
    return _BUILTIN
