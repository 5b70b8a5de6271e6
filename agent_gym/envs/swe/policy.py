"""What a patch may change, checked before its tests run (SWE-v0 grading).

Three kinds of rule:

* **Dropped** (:func:`filter_patch`): changes that decide how the tests run are taken out of the patch
  and listed (``dropped_files``), as SWE-bench does with test files: the task's test files and any test
  file by name (:func:`is_test_path`), every configuration file pytest reads (:data:`CONFIG_NAMES`,
  the names of ``_pytest.config.findpaths`` and ``conftest.py``) and the task's ``protected_files``.
  A patch may fix the code and touch its tests; only the fix is graded.
* **Rejected** (the patch scores 0 with the reasons, ``apply["policy"]``):

  - by kind, on the tree after the patch went in (:func:`tree_violations`): compiled files
    (``*.pyc``, ``*.pyo``, ``*.so``, ``*.pyd``, ``*.dll``, ``*.dylib``, anything under ``__pycache__``),
    start-up hooks of Python (``*.pth``, ``sitecustomize.py``, ``usercustomize.py``), git attribute
    files (``.gitattributes``: they change how the hidden tests' patch applies), anything under
    ``.git``, symbolic links and nested repositories, and any file that changed although the diff
    does not show it (a patch format the filter could not read);
  - by content (:func:`static_violations`): added lines of the library's Python files that name the
    test runner (``pytest``, ``_pytest``, ``pluggy``, ``unittest``, ``iniconfig``) or the interpreter's
    means to reach or rewrite code it did not write (:data:`STATIC_RULES`: frames, the garbage
    collector's object lists, ``sys.modules``, import hooks, ``builtins``, ``ctypes``, code objects,
    tracing, audit hooks, ``exec``/``eval``/``compile``, ``/proc``), unless the file already names
    them in the base (a library of pytest helpers may keep using pytest). This rule only names the
    attempt; the guard of the test run stops what it misses (:mod:`agent_gym.envs.swe.scripts.guarded_pytest`);
  - shadowing (:func:`shadowing_violations`): a new module or package whose import name is that of
    another module of the repository (a package ``pkg/mod/`` beside ``pkg/mod.py``, a top-level
    ``pkg.py`` beside ``src/pkg/``), of the standard library, or of an installed distribution.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence

from agent_gym.envs.swe.repo import split_patch

__all__ = [
    "ATTRIBUTE_NAMES",
    "COMPILED_SUFFIXES",
    "CONFIG_NAMES",
    "PROTECTED_NAMES",
    "RUNNER_NAMES",
    "STARTUP_NAMES",
    "STATIC_RULES",
    "added_files",
    "filter_patch",
    "is_test_path",
    "module_name",
    "patch_paths",
    "shadowing_violations",
    "static_violations",
    "test_roots",
    "tree_violations",
]

CONFIG_NAMES = ("conftest.py", "pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                "tox.ini", "setup.cfg")
"""File names pytest reads its configuration or plugins from (any directory)."""

STARTUP_NAMES = ("sitecustomize.py", "usercustomize.py", "*.pth")
"""File names that make Python run code at start-up when they lie on ``sys.path``."""

COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib")
"""Compiled code Python imports instead of (or besides) source."""

ATTRIBUTE_NAMES = (".gitattributes",)
"""Files that change how git applies patches (the hidden tests come as one)."""

PROTECTED_NAMES = (*CONFIG_NAMES, *STARTUP_NAMES, ".pytest_cache")
"""Names whose changes :func:`filter_patch` drops (start-up hooks are dropped here and rejected on the tree)."""

RUNNER_NAMES = ("_pytest", "pytest", "pluggy", "iniconfig", "unittest")
"""The test runner's modules; library code of a patch may not name them (unless its base file does)."""

_WORD = r"(?<![\w.]){}(?!\w)"
STATIC_RULES: tuple[tuple[str, str], ...] = (
    ("the test runner", r"(?<!\w)(?:_pytest|pytest|pluggy|iniconfig|unittest)(?!\w)"),
    ("stack frames", r"(?<!\w)(?:_getframe|_current_frames|currentframe|f_back|f_globals|f_locals|f_builtins"
                     r"|tb_frame|gi_frame|cr_frame|ag_frame|walk_tb|walk_stack|getouterframes|getinnerframes)(?!\w)"),
    ("the garbage collector's object lists", r"(?<!\w)(?:get_objects|get_referrers|get_referents)(?!\w)"),
    ("the module table or import hooks", r"(?<!\w)(?:meta_path|path_hooks|path_importer_cache|__import__"
                                         r"|importlib)(?!\w)|(?<!\w)sys\s*\.\s*modules(?!\w)"),
    ("builtins", r"(?<!\w)(?:builtins|__builtins__)(?!\w)"),
    ("code objects", r"(?<!\w)(?:__code__|__globals__|__closure__|cell_contents|CodeType|FunctionType|marshal"
                     r"|__subclasses__)(?!\w)"),
    ("tracing or audit hooks", r"(?<!\w)(?:settrace|setprofile|addaudithook)(?!\w)"),
    ("ctypes", r"(?<!\w)ctypes(?!\w)"),
    ("exec, eval or compile", r"(?<![\w.])(?:exec|eval|compile)\s*\("),
    ("the process's own files", r"/proc/|AGENT_GYM|agent_gym_swe"),
)
"""``(what, pattern)``: what added library lines may not name (see the module docstring)."""
_STATIC = tuple((what, re.compile(pattern)) for what, pattern in STATIC_RULES)


def is_test_path(path: str) -> bool:
    """True for a test file by name: ``test_*.py``, ``*_test.py``, or a file under ``tests/``, ``test/``, ``testing/``.

    Every file of such a directory counts (data and helpers the tests read too).
    """
    parts = path.split("/")
    name = parts[-1]
    return (fnmatch.fnmatch(name, "test_*.py") or fnmatch.fnmatch(name, "*_test.py")
            or any(p in ("tests", "test", "testing") for p in parts[:-1]))


def _name_matches(path: str, patterns: Iterable[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _dropped(path: str, extra: Sequence[str]) -> bool:
    if _name_matches(path, PROTECTED_NAMES):
        return True
    return is_test_path(path) or any(fnmatch.fnmatch(path, pattern) for pattern in extra)


def filter_patch(patch: str, test_files: Sequence[str] = (), protected: Sequence[str] = ()) -> tuple[str, list[str]]:
    """``(kept patch, dropped paths)``: the patch without tests and runner configuration (see the module docstring)."""
    kept: list[str] = []
    dropped: list[str] = []
    hidden = set(test_files)
    for path, text in split_patch(patch):
        if path in hidden or _dropped(path, protected):
            dropped.append(path)
        else:
            kept.append(text)
    return "".join(kept), dropped


def _kind_violation(path: str, mode: str) -> str | None:
    parts = path.split("/")
    name = parts[-1]
    if ".git" in parts:
        return f"{path}: changes git's own files"
    if _name_matches(path, STARTUP_NAMES):
        return f"{path}: a start-up hook of Python (it runs code in every Python process)"
    if name.endswith(COMPILED_SUFFIXES) or "__pycache__" in parts:
        return f"{path}: a compiled file (what runs would not be what the diff shows)"
    if name in ATTRIBUTE_NAMES:
        return f"{path}: a git attributes file (it changes how the hidden tests are applied)"
    if mode == "120000":
        return f"{path}: a symbolic link"
    if mode == "160000":
        return f"{path}: a nested repository"
    return None


def tree_violations(changes: Iterable[tuple[str, str, str]], shown: set[str]) -> list[str]:
    """Why the tree after the patch breaks the policy (see the module docstring); [] when it does not.

    Args:
        changes: ``(status, new mode, path)`` of every file that differs from the base (git's
            A/M/D/T and mode; ignored and untracked files included).
        shown: The paths the applied (filtered) patch shows.
    """
    found = []
    for status, mode, path in changes:
        if status != "D":
            problem = _kind_violation(path, mode)
            if problem:
                found.append(problem)
                continue
        if path not in shown:
            found.append(f"{path}: changed although the diff does not show it")
    return found


def static_violations(patch: str, base_text: Callable[[str], str | None]) -> list[str]:
    """Added library lines that name what :data:`STATIC_RULES` lists, where the base file does not.

    Args:
        patch: The (filtered) patch.
        base_text: The text of a file in the base (None for a new file).
    """
    found = []
    for path, text in split_patch(patch):
        if not path.endswith(".py") or is_test_path(path):
            continue
        added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
        if not added:
            continue
        base = base_text(path) or ""
        for what, pattern in _STATIC:
            for line in added:
                match = pattern.search(line)
                if match and not pattern.search(base):
                    found.append(f"{path}: the patch's code names {what} ({match.group(0).strip()!r} in "
                                 f"{line.strip()[:80]!r})")
                    break
    return found


def module_name(path: str, root: str) -> str | None:
    """The import name of ``path`` on the ``sys.path`` entry ``root`` ("" for the repository), or None."""
    if root:
        if not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root.rstrip("/")) + 1:]
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def test_roots(paths: Iterable[str]) -> list[str]:
    """Directories pytest puts on ``sys.path`` for the test files among ``paths`` (``prepend`` import mode)."""
    files = set(paths)
    roots = set()
    for path in files:
        if not is_test_path(path) or not path.endswith(".py"):
            continue
        parts = path.split("/")[:-1]
        while parts and "/".join([*parts, "__init__.py"]) in files:
            parts.pop()
        roots.add("/".join(parts))
    return sorted(roots)


def patch_paths(patch: str) -> tuple[set[str], list[str], set[str]]:
    """``(every path the patch names, the files it adds, the files it deletes)`` (old and new names of renames)."""
    named: set[str] = set()
    added: list[str] = []
    deleted: set[str] = set()
    for path, text in split_patch(patch):
        named.add(path)
        header = text.split("\n@@", 1)[0]
        for line in header.splitlines():
            for prefix in ("rename from ", "rename to ", "copy from ", "copy to "):
                if line.startswith(prefix):
                    named.add(line[len(prefix):].strip().strip('"'))
            if line.startswith("--- ") and not line.startswith("--- /dev/null"):
                old = line[4:].split("\t", 1)[0].strip().strip('"')
                named.add(old[2:] if old[:2] in ("a/", "b/") else old)
        if "\nnew file mode" in header or "\n--- /dev/null" in header:
            added.append(path)
        if "\ndeleted file mode" in header or "\n+++ /dev/null" in header:
            deleted.add(path)
    return named, added, deleted


def added_files(changes: Iterable[tuple[str, str, str]]) -> tuple[list[str], set[str]]:
    """``(added paths, deleted paths)`` of a tree's changes (see :func:`tree_violations`)."""
    changes = list(changes)
    return [p for s, _, p in changes if s == "A"], {p for s, _, p in changes if s == "D"}


def shadowing_violations(new_paths: Iterable[str], base_paths: Iterable[str], deleted: set[str],
                         roots: Sequence[str], stdlib: set[str], installed: set[str]) -> list[str]:
    """New modules that take another module's import name (see the module docstring).

    Args:
        new_paths: Files the patch adds.
        base_paths: Files of the base.
        deleted: Files the patch deletes (a module replaced by a package of the same name is a move).
        roots: The ``sys.path`` entries inside the repository ("" for its root, e.g. ``"src"``).
        stdlib: Top-level names of the standard library.
        installed: Top-level names of what is installed where the tests run.
    """
    existing: dict[str, str] = {}
    for path in base_paths:
        if path in deleted:
            continue
        for root in roots:
            name = module_name(path, root)
            if name is not None:
                existing.setdefault(name, path)
    found = []
    for path in new_paths:
        for root in roots:
            name = module_name(path, root)
            if name is None:
                continue
            if name in existing and existing[name] != path:
                found.append(f"{path}: shadows {existing[name]} (both import as {name!r})")
                break
            if "." not in name and name in stdlib:
                found.append(f"{path}: shadows the standard library's {name!r}")
                break
            if "." not in name and name in installed:
                found.append(f"{path}: shadows the installed module {name!r}")
                break
    return found
