"""Conversation tasks: load-time checks, call-string loader, stateful classes that misbehave."""

from __future__ import annotations

import json
import time

import pytest

from agent_gym.envs.conversation import ConversationEnv, builtin_tasks, load_call_string_tasks, state_diff
from agent_gym.envs.conversation.generate import main as generate_main
from agent_gym.envs.conversation.tasks import parse_call_string


class Counter:
    """A stateful class loaded through its constructor (no _load_scenario)."""

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.log: list[str] = []
        self._calls = 0

    def add(self, amount: int) -> int:
        """Add to the counter.

        Args:
            amount: How much.
        """
        self.value += amount
        return self.value

    def explode(self) -> str:
        """Raise an error."""
        raise RuntimeError("boom")

    def hang(self) -> str:
        """Sleep too long."""
        time.sleep(1.0)
        return "late"

    def odd(self) -> object:
        """Return something that is not JSON."""
        return {1, 2}

    def mutate(self, items: list[str]) -> int:
        """Keep the items and change the list given.

        Args:
            items: Some names.
        """
        self.log.extend(items)
        items.append("MUTATED")
        return len(items)


def _counter_task(**changes):
    task = {"id": "c-1", "classes": ["Counter"], "initial_state": {"Counter": {"value": 2}},
            "turns": ["Add three.", "Log a and b."],
            "solution": [[{"name": "add", "arguments": {"amount": 3}}],
                          [{"name": "mutate", "arguments": {"items": ["a", "b"]}}]]}
    task.update(changes)
    return task


def _call(method: str, /, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": method, "arguments": arguments}) + "</tool_call>"


def test_misbehaving_methods_give_error_observations():
    task = _counter_task()
    env = ConversationEnv(tasks=[task], classes={"Counter": Counter}, tool_time_limit=0.2)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(_call("explode") + _call("hang") + _call("odd") + _call("add", amount="x"))
    errors = [c["error"] for c in info["tool_calls"]]
    assert "raised RuntimeError: boom" in errors[0]
    assert "time limit" in errors[1]
    assert "not JSON-serialisable" in errors[2]
    assert "invalid arguments" in errors[3]
    assert [m["content"].startswith("Error:") for m in obs[-4:]] == [True] * 4
    env.step(_call("add", amount=3))
    env.step("ok")
    _, _, _, _, info = env.step(env.oracle_action())  # mutate(items=["a", "b"])
    assert info["tool_calls"][0]["arguments"] == {"items": ["a", "b"]} and info["tool_calls"][0]["output"] == "3"
    _, _, terminated, _, info = env.step("logged")
    assert terminated and info["success"], info
    assert task["solution"][1][0]["arguments"] == {"items": ["a", "b"]}  # the task is untouched
    assert env.states()["Counter"] == {"value": 5, "log": ["a", "b"]}  # private attributes are not state


@pytest.mark.parametrize(("changes", "field"), [
    ({"classes": ["Nope"]}, "classes"),
    ({"solution": [[{"name": "missing", "arguments": {}}], []]}, "solution[0][0]"),
    ({"initial_state": {"Counter": {"valu": 1}}}, "initial_state.Counter"),
    ({"initial_state": {"Other": {}}}, "initial_state"),
    ({"solution": [[]]}, "solution"),
    ({"turns": ["one", {"content": "two", "new_tools": ["ghost"]}]}, "turns[1].new_tools"),
    ({"excluded": ["add"]}, "solution[0][0]"),
    ({"expected_outputs": [["x"]]}, "expected_outputs"),
])
def test_bad_tasks_are_rejected_at_load_naming_task_and_field(changes, field):
    with pytest.raises(ValueError) as caught:
        ConversationEnv(tasks=[_counter_task(**changes)], classes={"Counter": Counter})
    assert "tasks[0] (id 'c-1')" in str(caught.value) and f"field {field!r}" in str(caught.value)


def test_the_old_name_of_the_solution_is_still_read():
    task = _counter_task()
    old = {("reference" if k == "solution" else k): v for k, v in task.items()}
    env = ConversationEnv(tasks=[old], classes={"Counter": Counter})
    assert env.tasks[0]["solution"] == ConversationEnv(tasks=[task], classes={"Counter": Counter}).tasks[0]["solution"]
    assert "reference" not in env.tasks[0]
    with pytest.raises(ValueError, match=r"field 'solution': expected one of 'solution' and 'reference'"):
        ConversationEnv(tasks=[{**task, "reference": task["solution"]}], classes={"Counter": Counter})


def test_bad_initial_state_of_a_builtin_class_and_option_task():
    task = dict(builtin_tasks()[0])
    task["initial_state"] = {"FileSystem": {"root": {"a": 3}}}
    with pytest.raises(ValueError, match=r"field 'initial_state.FileSystem'.*expected a dict \(directory\)"):
        ConversationEnv(tasks=[task])
    env = ConversationEnv()
    with pytest.raises(ValueError, match=r'options\["task"\]'):
        env.reset(options={"task": task})


def test_classes_resolve_from_import_paths():
    task = _counter_task(classes=["agent_gym.envs.conversation.domains.orders:OrderService"], initial_state={},
                         turns=["List."], solution=[[{"name": "list_products", "arguments": {}}]])
    env = ConversationEnv(tasks=[task])
    _, info = env.reset(seed=0)
    assert "place_order" in [s["function"]["name"] for s in info["tools"]]


def test_parse_call_string_uses_literals_only():
    assert parse_call_string("cd(folder='docs')") == {"name": "cd", "arguments": {"folder": "docs"}}
    assert parse_call_string("FileSystem.write(file_name='a', content='x', append=True)")["arguments"]["append"]
    assert parse_call_string("f(xs=(1, 2), d={'a': None})")["arguments"] == {"xs": [1, 2], "d": {"a": None}}
    for bad in ("cd('docs')", "cd(folder=__import__('os').getcwd())", "cd(**x)", "x = 1", "cd(folder=", "3"):
        with pytest.raises(ValueError):
            parse_call_string(bad)


def test_call_string_loader_reads_leaderboard_records(tmp_path):
    shipped = [t for t in builtin_tasks() if t["id"] in ("fs-0003", "orders-0005", "calendar-0003")]
    path = tmp_path / "calls.jsonl"
    with path.open("w") as f:
        for t in shipped:
            record = {
                "id": t["id"],
                "question": [[{"role": "user", "content": turn if isinstance(turn, str) else turn["content"]}]
                             for turn in t["turns"]],
                "involved_classes": t["classes"],
                "initial_config": t["initial_state"],
                "excluded_function": [n for n in t["excluded"]],
                "missed_function": {str(k): turn["new_tools"] for k, turn in enumerate(t["turns"])
                                    if isinstance(turn, dict) and turn.get("new_tools")},
                "ground_truth": [[f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['arguments'].items())})"
                                  for c in calls] for calls in t["solution"]],
            }
            f.write(json.dumps(record) + "\n")
    loaded = load_call_string_tasks(path)
    env_a = ConversationEnv(tasks=loaded)
    env_b = ConversationEnv(tasks=shipped)
    for a, b in zip(env_a.tasks, env_b.tasks, strict=True):
        # leaderboard records have no expectations: their turns are graded on the state only
        assert all(turn["expect"] is None for turn in a["turns"])
        assert [{**turn, "expect": None} for turn in b["turns"]] == a["turns"]
        assert (a["solution"], a["excluded"], a["initial_state"]) == \
               (b["solution"], b["excluded"], b["initial_state"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "turns": ["a"], "classes": ["FileSystem"],
                               "ground_truth": [["cd(folder=open('f'))"]]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl\[0\] \(id 'x'\): field 'solution\[0\]\[0\]'"):
        load_call_string_tasks(bad)


def test_state_diff_is_readable_and_bounded():
    lines = state_diff({"a": {"x": 1, "y": [1, 2]}, "b": 1}, {"a": {"x": 2, "y": [1, 3], "z": 0}}, "S")
    assert lines == ["S.a['x']: expected 1, got 2", "S.a['y'][1]: expected 2, got 3",
                     "S.a['z']: expected missing, got 0", "S.b: expected 1, got missing"]
    many = state_diff({"a": {str(i): i for i in range(50)}}, {"a": {}}, "S", limit=5)
    assert len(many) == 6 and many[-1] == "... and more differences"


def test_shipped_file_matches_the_generator():
    assert generate_main(["--check"]) == 0


def test_task_schema_is_valid_json_and_names_the_fields():
    from importlib import resources

    schema = json.loads(resources.files("agent_gym.envs.conversation").joinpath("task_schema.json").read_text())
    assert set(schema["required"]) == {"id", "classes", "turns", "solution"}
    assert {"initial_state", "excluded", "expected_outputs", "user"} <= set(schema["properties"])
