"""Import structure of agent_gym: no import cycle (deferred imports included), and a light ``import agent_gym``."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
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


def _import_nodes(body: list[ast.stmt], *, deferred: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield the import statements of a module body.

    ``if TYPE_CHECKING:`` blocks never run and are skipped (their ``else`` branch
    runs); class bodies, ``try``/``with`` blocks and other ``if`` branches run at
    import time. Function bodies run later: their imports are yielded only with
    ``deferred`` (a cycle closed by an import inside a function is a cycle too).
    """
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_nodes(node.body, deferred=deferred)
            yield from _import_nodes(node.orelse, deferred=deferred)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if deferred:
                yield from _import_nodes(node.body, deferred=deferred)
        else:
            # try/except/else/finally, with, class bodies, loops, match cases: every nested statement list
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, ()):
                    if isinstance(child, ast.stmt):
                        yield from _import_nodes([child], deferred=deferred)
                    elif hasattr(child, "body"):  # except handlers, match cases
                        yield from _import_nodes(child.body, deferred=deferred)


def import_graph(*, deferred: bool = True) -> dict[str, dict[str, int]]:
    """Module -> {agent_gym module it imports: line of the first such import}.

    ``import a.b`` depends on ``a.b``; ``from a import b`` on ``a.b`` when that is a
    module (Python imports the enclosing package ``a`` first anyway), else on ``a``.

    Args:
        deferred: Count imports inside functions (run on first use) too; False gives
            what importing the module itself runs.
    """
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        deps: dict[str, int] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _import_nodes(tree.body, deferred=deferred):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    deps.setdefault(alias.name, node.lineno)
                continue
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                deps.setdefault(sub if sub in modules else base, node.lineno)
        graph[name] = {d: line for d, line in deps.items() if d in modules and d != name}
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every import cycle: the strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    modules = _modules()
    edges = [f"  {modules[a].relative_to(PACKAGE_DIR.parent)}:{line}: imports {b}"
             for a in cycle for b, line in sorted(graph[a].items()) if b in cycle]
    return " <-> ".join(cycle) + "\n" + "\n".join(edges)


def test_import_graph_sees_relative_and_submodule_imports():
    graph = import_graph()
    assert "agent_gym.types" in graph["agent_gym.env.core"]
    assert "agent_gym.errors" in graph["agent_gym.types"]
    # The package itself imports only the registration at import time (the rest is lazy).
    assert set(import_graph(deferred=False)["agent_gym"]) == {"agent_gym.envs"}
    # A deferred import is an edge of the full graph, not of the import-time one.
    assert "agent_gym.report.html" in graph["agent_gym.report.summary"]
    assert "agent_gym.report.html" not in import_graph(deferred=False)["agent_gym.report.summary"]


def test_no_import_cycle_inside_agent_gym():
    graph = import_graph()
    assert len(graph) > 30
    cycles = import_cycles(graph)
    assert not cycles, "import cycles inside agent_gym (imports inside functions count):\n" + "\n".join(
        _describe(c, graph) for c in cycles)


def test_import_graph_finds_a_cycle(tmp_path, monkeypatch):
    # The checker itself: modules that import each other are reported, whether at import time or in a
    # function; an import under ``if TYPE_CHECKING:`` is no edge.
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
    assert graph["agent_gym.sub"] == {"agent_gym.sub.a": 1} and graph["agent_gym.sub.a"] == {}
    assert graph["agent_gym.sub.b"] == {"agent_gym.sub.a": 2} and import_graph(deferred=False)["agent_gym.sub.b"] == {}
    assert import_cycles(graph) == []
    # A cycle closed inside a method of a class, and one at import time through try/except.
    (pkg / "sub" / "a.py").write_text("class A:\n    def m(self):\n        import agent_gym.sub.b\nx = 1\n")
    cycles = import_cycles(import_graph())
    assert cycles == [["agent_gym.sub.a", "agent_gym.sub.b"]]
    assert "sub/a.py:3: imports agent_gym.sub.b" in _describe(cycles[0], import_graph())
    (pkg / "sub" / "b.py").write_text("import agent_gym.sub.c\n")
    (pkg / "sub" / "c.py").write_text("try:\n    from agent_gym.sub import a\nexcept ImportError:\n    pass\n")
    assert import_cycles(import_graph()) == [["agent_gym.sub.a", "agent_gym.sub.b", "agent_gym.sub.c"]]
    assert import_cycles(import_graph(deferred=False)) == []


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
            assert value is importlib.import_module(agent_gym._SUBMODULES[name])
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
NO_ALL_NEEDED = {"agent_gym.__main__", "agent_gym.sandbox._driver"}


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
    assert "agent_gym.env.core" in modules and "agent_gym.tools.base" in modules
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
