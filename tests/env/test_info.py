"""Every ``info`` key an env returns is declared in :mod:`agent_gym.env.info`."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, get_type_hints

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.env.info import INFO_KEYS, StepInfo
from agent_gym.envs import ENV_INFOS

PACKAGE_DIR = Path(agent_gym.__file__).resolve().parent
BAD_ACTIONS = (
    "<tool_call>{not json</tool_call>",  # malformed call
    "I am not sure what to do.",  # no tool call and no answer
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',  # unknown tool
)


def _keys(info: dict[str, Any]) -> set[str]:
    assert isinstance(info, dict)
    return set(info)


def _episode(env: gym.Env, actions: Any, seed: int) -> set[str]:
    """The keys of the infos of one episode: reset, then ``actions`` (a callable or a sequence) until it ends."""
    _, info = env.reset(seed=seed)
    seen = _keys(info)
    for step in range(20):
        action = actions() if callable(actions) else actions[step % len(actions)]
        _, _, terminated, truncated, info = env.step(action)
        seen |= _keys(info)
        if terminated or truncated:
            return seen
    raise AssertionError("the episode did not end within 20 steps")


@pytest.mark.parametrize("env_id", [info.id for info in ENV_INFOS])
def test_the_info_keys_of_every_registered_env_are_declared(env_id):
    env = gym.make(env_id, max_steps=4)
    try:
        oracle = _episode(env, env.unwrapped.oracle_action, seed=0)
        bad = _episode(env, BAD_ACTIONS, seed=1)
    finally:
        env.close()
    assert {"task", "tools", "episode_id", "toolcall_reward", "res_reward", "tool_calls", "status",
            "end_reason"} <= oracle
    assert {"error", "error_kinds"} <= bad
    assert (oracle | bad) - INFO_KEYS == set()


def _literal_keys(node: ast.AST) -> set[str]:
    """The string keys an ``info`` gets in ``node``: ``info["k"] = ...``, ``info.update(k=...)``,
    ``info.setdefault("k", ...)``, ``info = {"k": ...}`` and the dict ``episode_info`` returns
    (``self.info[...]`` of a helper counts too)."""
    keys: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store) and _is_info(sub.value):
            if isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str):
                keys.add(sub.slice.value)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
            if sub.func.value.id != "info":
                continue
            if sub.func.attr == "update":
                keys |= {k.arg for k in sub.keywords if k.arg}
                keys |= {k for a in sub.args if isinstance(a, ast.Dict) for k in _dict_keys(a)}
            elif sub.func.attr == "setdefault" and sub.args and isinstance(sub.args[0], ast.Constant):
                keys.add(str(sub.args[0].value))
        elif isinstance(sub, (ast.Assign, ast.AnnAssign)) and isinstance(sub.value, ast.Dict):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            if any(isinstance(t, ast.Name) and t.id == "info" for t in targets):
                keys |= _dict_keys(sub.value)
        elif isinstance(sub, ast.FunctionDef) and sub.name == "episode_info":
            keys |= {k for r in ast.walk(sub) if isinstance(r, ast.Return) and isinstance(r.value, ast.Dict)
                     for k in _dict_keys(r.value)}
    return keys


def _is_info(node: ast.expr) -> bool:
    """``info`` or ``<something>.info`` (a helper holding the step's info)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "info"
    return isinstance(node, ast.Name) and node.id == "info"


def _dict_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def test_the_info_keys_the_env_code_sets_are_declared():
    # What the registered envs' runs above may not reach (a simulated user's end, a subagent, a remote env).
    sources = [p for folder in ("env", "envs", "subagents") for p in sorted((PACKAGE_DIR / folder).rglob("*.py"))
               if "/tasks/" not in p.as_posix() and "/libraries/" not in p.as_posix()]
    found: dict[str, set[str]] = {}
    for path in sources:
        for key in _literal_keys(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault(key, set()).add(path.relative_to(PACKAGE_DIR).as_posix())
    expected = {"toolcall_reward", "error_kinds", "turn_score", "agent_segments", "solver_scores", "retrieved_ids"}
    assert expected <= set(found)
    assert {k: sorted(v) for k, v in found.items() if k not in INFO_KEYS} == {}


def test_every_declared_key_has_a_type_and_a_line_of_doc():
    hints = get_type_hints(StepInfo)
    assert set(hints) == INFO_KEYS and not StepInfo.__required_keys__
    tree = ast.parse((PACKAGE_DIR / "env" / "info.py").read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StepInfo").body
    documented = {a.target.id for a, d in zip(body, body[1:], strict=False) if isinstance(a, ast.AnnAssign)
                  and isinstance(a.target, ast.Name) and isinstance(d, ast.Expr) and isinstance(d.value, ast.Constant)}
    assert documented == INFO_KEYS
