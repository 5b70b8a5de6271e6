"""SWE task formats: SWE-bench and SWE-smith instances, and the shipped tasks.

Every task becomes one dict (:func:`normalize_task`) with:

* ``id``, ``question`` (the problem statement), ``source`` (``{"library": name}``,
  ``{"repo_path": path, "commit": rev}`` or ``{"dir": path}``; see :mod:`agent_gym.envs.swe.repo`);
* ``bug_patch`` (applied to the source to make the base; SWE-smith style; "" for SWE-bench),
  ``patch`` (the gold fix; computed from ``bug_patch`` when missing), ``test_patch`` (hidden tests);
* ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists; SWE-bench's JSON strings are decoded);
* optional ``test_command`` (default pytest) with ``parser_name`` for its output, ``test_env`` (variables of
  the test run, e.g. ``{"PYTHONPATH": "src"}``), ``test_targets``
  (test files to run; default the test patch's files, else the whole suite), ``protected_files``
  (patterns whose changes grading drops), ``exclude`` (patterns left out of the captured patch),
  ``image`` (a Docker image), ``split`` and ``library``.

**SWE-bench** instances (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
``problem_statement``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``) name a repository the user has locally
(nothing is downloaded): ``repo_path`` in the instance, or ``repos=`` a folder holding it as
``owner__name``, ``name`` or ``owner/name``, or ``repos=`` the repository itself.
**SWE-smith** instances have no ``base_commit``: their ``patch`` is the bug, applied to the local
repository's ``HEAD`` (or ``commit``); the fix is its reverse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_gym.envs.swe.repo import LIBRARIES, patch_files
from agent_gym.errors import ConfigError

__all__ = ["SPLITS", "TASKS_PATH", "load_instances", "normalize_task", "resolve_repo", "shipped_tasks"]

TASKS_PATH = Path(__file__).with_name("data") / "tasks.jsonl"
"""The shipped tasks (generated once by :mod:`agent_gym.envs.swe.generate` from the shipped libraries)."""

SPLITS = {"train": ("textkit", "intervals", "gridpath"), "test": ("ledger",)}
"""Shipped libraries per split (tasks never share a library across splits)."""


def _as_list(value: Any, where: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"{where}: expected a list of test names or its JSON text, got {value!r:.80}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of test names, got {value!r:.80}")
    return list(value)


def resolve_repo(repo: str, repos: str | os.PathLike[str] | None) -> str:
    """The local path of ``repo`` (``owner/name``) under ``repos`` (see the module docstring).

    Raises:
        ConfigError: When no such repository is there.
    """
    if repos is None:
        raise ConfigError(f"the instance's repository {repo!r} needs a local copy: pass repos= (a folder of "
                          "repositories or the repository) or give the instance a 'repo_path'")
    root = Path(repos)
    owner, _, name = repo.rpartition("/")
    candidates = [root / f"{owner}__{name}", root / name, root / repo] if name else [root / repo]
    for candidate in candidates:
        if (candidate / ".git").exists():
            return str(candidate)
    if (root / ".git").exists():
        return str(root)
    raise ConfigError(f"no local repository for {repo!r} in {root} (looked for {[str(c) for c in candidates]})")


def normalize_task(raw: Mapping[str, Any], where: str = "task", repos: str | os.PathLike[str] | None = None
                   ) -> dict[str, Any]:
    """One task of any supported format as the env's task dict (see the module docstring).

    Raises:
        ValueError: Naming what is missing or malformed.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a dict (a SWE-bench or SWE-smith instance), got {type(raw).__name__}")
    task = dict(raw)
    task.setdefault("id", raw.get("instance_id"))
    if not task.get("id"):
        raise ValueError(f"{where}: expected 'id' or 'instance_id', got keys {sorted(map(str, raw))}")
    task.setdefault("question", raw.get("problem_statement") or "")
    if not str(task["question"]).strip():
        raise ValueError(f"{where}: expected a non-empty 'problem_statement' (or 'question')")
    if "source" not in task:
        if raw.get("library"):
            task["source"] = {"library": raw["library"]}
        elif raw.get("dir"):
            task["source"] = {"dir": str(raw["dir"])}
        elif raw.get("repo_path") or raw.get("repo"):
            path = str(raw.get("repo_path") or resolve_repo(str(raw["repo"]), repos))
            if raw.get("base_commit"):
                task["source"] = {"repo_path": path, "commit": str(raw["base_commit"])}
            else:  # SWE-smith: the patch is the bug, applied to HEAD (or "commit")
                task["source"] = {"repo_path": path, "commit": str(raw.get("commit") or "HEAD")}
                if "bug_patch" not in raw:
                    task["bug_patch"] = str(raw.get("patch") or "")
                    task["patch"] = ""
        else:
            raise ValueError(f"{where}: expected a 'repo' (with repos= or 'repo_path'), a 'library' or a 'dir'")
    source = task["source"]
    if not isinstance(source, Mapping) or not ({"library", "repo_path", "dir"} & set(source)):
        raise ValueError(f"{where}: expected 'source' with 'library', 'repo_path' or 'dir', got {source!r:.80}")
    if source.get("library") and source["library"] not in LIBRARIES:
        raise ValueError(f"{where}: unknown library {source['library']!r}; expected one of {LIBRARIES}")
    for key in ("bug_patch", "patch", "test_patch"):
        if not isinstance(task.get(key, ""), str):
            raise ValueError(f"{where}: expected {key!r} to be a str (a unified diff)")
        task[key] = str(task.get(key) or "")
    task["FAIL_TO_PASS"] = _as_list(raw.get("FAIL_TO_PASS"), f"{where}.FAIL_TO_PASS")
    task["PASS_TO_PASS"] = _as_list(raw.get("PASS_TO_PASS"), f"{where}.PASS_TO_PASS")
    if not task["FAIL_TO_PASS"]:
        raise ValueError(f"{where}: expected at least one FAIL_TO_PASS test (a task nothing can fail is no task)")
    if "test_targets" not in task and task["test_patch"] and not task.get("test_command"):
        task["test_targets"] = [p for p in patch_files(task["test_patch"]) if p.endswith(".py")]
    for key in ("test_targets", "protected_files", "exclude"):
        value = task.get(key) or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}: expected {key!r} to be a list of str, got {value!r:.80}")
        task[key] = list(value)
    test_env = task.get("test_env") or {}
    if not isinstance(test_env, Mapping):
        raise ValueError(f"{where}: expected 'test_env' to be a dict of environment variables, got {test_env!r:.80}")
    task["test_env"] = {str(k): str(v) for k, v in test_env.items()}
    task.setdefault("ground_truth", "")
    return task


def load_instances(path: str | os.PathLike[str], repos: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Instances from a ``.json`` (a list) or ``.jsonl`` file, normalised (see :func:`normalize_task`)."""
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".jsonl"):
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        loaded = json.loads(text)
        items = loaded if isinstance(loaded, list) else [loaded]
    return [normalize_task(item, f"{path}[{i}]", repos=repos) for i, item in enumerate(items)]


@lru_cache(maxsize=1)
def _shipped() -> tuple[dict[str, Any], ...]:
    if not TASKS_PATH.exists():
        return ()
    lines = TASKS_PATH.read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


def shipped_tasks(split: str | None = None, libraries: Sequence[str] | None = None) -> tuple[dict[str, Any], ...]:
    """The shipped tasks (all, or those of ``split`` ``"train"``/``"test"``, or of ``libraries``)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split: expected one of {sorted(SPLITS)} or None, got {split!r}")
    wanted = set(libraries or LIBRARIES) & set(SPLITS[split] if split else LIBRARIES)
    return tuple(t for t in _shipped() if t["library"] in wanted)
