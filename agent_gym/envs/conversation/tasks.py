"""Conversation tasks: the format, its checks, the loaders and the shipped task file.

A task (JSON schema: ``task_schema.json`` beside this module)::

    {"id": "fs-0001",
     "classes": ["FileSystem"],                       # stateful tool classes (names or import paths)
     "initial_state": {"FileSystem": {"root": {...}}},# per class, the config its instance loads
     "excluded": ["find"],                            # methods hidden for the whole conversation
     "turns": ["Go to docs.", {"content": "Now find the notes.", "new_tools": ["find"]},
               {"content": "Delete my draft.",       # a turn whose right move is to ask (or refuse)
                "expect": {"kind": "clarify", "slot": "which draft to delete", "terms": ["draft", "which one"]}}],
     "solution": [[{"name": "cd", "arguments": {"folder": "docs"}}], [...], []],    # per turn
     "expected_outputs": [[], ["notes.txt"], []],     # optional, per turn: strings the replies contain
     "user": {"persona": "...", "goal": "..."}}       # optional, for a simulated user

A method named in a turn's ``new_tools`` is hidden before that turn. A turn's ``expect``
(see :mod:`~agent_gym.envs.conversation.expectations`) says that its reply must ask the user
for a missing detail (``clarify``) or refuse (``refuse``) while the state stays unchanged; a
turn without it is graded on the state and ``expected_outputs`` only. ``solution`` is the
oracle's data, as in every env (here one list of calls per user turn); files written for
earlier versions name it ``reference``, which is still read. :func:`check_task` rejects a
task whose class is unknown, whose ``initial_state`` does not load, or whose ``solution``
calls a method that the turn does not offer, naming the task and field.
:func:`load_call_string_tasks` reads tasks whose solution calls are Python call strings
(``"cd(folder='docs')"``, one list per turn), parsed with :mod:`ast`, never evaluated.
"""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agent_gym.envs.conversation.expectations import check_expectation
from agent_gym.envs.conversation.state import load_instance, method_names, resolve_class

__all__ = [
    "builtin_tasks",
    "check_task",
    "load_call_string_tasks",
    "load_tasks",
    "parse_call_string",
    "visible_methods",
]

_TASK_KEYS = frozenset({"id", "classes", "initial_state", "excluded", "turns", "solution", "reference",
                        "expected_outputs", "user", "question", "ground_truth"})
_TURN_KEYS = frozenset({"content", "new_tools", "expect"})
_OLD_SOLUTION_KEY = "reference"
"""What task files of earlier versions call ``solution`` (read on input, never written)."""


def _fail(where: str, field: str, message: str) -> ValueError:
    return ValueError(f"{where}: field {field!r}: {message}")


def _str_list(value: Any, where: str, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, field, f"expected a list of str, got {value!r:.80}")
    return list(value)


def visible_methods(task: Mapping[str, Any], turn: int, methods: Sequence[str]) -> list[str]:
    """Names of ``methods`` offered at user turn ``turn`` (0-based) of a checked task."""
    turns = task["turns"]
    later = {n for t in turns[turn + 1:] for n in t["new_tools"]}
    arrived = {n for t in turns[: turn + 1] for n in t["new_tools"]}
    hidden = (set(task["excluded"]) - arrived) | later
    return [m for m in methods if m not in hidden]


def check_task(task: Any, where: str, classes: Mapping[str, type]) -> dict[str, Any]:
    """Check one task and return it normalised (a new dict; the input is not modified).

    Normalised: ``turns`` become ``{"content", "new_tools", "expect"}`` dicts (``expect`` checked
    by :func:`~agent_gym.envs.conversation.expectations.check_expectation`, or None), ``initial_state``,
    ``excluded`` and ``expected_outputs`` are filled in, ``question`` is the first user
    message and ``ground_truth`` the solution. A task that names its solution ``reference``
    (the key of earlier versions) is read as if it said ``solution``. Each class is loaded
    once with its ``initial_state`` to prove the config is valid.

    Args:
        task: The task dict.
        where: How to name the task in errors (e.g. ``"tasks[3]"``).
        classes: Class names known without an import path.

    Raises:
        ValueError: Naming the task (and its id) and the field.
    """
    if not isinstance(task, Mapping):
        raise ValueError(f"{where}: expected a task dict, got {type(task).__name__}")
    tid = task.get("id")
    if isinstance(tid, bool) or not isinstance(tid, (str, int)):
        raise _fail(where, "id", f"expected a str or int, got {tid!r}")
    where = f"{where} (id {tid!r})"
    if _OLD_SOLUTION_KEY in task:
        if "solution" in task:
            raise _fail(where, "solution", f"expected one of 'solution' and {_OLD_SOLUTION_KEY!r} (its old name), "
                        "got both")
        task = {("solution" if k == _OLD_SOLUTION_KEY else k): v for k, v in task.items()}
    for key in ("classes", "turns", "solution"):
        if key not in task:
            raise _fail(where, key, "missing")
    names = _str_list(task["classes"], where, "classes")
    if not names or len(set(names)) != len(names):
        raise _fail(where, "classes", f"expected a non-empty list of distinct class names, got {names}")
    resolved: dict[str, type] = {}
    owner: dict[str, str] = {}
    for name in names:
        try:
            resolved[name] = resolve_class(name, classes)
        except ValueError as exc:
            raise _fail(where, "classes", str(exc)) from None
        for method in method_names(resolved[name]):
            if method in owner:
                raise _fail(where, "classes", f"method {method!r} is defined by both {owner[method]} and {name}")
            owner[method] = name
    state = task.get("initial_state", {})
    if not isinstance(state, Mapping) or not all(isinstance(v, Mapping) for v in state.values()):
        raise _fail(where, "initial_state", f"expected a dict of class name -> config dict, got {state!r:.80}")
    extra = sorted(set(state) - set(names))
    if extra:
        raise _fail(where, "initial_state", f"expected keys among the task's classes {names}, got {extra}")
    for name, cls in resolved.items():
        try:
            load_instance(cls, state.get(name, {}))
        except Exception as exc:  # noqa: BLE001 - any failure of a user class is a bad config
            raise _fail(where, f"initial_state.{name}", f"{name} could not load it: "
                        f"{type(exc).__name__}: {exc}") from None
    excluded = _str_list(task.get("excluded", []), where, "excluded")
    unknown = sorted(set(excluded) - set(owner))
    if unknown:
        raise _fail(where, "excluded", f"expected methods of {names}, got unknown {unknown}")
    raw_turns = task["turns"]
    if not isinstance(raw_turns, list) or not raw_turns:
        raise _fail(where, "turns", f"expected a non-empty list of user messages, got {raw_turns!r:.80}")
    turns: list[dict[str, Any]] = []
    for i, turn in enumerate(raw_turns):
        if isinstance(turn, str):
            turn = {"content": turn}
        if not isinstance(turn, Mapping) or not isinstance(turn.get("content"), str) or not turn["content"].strip():
            raise _fail(where, f"turns[{i}]", f"expected a non-empty str or {{'content', 'new_tools', 'expect'}}, "
                        f"got {turn!r:.80}")
        new_tools = _str_list(turn.get("new_tools", []), where, f"turns[{i}].new_tools")
        bad = sorted(set(new_tools) - set(owner))
        if bad:
            raise _fail(where, f"turns[{i}].new_tools", f"expected methods of {names}, got unknown {bad}")
        unknown_keys = sorted(set(turn) - _TURN_KEYS)
        if unknown_keys:
            raise _fail(where, f"turns[{i}]", f"expected keys among {sorted(_TURN_KEYS)}, got unknown {unknown_keys}")
        expect = None
        if turn.get("expect") is not None:
            try:
                expect = check_expectation(turn["expect"])
            except ValueError as exc:
                raise _fail(where, f"turns[{i}].expect", str(exc)) from None
        turns.append({"content": turn["content"], "new_tools": new_tools, "expect": expect})
    all_new = [n for t in turns for n in t["new_tools"]]
    if len(set(all_new)) != len(all_new):
        raise _fail(where, "turns", "a method appears in 'new_tools' of more than one turn")
    out = {k: v for k, v in task.items() if k not in _TASK_KEYS}
    out.update(id=tid, classes=names, initial_state={n: state.get(n, {}) for n in names}, excluded=excluded,
               turns=turns)
    solution = task["solution"]
    if not isinstance(solution, list) or len(solution) != len(turns):
        raise _fail(where, "solution", f"expected one list of calls per turn ({len(turns)}), got {solution!r:.80}")
    checked_solution: list[list[dict[str, Any]]] = []
    for i, calls in enumerate(solution):
        offered = set(visible_methods(out, i, list(owner)))
        if not isinstance(calls, list):
            raise _fail(where, f"solution[{i}]", f"expected a list of calls, got {calls!r:.80}")
        checked_calls = []
        for j, call in enumerate(calls):
            if isinstance(call, str):
                call = parse_call_string(call, f"{where}: field 'solution[{i}][{j}]'")
            if (not isinstance(call, Mapping) or not isinstance(call.get("name"), str)
                    or not isinstance(call.get("arguments", {}), Mapping)):
                raise _fail(where, f"solution[{i}][{j}]", f"expected {{'name', 'arguments'}}, got {call!r:.80}")
            if call["name"] not in owner:
                raise _fail(where, f"solution[{i}][{j}]", f"no method {call['name']!r} in {names}")
            if call["name"] not in offered:
                raise _fail(where, f"solution[{i}][{j}]", f"method {call['name']!r} is not offered at turn {i}")
            checked_calls.append({"name": call["name"], "arguments": dict(call.get("arguments", {}))})
        checked_solution.append(checked_calls)
    expected = task.get("expected_outputs")
    if expected is None:
        expected = [[] for _ in turns]
    if not isinstance(expected, list) or len(expected) != len(turns):
        raise _fail(where, "expected_outputs", f"expected one list of str per turn ({len(turns)}), "
                    f"got {expected!r:.80}")
    expected = [_str_list(e, where, f"expected_outputs[{i}]") for i, e in enumerate(expected)]
    user = task.get("user")
    if user is not None and (not isinstance(user, Mapping) or not all(isinstance(v, str) for v in user.values())):
        raise _fail(where, "user", f"expected a dict of str (e.g. 'persona', 'goal'), got {user!r:.80}")
    out.update(solution=checked_solution, expected_outputs=expected, question=turns[0]["content"],
               ground_truth=checked_solution)
    if user is not None:
        out["user"] = dict(user)
    return out


# ---------------------------------------------------------------------------- loaders


def _read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL file (one JSON object a line) or a JSON file holding a list."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of tasks, got {type(data).__name__}")
        return data
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: expected a JSON object, got invalid JSON ({exc})") from None
    return records


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Read tasks from a JSONL (or JSON list) file; the env checks them when given as ``tasks``."""
    return _read_records(path)


def parse_call_string(text: str, where: str = "call") -> dict[str, Any]:
    """Parse ``"name(key=value, ...)"`` into ``{"name", "arguments"}`` with :mod:`ast` (never evaluated).

    Values must be Python literals (strings, numbers, booleans, None, lists, dicts, tuples).
    ``"Class.method(...)"`` keeps the method name.

    Raises:
        ValueError: For anything but one call with keyword literal arguments.
    """
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected a call string, got {type(text).__name__}")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"{where}: expected a Python call like \"cd(folder='docs')\", got {text!r} ({exc.msg})") \
            from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
        raise ValueError(f"{where}: expected a call like \"cd(folder='docs')\", got {text!r}")
    if node.args:
        raise ValueError(f"{where}: expected keyword arguments only, got a positional argument in {text!r}")
    name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"{where}: expected keyword arguments, got ** in {text!r}")
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise ValueError(f"{where}: argument {keyword.arg!r} is not a literal in {text!r}") from None
        arguments[keyword.arg] = list(value) if isinstance(value, tuple) else value
    return {"name": name, "arguments": arguments}


def _turn_text(turn: Any) -> Any:
    """A leaderboard turn (a list of messages) as its user text; other values unchanged."""
    if isinstance(turn, list):
        return "\n".join(str(m.get("content", "")) for m in turn if isinstance(m, Mapping) and m.get("role") == "user")
    return turn


def load_call_string_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Read tasks whose solution calls are Python call strings, as function-calling leaderboards publish them.

    Each record may use this package's keys (``turns``, ``classes``, ``initial_state``,
    ``solution`` or its old name ``reference``, ``excluded``) or the leaderboard's: ``question`` (one list of messages
    per turn), ``involved_classes``, ``initial_config``, ``ground_truth`` (one list of call
    strings per turn), ``excluded_function``, ``missed_function`` (``{"turn": [names]}``:
    methods that become available at that turn). A turn with no user text (a turn that
    only brings a missed function) gets a message saying the tools were added.

    Raises:
        ValueError: Naming the record and field of a call string that does not parse.
    """
    tasks = []
    for index, record in enumerate(_read_records(path)):
        where = f"{Path(path).name}[{index}] (id {record.get('id')!r})"
        turns = [_turn_text(t) for t in record.get("turns", record.get("question", []))]
        missed = record.get("missed_function") or {}
        for key, names in missed.items():
            k = int(key)
            if 0 <= k < len(turns):
                content = turns[k] if isinstance(turns[k], str) and turns[k].strip() else \
                    "You now have more tools: " + ", ".join(names) + ". Please continue."
                turns[k] = {"content": content, "new_tools": list(names)}
        solution = record.get("solution", record.get(_OLD_SOLUTION_KEY, record.get("ground_truth")))
        if isinstance(solution, list):
            solution = [
                [parse_call_string(c, f"{where}: field 'solution[{i}][{j}]'") if isinstance(c, str) else c
                 for j, c in enumerate(calls)] if isinstance(calls, list) else calls
                for i, calls in enumerate(solution)
            ]
        task = {k: v for k, v in record.items()
                if k not in ("question", "ground_truth", "involved_classes", "initial_config", "excluded_function",
                             "missed_function", "turns", "solution", _OLD_SOLUTION_KEY)}
        task.update(turns=turns, solution=solution,
                    classes=record.get("classes", record.get("involved_classes")),
                    initial_state=record.get("initial_state", record.get("initial_config", {})),
                    excluded=record.get("excluded", record.get("excluded_function", [])))
        tasks.append(task)
    return tasks


_BUILTIN: tuple[dict[str, Any], ...] | None = None
_BUILTIN_LOCK = threading.Lock()


def builtin_tasks() -> tuple[dict[str, Any], ...]:
    """The shipped tasks (``data/tasks.jsonl``), read once per process; do not modify them."""
    global _BUILTIN
    with _BUILTIN_LOCK:
        if _BUILTIN is None:
            source = resources.files("agent_gym.envs.conversation").joinpath("data/tasks.jsonl")
            with resources.as_file(source) as path:
                _BUILTIN = tuple(_read_records(path))
        return _BUILTIN
