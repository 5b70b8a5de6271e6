"""The envs under ``agent_gym/envs/`` use ``AgentEnv``'s public hooks only, never its private attributes."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import gymnasium as gym

import agent_gym.env.core
from agent_gym.env.core import AgentEnv

ENVS_DIR = Path(agent_gym.env.core.__file__).resolve().parents[1] / "envs"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def base_private_names() -> set[str]:
    """Private attributes and methods of ``AgentEnv`` (and of ``gymnasium.Env``): assigned on ``self`` or defined."""
    names: set[str] = set()
    for cls in (AgentEnv, gym.Env):
        names.update(n for n in vars(cls) if _private(n))
        tree = ast.parse(inspect.getsource(cls))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and isinstance(node.ctx, ast.Store) and _private(node.attr)):
                names.add(node.attr)
    return names


def _base_names(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def env_class_names(trees: list[ast.Module]) -> set[str]:
    """Names of the classes that derive from ``AgentEnv``, directly or through another env class."""
    envs = {"AgentEnv"}
    while True:
        more = {node.name for tree in trees for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and _base_names(node) & envs} - envs
        if not more:
            return envs
        envs |= more


def private_uses(tree: ast.Module, filename: str, names: set[str], envs: set[str]) -> list[str]:
    """``file:line`` for every attribute of ``names`` read or written on an env.

    Inside an env class every such attribute counts; elsewhere those of any object but
    ``self`` (another class's own ``self._task`` is its own business).
    """
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and _base_names(node) & envs:
            inside.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in names):
            continue
        on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
        if id(node) in inside or not on_self:
            verb = "assigns" if isinstance(node.ctx, ast.Store) else "uses"
            found.append(f"{filename}:{node.lineno}: {verb} AgentEnv's private .{node.attr}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_the_base_privates_are_found():
    names = base_private_names()
    assert {"_task", "_messages", "_done", "_turns", "_ending", "_toolbox", "_begin_step"} <= names
    assert "_np_random" in names and "step" not in names


def test_the_check_sees_writes_and_reads_on_envs_only():
    source = (
        "class E(AgentEnv):\n    def step(self, a):\n        self._done = True\n        return self._messages\n"
        "class F(E):\n    def f(self):\n        return self._done\n"
        "class Server:\n    def f(self, env):\n        self._done = 1\n        return env.unwrapped._messages\n"
    )
    tree = ast.parse(source)
    assert env_class_names([tree]) == {"AgentEnv", "E", "F"}
    assert private_uses(tree, "e.py", {"_done", "_messages"}, env_class_names([tree])) == [
        "e.py:3: assigns AgentEnv's private ._done",
        "e.py:4: uses AgentEnv's private ._messages",
        "e.py:7: uses AgentEnv's private ._done",
        "e.py:11: uses AgentEnv's private ._messages",
    ]


def test_no_env_module_touches_agent_env_privates():
    names = base_private_names()
    paths = sorted(ENVS_DIR.rglob("*.py"))
    trees = [ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in paths]
    envs = env_class_names(trees)
    assert {"ToolUseEnv", "RAGEnv", "TerminalEnv", "ConversationEnv"} <= envs
    uses = []
    for path, tree in zip(paths, trees, strict=True):
        uses += private_uses(tree, str(path.relative_to(ENVS_DIR.parent.parent)), names, envs)
    assert not uses, "envs must use AgentEnv's public hooks (see docs/writing_envs.md):\n" + "\n".join(uses)
