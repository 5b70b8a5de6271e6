"""Task dicts: the checks every env applies, copies handed to callers, and the oracle's tool calls.

A task is a dict with ``id`` (str or int), ``question`` (non-empty str), ``ground_truth``
(not None) and optionally ``solution`` (a list of turns, each a list of
``{"name", "arguments"}`` tool calls). Envs add their own keys and checks on top.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["checked_task_list", "choose_task", "copy_task", "validate_task"]


def validate_task(task: Any, where: str = "task") -> dict[str, Any]:
    """Check that a task has the keys every env needs and return it as a dict.

    A task needs ``id`` (str or int), ``question`` (non-empty str) and
    ``ground_truth`` (not None). An optional ``solution`` is a list of turns,
    each a list of ``{"name", "arguments"}`` tool calls.

    Args:
        task: The task to check.
        where: How to name the task in messages.

    Returns:
        The task as a (shallow-copied) dict.

    Raises:
        ValueError: Naming the missing or invalid key.
    """
    if not isinstance(task, Mapping):
        raise ValueError(f"{where}: expected a dict with keys 'id', 'question', 'ground_truth', "
                         f"got {type(task).__name__}")
    missing = [k for k in ("id", "question", "ground_truth") if k not in task]
    if missing:
        raise ValueError(f"{where}: expected keys 'id', 'question', 'ground_truth', missing {missing} "
                         f"(got keys {sorted(map(str, task))})")
    if isinstance(task["id"], bool) or not isinstance(task["id"], (str, int)):
        raise ValueError(f"{where}: expected 'id' to be str or int, got {type(task['id']).__name__}")
    if not isinstance(task["question"], str) or not task["question"].strip():
        raise ValueError(f"{where}: expected 'question' to be a non-empty str, got {task['question']!r:.60}")
    if task["ground_truth"] is None:
        raise ValueError(f"{where}: expected a 'ground_truth', got None")
    solution = task.get("solution")
    if solution is not None:
        ok = isinstance(solution, list) and all(
            isinstance(turn, list)
            and all(isinstance(c, Mapping) and isinstance(c.get("name"), str)
                    and isinstance(c.get("arguments", {}), Mapping) for c in turn)
            for turn in solution
        )
        if not ok:
            raise ValueError(f"{where}: expected 'solution' to be a list of turns, each a list of "
                             f"{{'name', 'arguments'}} tool calls, got {solution!r:.80}")
    return dict(task)


# (env class, id of a tuple of tasks) -> (that tuple, its validated tasks); see checked_task_list.
_VALIDATED_TASKS: dict[tuple[type, int], tuple[tuple, tuple[dict[str, Any], ...]]] = {}
_VALIDATED_LOCK = threading.Lock()


def checked_task_list(
    owner: type,
    source: Sequence[Mapping[str, Any]],
    validate: Callable[[list[Any]], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Validate ``source`` with ``validate``, reusing the result for a shared tuple.

    A tuple (an immutable container, e.g. an env's built-in tasks) is checked once per
    ``owner`` (the env class); every caller afterwards gets its own list of the same
    validated dicts. An env whose checks depend on its constructor arguments (not only
    on its class) must pass a list, which is always checked.

    Args:
        owner: The class whose checks ``validate`` applies (part of the cache key).
        source: The tasks to check.
        validate: Checks a list of tasks and returns them as dicts (raises ``ValueError``).

    Returns:
        A new list of validated task dicts.

    Raises:
        ValueError: For an empty ``source`` or a task ``validate`` rejects.
    """
    key = (owner, id(source))
    if type(source) is tuple:
        with _VALIDATED_LOCK:
            found = _VALIDATED_TASKS.get(key)
        if found is not None and found[0] is source:
            return list(found[1])
    raw = list(source)
    if not raw:
        raise ValueError(f"tasks: expected a non-empty list of task dicts, got {source!r}")
    tasks = validate(raw)
    if type(source) is tuple:
        with _VALIDATED_LOCK:
            if len(_VALIDATED_TASKS) >= 64:
                _VALIDATED_TASKS.clear()
            _VALIDATED_TASKS[key] = (source, tuple(tasks))
    return tasks


_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes})


def copy_task(value: Any) -> Any:
    """Deep copy of a task: dicts, lists and tuples rebuilt, scalars shared, anything else deep-copied."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        return {k: copy_task(v) for k, v in value.items()}
    if kind is list:
        return [copy_task(v) for v in value]
    if kind is tuple:
        return tuple([copy_task(v) for v in value])
    return copy.deepcopy(value)


def choose_task(
    tasks: Sequence[dict[str, Any]],
    options: Mapping[str, Any],
    rng: Any,
    validate_tasks: Callable[[list[Any]], list[dict[str, Any]]],
    owner: str = "env",
) -> dict[str, Any]:
    """The task of a new episode: ``options["task"]``, ``options["task_index"]`` or a seeded draw.

    Args:
        tasks: The env's validated tasks.
        options: The ``options`` of ``reset``.
        rng: A NumPy generator (the env's ``np_random``) for the draw.
        validate_tasks: The env's task checks (a task given as ``options["task"]`` goes through them).
        owner: The env's class name, for errors about ``validate_tasks`` itself.

    Raises:
        ValueError: For a task the checks reject or an index out of range, worded ``options[...]: ...``.
        TypeError: If ``validate_tasks`` does not return one task dict.
    """
    if options.get("task") is not None:
        try:
            checked = validate_tasks([options["task"]])
        except ValueError as exc:
            text = str(exc)
            text = text[len("tasks[0]: "):] if text.startswith("tasks[0]: ") else text
            raise ValueError(f'options["task"]: {text}') from None
        if len(checked) != 1 or not isinstance(checked[0], dict):
            raise TypeError(f"{owner}.validate_tasks: expected a list of one task dict back, got {checked!r:.80}")
        return checked[0]
    if options.get("task_index") is not None:
        index = options["task_index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tasks):
            raise ValueError(f'options["task_index"]: expected an int in [0, {len(tasks)}), got {index!r}')
        return tasks[index]
    return tasks[int(rng.integers(len(tasks)))]
