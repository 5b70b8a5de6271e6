"""One import path per public name.

Every module under ``agent_gym/`` is parsed with :mod:`ast`. A public name is a name listed in
a module's ``__all__``; the module that defines it (``def``, ``class`` or an assignment, or a
module-level ``__getattr__`` that builds it on first access) is its one home. Another module may
list it in ``__all__`` only when that module is the ``__init__`` of a package holding the home
(``agent_gym/__init__`` holds every module). Inside the package, a name is imported from its home
or from such an ``__init__``, never from a module that merely imports it too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import agent_gym

PACKAGE_DIR = Path(agent_gym.__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
PACKAGE = PACKAGE_DIR.name
# Task fixtures: repositories the agents edit, not package code.
FIXTURES = ("envs/swe/libraries/", "envs/terminal/tasks/")


@dataclass
class Module:
    """What one module binds at its top level."""

    name: str
    path: Path
    is_package: bool
    exported: list[str] = field(default_factory=list)
    defined: set[str] = field(default_factory=set)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    lazy: bool = False


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: Module) -> str:
    if not node.level:
        return node.module or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The module's statements, those inside top-level ``if``/``try`` blocks included."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
    return out


def _parse(path: Path, root: Path) -> Module:
    module = Module(_module_name(path, root), path, path.name == "__init__.py")
    for node in _top_level(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.defined.add(node.name)
            module.lazy |= node.name == "__getattr__"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t for target in targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            for target in names:
                if not isinstance(target, ast.Name):
                    continue
                if target.id == "__all__":
                    if isinstance(node.value, (ast.List, ast.Tuple)):
                        module.exported += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                else:
                    module.defined.add(target.id)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module)
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module.imported[alias.asname] = (alias.name, "")
    return module


def package_modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the package under ``root`` (task fixtures aside), by dotted name."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if any(part in path.relative_to(root / PACKAGE).as_posix() for part in FIXTURES):
            continue
        module = _parse(path, root)
        found[module.name] = module
    return found


def home(modules: dict[str, Module], module: str, name: str) -> str | None:
    """The module that defines ``name`` as seen from ``module``; None outside the package or not found."""
    seen = set()
    while (module, name) not in seen:
        seen.add((module, name))
        info = modules.get(module)
        if info is None:
            return None
        if name in info.defined:
            return module
        if name in info.imported:
            source, source_name = info.imported[name]
            if not source_name:
                return None
            if f"{source}.{source_name}" in modules and source_name not in modules.get(source, info).defined:
                return f"{source}.{source_name}"  # a submodule
            module, name = source, source_name
            continue
        if info.is_package and f"{module}.{name}" in modules:
            return f"{module}.{name}"  # a submodule
        if info.lazy:
            return module
        return None
    return None


def _may_reexport(modules: dict[str, Module], module: str, defining: str) -> bool:
    return modules[module].is_package and (module == PACKAGE or defining.startswith(module + "."))


def reexport_problems(modules: dict[str, Module]) -> list[str]:
    """``"module: name (home)"`` for each ``__all__`` entry that is neither defined there nor its package's."""
    problems = []
    for name, info in modules.items():
        for public in info.exported:
            defining = home(modules, name, public)
            if defining is None:
                problems.append(f"{name}: {public} (defined nowhere in {PACKAGE})")
            elif defining != name and not _may_reexport(modules, name, defining):
                problems.append(f"{name}: {public} (defined in {defining})")
    return problems


def import_problems(modules: dict[str, Module], paths: list[Path]) -> list[str]:
    """``"file:line: from M import name (home)"`` for each import of a name from a module that only imports it."""
    problems = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        here = modules.get(_module_name(path, ROOT)) if path.is_relative_to(ROOT / PACKAGE) else None
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _absolute(node, here) if here is not None else (node.module or "")
            info = modules.get(source)
            if info is None:
                continue
            for alias in node.names:
                if alias.name in info.defined or alias.name == "*":
                    continue
                if info.is_package and f"{source}.{alias.name}" in modules:
                    continue
                if info.lazy and alias.name not in info.imported:
                    continue
                defining = home(modules, source, alias.name)
                if defining is not None and alias.name in info.exported and _may_reexport(modules, source, defining):
                    continue
                problems.append(f"{where}:{node.lineno}: from {source} import {alias.name} (home: {defining})")
    return problems


def test_each_public_name_has_one_home_reexported_only_by_its_packages():
    modules = package_modules()
    assert len(modules) > 100
    assert reexport_problems(modules) == []


def test_imports_name_the_home_or_its_package():
    modules = package_modules()
    paths = [info.path for info in modules.values()]
    for folder in ("tests", "benchmarks", "scripts"):
        paths += sorted((ROOT / folder).rglob("*.py"))
    assert import_problems(modules, paths) == []


def test_checks_see_a_foreign_reexport_and_a_former_path(tmp_path):
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('from agent_gym.sub.thing import Thing\n__all__ = ["Thing"]\n')
    (package / "sub" / "__init__.py").write_text('from .thing import Thing\n__all__ = ["Thing"]\n')
    (package / "sub" / "thing.py").write_text('class Thing:\n    pass\n__all__ = ["Thing"]\n')
    (package / "other.py").write_text('from agent_gym.sub.thing import Thing\n__all__ = ["Thing", "gone"]\n')
    (package / "user.py").write_text('from agent_gym.other import Thing\nfrom agent_gym.sub import Thing as T\n')
    modules = package_modules(tmp_path)
    assert home(modules, "agent_gym", "Thing") == "agent_gym.sub.thing"
    assert reexport_problems(modules) == [
        "agent_gym.other: Thing (defined in agent_gym.sub.thing)",
        "agent_gym.other: gone (defined nowhere in agent_gym)",
    ]
    user = package / "user.py"
    assert import_problems(modules, [user]) == [
        "user.py:1: from agent_gym.other import Thing (home: agent_gym.sub.thing)"
    ]
