r"""A task's ``Dockerfile`` read as Docker reads it, for the sandboxes that do not build images.

:func:`parse_dockerfile` splits the file into instructions (continuation lines joined,
comments dropped, shell and JSON forms). :func:`resolve_dockerfile` then walks them in
order against a base environment (the image's, or the local sandbox's), as a build does:

* ``ARG name[=default]`` and ``ENV key=value ...`` (or ``ENV key value``) define variables
  from their line on; ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alternative}`` in
  ``ENV``, ``ARG``, ``WORKDIR``, ``COPY``/``ADD`` and ``USER`` expand against what was defined
  before (within one ``ENV`` line, against the values before that line); ``\$`` is a literal
  dollar. ``ARG`` values reach the ``RUN`` steps after them but not the final environment.
* ``WORKDIR`` (relative to the previous one) is created and is where later ``RUN`` steps,
  the agent's shell, the solution and the tests start.
* ``COPY``/``ADD`` copy from the build context to any absolute path (a relative destination
  is under the working directory); ``RUN`` runs (as root in the sandbox, no network) with the
  environment and working directory of its place in the file. The shell expands ``RUN``'s own
  ``$VAR`` at run time, as in Docker.

What a sandbox without an image cannot honour (``COPY --from``, ``ADD`` of a URL,
``RUN --mount``/``--network``) raises :class:`~agent_gym.errors.ConfigError` naming the
instruction; ``FROM`` names the image (its ``ARG`` expanded), ``USER`` is recorded, and
``CMD``, ``ENTRYPOINT``, ``EXPOSE``, ``LABEL`` and the like have no effect on a task's files.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_gym.errors import ConfigError

__all__ = ["DEFAULT_PATH", "expand", "parse_dockerfile", "resolve_dockerfile"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""``PATH`` of an image that sets none (Docker's default)."""

_VAR = re.compile(r"\\\$|\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}"
                  r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, variables: Mapping[str, str]) -> str:
    r"""``text`` with ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alt}`` replaced (Docker's rules).

    An undefined variable is empty; ``\$`` stays a literal ``$``.
    """

    def one(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "\\$":
            return "$"
        name = match.group("braced") or match.group("plain")
        value = variables.get(name)
        op = match.group("op")
        if op == "-":
            return value if value else expand(match.group("word") or "", variables)
        if op == "+":
            return expand(match.group("word") or "", variables) if value else ""
        return value or ""

    return _VAR.sub(one, text)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, instruction text): continuations joined, comments and blank lines dropped."""
    lines: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not current:
            start = number
        if stripped.endswith("\\"):
            current.append(stripped[:-1])
            continue
        current.append(stripped)
        lines.append((start, " ".join(part.strip() for part in current if part.strip())))
        current = []
    if current:
        lines.append((start, " ".join(current)))
    return lines


def parse_dockerfile(path: str | Path) -> list[dict[str, Any]]:
    """The instructions of a Dockerfile: ``{"line", "keyword", "flags", "args", "json"}`` each, in order.

    ``args`` is the text after the keyword and its ``--flags`` (``json``: the exec-form list, or None).
    """
    text = Path(path).read_text(encoding="utf-8")
    found = []
    for number, line in _logical_lines(text):
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        flags: dict[str, str] = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
            rest = rest.strip()
        exec_form = None
        if rest.startswith("["):
            try:
                parsed = json.loads(rest)
                if isinstance(parsed, list) and all(isinstance(p, str) for p in parsed):
                    exec_form = parsed
            except ValueError:
                pass
        found.append({"line": number, "keyword": keyword.upper(), "flags": flags, "args": rest, "json": exec_form})
    return found


def _pairs(args: str) -> list[tuple[str, str]]:
    """``ENV``/``ARG`` items: ``k=v k2="v 2"`` or the legacy ``k value with spaces``."""
    first = args.split(None, 1)[0] if args.split() else ""
    if "=" not in first:
        key, _, value = args.partition(" ")
        return [(key, value.strip())]
    items = shlex.split(args.replace("\\$", "\\\\$"), posix=True)
    return [(item.partition("=")[0], item.partition("=")[2]) for item in items]


def _where(source: str, item: dict[str, Any]) -> str:
    return f"{source}:{item['line']}: {item['keyword']}"


def resolve_dockerfile(instructions: list[dict[str, Any]], base_env: Mapping[str, str], context: Path,
                       source: str = "Dockerfile", workdir: str = "/") -> dict[str, Any]:
    """Walk the instructions in order (see the module docstring).

    Args:
        instructions: From :func:`parse_dockerfile`.
        base_env: The environment of the base image (or of the sandbox standing in for it).
        context: The build context (``COPY`` sources).
        source: How to name the file in errors (e.g. the task's path).
        workdir: The base image's working directory (where steps before a ``WORKDIR`` run).

    Returns:
        ``{"image", "env", "workdir", "user", "steps"}``: the final ``ENV`` environment (base
        included), the final working directory and the steps in order, each
        ``("file", path, (bytes, mode))``, ``("dir", path, None)`` or ``("run", command, {"env", "cwd"})``.

    Raises:
        ConfigError: For an instruction the sandbox cannot honour or a missing ``COPY`` source.
    """
    env = {str(k): str(v) for k, v in base_env.items()}
    env.setdefault("PATH", DEFAULT_PATH)
    args: dict[str, str] = {}
    global_args: dict[str, str] = {}
    image = None
    user = None
    steps: list[tuple[str, str, Any]] = []
    seen_from = False
    root = context.resolve()
    for item in instructions:
        keyword, text = item["keyword"], item["args"]
        where = _where(source, item)
        scope = {**env, **args}
        if keyword == "ARG":
            for key, value in _pairs(text) if "=" in text else [(text.strip(), "")]:
                target = args if seen_from else global_args
                if "=" in text:
                    target[key] = expand(value, scope)
                else:
                    target[key] = global_args.get(key, args.get(key, ""))
        elif keyword == "FROM":
            image = expand(text.split()[0], global_args) if text.split() else None
            seen_from = True
            args = {}
        elif keyword == "ENV":
            updates = {key: expand(value, scope) for key, value in _pairs(text)}
            env.update(updates)
        elif keyword == "WORKDIR":
            path = expand(text, scope).strip()
            workdir = posixpath.normpath(posixpath.join(workdir, path))
            steps.append(("dir", workdir, None))
        elif keyword == "USER":
            user = expand(text, scope).strip() or None
        elif keyword in ("COPY", "ADD"):
            if "from" in item["flags"]:
                raise ConfigError(f"{where} --from={item['flags']['from']}: copying from another build stage or "
                                  "image needs the image built; run this task with backend='docker' and a built image")
            parts = [expand(p, scope) for p in (item["json"] or shlex.split(text))]
            if len(parts) < 2:
                raise ConfigError(f"{where}: expected sources and a destination, got {text!r}")
            dest = parts[-1]
            many = len(parts) > 2
            dest_abs = posixpath.normpath(posixpath.join(workdir, dest)) + ("/" if dest.endswith("/") else "")
            for src in parts[:-1]:
                if "://" in src:
                    raise ConfigError(f"{where} {src}: downloading needs a network; the sandbox has none "
                                      "(put the file in the task directory)")
                steps.extend(_copy(root, src, dest_abs, many, where))
        elif keyword == "RUN":
            if "mount" in item["flags"] or "network" in item["flags"]:
                flag = "mount" if "mount" in item["flags"] else "network"
                raise ConfigError(f"{where} --{flag}: the sandbox cannot honour RUN --{flag}; build the image "
                                  "and run the task with backend='docker'")
            command = shlex.join(item["json"]) if item["json"] else text
            steps.append(("run", command, {"env": {**env, **args}, "cwd": workdir}))
    return {"image": image, "env": env, "workdir": workdir, "user": user, "steps": steps}


def _copy(root: Path, src: str, dest: str, many: bool, where: str) -> list[tuple[str, str, Any]]:
    source = (root / src.lstrip("/")).resolve()
    if source != root and root not in source.parents:
        raise ConfigError(f"{where} {src}: the source is outside the build context")
    matches = sorted(root.glob(src.lstrip("/"))) if any(c in src for c in "*?[") else [source]
    if not matches or not all(m.exists() for m in matches):
        raise ConfigError(f"{where} {src}: no such file in the build context {root}")
    steps: list[tuple[str, str, Any]] = []
    for match in matches:
        if match.is_dir():
            target = dest.rstrip("/") or "/"
            steps.append(("dir", target, None))
            for path in sorted(match.rglob("*")):
                rel = path.relative_to(match).as_posix()
                if "__pycache__" in path.parts:
                    continue
                if path.is_dir():
                    steps.append(("dir", f"{target.rstrip('/')}/{rel}", None))
                elif path.is_file():
                    data = (path.read_bytes(), path.stat().st_mode & 0o7777)
                    steps.append(("file", f"{target.rstrip('/')}/{rel}", data))
        else:
            target = f"{dest.rstrip('/')}/{match.name}" if dest.endswith("/") or many or len(matches) > 1 else dest
            steps.append(("file", target, (match.read_bytes(), match.stat().st_mode & 0o7777)))
    return steps
