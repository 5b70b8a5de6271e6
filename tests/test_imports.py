"""Import structure of agent_gym: no import cycle, and a light ``import agent_gym``."""

from __future__ import annotations

import ast
import graphlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import agent_gym

PACKAGE_DIR = Path(agent_gym.__file__).resolve().parent
HEAVY = ("torch", "transformers", "aiohttp", "pyarrow", "fastapi", "ray")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt]):
    """Yield the import statements that run when the module is imported.

    Function bodies run later and ``if TYPE_CHECKING:`` blocks never; class bodies,
    ``try``/``with`` blocks and other ``if`` branches run at import time.
    """
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_nodes(node.body)
            yield from _import_time_nodes(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_nodes(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _import_time_nodes(node.body)


def import_graph() -> dict[str, set[str]]:
    """Module -> the agent_gym modules it imports at import time.

    ``import a.b`` depends on ``a.b``; ``from a import b`` on ``a.b`` when that is a
    module (Python imports the enclosing package ``a`` first anyway), else on ``a``.
    """
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in _import_time_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path)).body):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
                continue
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    deps.add(sub)
                else:
                    deps.add(base)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_import_graph_sees_relative_and_submodule_imports():
    graph = import_graph()
    assert "agent_gym.types" in graph["agent_gym.core"]
    assert "agent_gym.errors" in graph["agent_gym.types"]
    # The package itself imports only the registration at import time (the rest is lazy).
    assert graph["agent_gym"] == {"agent_gym.envs"}


def test_no_import_cycle_inside_agent_gym():
    graph = import_graph()
    assert len(graph) > 30
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle inside agent_gym: {' -> '.join(exc.args[1])}")
    assert set(order) == set(graph)


def test_import_graph_finds_a_cycle(tmp_path, monkeypatch):
    # The checker itself: two modules that import each other are reported.
    pkg = tmp_path / "agent_gym"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import x\n")
    (pkg / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nx = 1\n"
    )
    (pkg / "sub" / "b.py").write_text("def f():\n    from agent_gym.sub import a\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_DIR", pkg)
    graph = import_graph()
    assert graph["agent_gym.sub"] == {"agent_gym.sub.a"} and graph["agent_gym.sub.a"] == set()
    list(graphlib.TopologicalSorter(graph).static_order())
    (pkg / "sub" / "b.py").write_text("import agent_gym.sub.a\n")
    (pkg / "sub" / "a.py").write_text("try:\n    from agent_gym.sub import b\nexcept ImportError:\n    pass\nx = 1\n")
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(import_graph()).static_order())


def _loaded_after(code: str) -> dict:
    script = f"import json, sys\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=PACKAGE_DIR.parent
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gym_make_imports_no_heavy_dependency():
    loaded = _loaded_after(
        "import gymnasium as gym, agent_gym\nenv = gym.make('agent_gym/ToolUse-v0')\nenv.reset(seed=0)\nenv.close()"
    )
    assert not any(loaded[m] for m in ("torch", "transformers", "aiohttp", "pyarrow")), loaded
    assert not loaded["fastapi"] and not loaded["ray"], loaded


def test_trajectory_wrapper_import_is_light():
    loaded = _loaded_after("import agent_gym\nagent_gym.TrajectoryWrapper")
    assert not any(loaded.values()), loaded


def test_public_names_load_on_first_use():
    assert set(agent_gym.__all__) <= set(dir(agent_gym))
    for name in agent_gym.__all__:
        value = getattr(agent_gym, name)
        if name in agent_gym._SUBMODULES:
            assert value is importlib.import_module(f"agent_gym.{name}")
        elif name != "__version__":
            module = importlib.import_module(agent_gym._LAZY[name])
            assert value is getattr(module, name)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        agent_gym.NoSuchName  # noqa: B018


def test_import_registers_every_env_id():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gymnasium as gym, agent_gym, agent_gym.envs as e\n"
            "print(all(i.id in gym.registry for i in e.ENV_INFOS), len(e.ENV_INFOS))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["True", str(len(agent_gym.envs.ENV_INFOS))]


# Entry points (importing them runs the command) and the sandbox driver (run inside the sandbox,
# never imported by the host) export nothing.
NO_ALL_NEEDED = {"agent_gym.__main__", "agent_gym.server.__main__", "agent_gym.sandbox._driver"}


def _package_modules() -> dict[str, Path]:
    """Modules of the package itself: files in folders that are packages (not shipped task data)."""
    def in_package(path: Path) -> bool:
        folders = [d for d in [path.parent, *path.parent.parents] if d == PACKAGE_DIR or PACKAGE_DIR in d.parents]
        return all((d / "__init__.py").is_file() for d in folders)

    return {name: path for name, path in _modules().items() if in_package(path)}


def _declares_all(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_every_module_has_a_docstring_and_all():
    modules = _package_modules()
    assert "agent_gym.core" in modules and "agent_gym.tools.base" in modules
    assert not any(".tasks." in name and "terminal" in name for name in modules)
    missing_doc, missing_all = [], []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if not (ast.get_docstring(tree) or "").strip():
            missing_doc.append(name)
        if name not in NO_ALL_NEEDED and not _declares_all(tree):
            missing_all.append(name)
    assert not missing_doc, f"modules without a docstring: {missing_doc}"
    assert not missing_all, f"modules without __all__: {missing_all}"


def test_module_checks_see_a_missing_docstring_and_all(tmp_path, monkeypatch):
    pkg = tmp_path / "agent_gym"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Package."""\n__all__ = []\n')
    (pkg / "bare.py").write_text("x = 1\n")
    (pkg / "typed.py").write_text('"""Doc."""\n__all__: list[str] = ["y"]\ny = 2\n')
    (pkg / "data" / "script.py").write_text("print(1)\n")  # not in a package: not a module of ours
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_DIR", pkg)
    modules = _package_modules()
    assert set(modules) == {"agent_gym", "agent_gym.bare", "agent_gym.typed"}
    trees = {n: ast.parse(p.read_text()) for n, p in modules.items()}
    assert [n for n, t in trees.items() if not _declares_all(t)] == ["agent_gym.bare"]
    assert [n for n, t in trees.items() if not ast.get_docstring(t)] == ["agent_gym.bare"]
