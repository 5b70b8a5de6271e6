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

Without a container image, the ``Dockerfile`` is read for the instructions that shape the
task's files: ``COPY``/``ADD`` (from the build context, into ``/app``, ``/tests``-free paths),
``RUN`` (run in the sandbox before the episode, without network), ``ENV`` and ``WORKDIR``;
``FROM`` and the rest are ignored. A task that names an image (``image`` in ``task.yaml``,
``[environment] docker_image`` in ``task.toml``) runs in that image with the Docker backend.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from agent_gym.errors import ConfigError

__all__ = ["BUILTIN_TASK_DIR", "builtin_tasks", "find_task_dirs", "load_task", "parse_dockerfile"]

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


def parse_dockerfile(path: Path) -> dict[str, Any]:
    """Read the instructions of a Dockerfile that apply without an image.

    Returns:
        ``{"image", "workdir", "env", "steps"}`` where each step is ``("copy", src, dest)`` or
        ``("run", command)``; ``image`` is the ``FROM`` image.
    """
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    result: dict[str, Any] = {"image": None, "workdir": "/app", "env": {}, "steps": []}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            result["image"] = rest.split()[0] if rest else None
        elif keyword == "WORKDIR":
            result["workdir"] = rest
        elif keyword == "ENV":
            if "=" in rest.split()[0]:
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    result["env"][key] = value
            else:
                key, _, value = rest.partition(" ")
                result["env"][key] = value.strip()
        elif keyword in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if len(parts) >= 2:
                for src in parts[:-1]:
                    result["steps"].append(("copy", src, parts[-1]))
        elif keyword == "RUN":
            result["steps"].append(("run", rest))
    return result


def _setup_files(context: Path, dockerfile: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Turn COPY steps into ``("file", inside_path, bytes)`` items, keeping RUN steps in order."""
    steps: list[tuple[str, Any, Any]] = []
    workdir = dockerfile["workdir"] or "/app"
    for step in dockerfile["steps"]:
        if step[0] == "run":
            steps.append(("run", step[1], None))
            continue
        _, src, dest = step
        dest = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
        source = (context / src).resolve()
        if not str(source).startswith(str(context.resolve())) or not source.exists():
            raise ConfigError(f"{context}: COPY source {src!r} is not inside the build context")
        if source.is_dir():
            for rel, data in _files(source).items():
                steps.append(("file", f"{dest.rstrip('/')}/{rel}", data))
        else:
            target = f"{dest.rstrip('/')}/{source.name}" if dest.endswith("/") else dest
            steps.append(("file", target, source.read_bytes()))
    return steps


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
        dockerfile = root / "Dockerfile"
        parsed = parse_dockerfile(dockerfile) if dockerfile.is_file() else None
        tests = {f"/tests/{k}": v for k, v in _files(root / "tests").items()}
        tests["/tests/run-tests.sh"] = (root / "run-tests.sh").read_bytes()
        context = root
        task: dict[str, Any] = {
            "format": "terminal-bench",
            "question": instruction.strip(),
            "agent_timeout": float(meta.get("max_agent_timeout_sec", _DEFAULT_AGENT_TIMEOUT)),
            "test_timeout": float(meta.get("max_test_timeout_sec", _DEFAULT_TEST_TIMEOUT)),
            "solution_script": (root / "solution.sh").read_text(encoding="utf-8"),
            "test_files": tests,
            "test_command": "bash /tests/run-tests.sh",
            "category": meta.get("category"),
            "image": meta.get("image") or meta.get("docker_image"),
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
        dockerfile = root / "environment" / "Dockerfile"
        parsed = parse_dockerfile(dockerfile) if dockerfile.is_file() else None
        context = root / "environment"
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
        }
    else:
        raise ConfigError(f"{root}: expected a task directory with task.yaml (Terminal-Bench) or "
                          "instruction.md and task.toml (Harbor)")
    task["setup"] = _setup_files(context, parsed) if parsed else []
    task["env"] = dict(parsed["env"]) if parsed else {}
    if task["image"] is not None and (not isinstance(task["image"], str) or not task["image"].strip()):
        raise ConfigError(f"{root}: expected the image to be a non-empty string, got {task['image']!r}")
    task["base_image"] = parsed["image"] if parsed else None
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
