"""Per-episode tools and resources: ``episode_tools``, ``release_episode``, ``set_episode_tools``."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agent_gym.env.core import AgentEnv
from agent_gym.parsers.hermes import format_tool_call

ENV_ID = "agent_gym_tests/Notebook-v0"

TASKS = [
    {"id": "plain", "question": "Write 'x', then answer with what you wrote.", "ground_truth": "x"},
    {"id": "extra", "question": "Erase your notes.", "ground_truth": "done", "erase_tool": True},
]


class Notebook:
    """State of one episode: the notes written so far, and whether it was released."""

    def __init__(self, episode: int) -> None:
        self.episode = episode
        self.notes: list[str] = []
        self.closed = False

    def write(self, text: str) -> str:
        """Add a note.

        Args:
            text: The note.
        """
        if self.closed:
            raise RuntimeError("notebook used after its episode was released")
        self.notes.append(text)
        return f"{len(self.notes)} note(s)"

    def read(self) -> str:
        """Read every note of this episode."""
        if self.closed:
            raise RuntimeError("notebook used after its episode was released")
        return "|".join(self.notes) or "(empty)"

    def erase(self) -> str:
        """Erase every note."""
        self.notes.clear()
        return "erased"

    def close(self) -> None:
        self.closed = True


class NotebookEnv(AgentEnv):
    """Each episode gets a fresh notebook; tasks with ``erase_tool`` get one more tool."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.episodes = 0
        self.released = 0
        self.notebook: Notebook | None = None

    def default_tasks(self) -> list[dict[str, Any]]:
        return TASKS

    def episode_tools(self, task: dict[str, Any]) -> list[Any]:
        assert self.notebook is None or self.notebook.closed, "previous episode not released before the next"
        self.episodes += 1
        self.notebook = Notebook(self.episodes)
        tools = [self.notebook.write, self.notebook.read]
        if task.get("erase_tool"):
            tools.append(self.notebook.erase)
        return tools

    def release_episode(self) -> None:
        self.released += 1
        if self.notebook is not None:
            self.notebook.close()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:NotebookEnv")


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


def names(schemas: list[dict[str, Any]]) -> list[str]:
    return [s["function"]["name"] for s in schemas]


def test_state_does_not_leak_between_episodes():
    env = NotebookEnv(max_steps=50)
    env.reset(seed=0, options={"task_index": 0})
    first = env.notebook
    obs, *_ = env.step(call("write", text="secret"))
    assert obs[-1]["content"] == "1 note(s)"
    obs, *_ = env.step(call("read"))
    assert obs[-1]["content"] == "secret"

    env.reset(options={"task_index": 0})
    assert first.closed and env.notebook is not first
    obs, _, _, _, info = env.step(call("read"))
    assert obs[-1]["content"] == "(empty)"
    assert info["tool_calls"][0]["ok"]
    assert first.notes == ["secret"]  # the old notebook was not reused either


def test_release_called_once_per_episode_on_reset_and_close():
    env = NotebookEnv()
    assert env.released == 0
    env.reset(seed=1)
    assert env.released == 0  # nothing to release before the first episode
    env.reset()
    env.reset()
    assert (env.episodes, env.released) == (3, 2)
    env.close()
    assert env.released == 3 and env.notebook.closed
    env.close()  # a second close releases nothing more
    assert env.released == 3
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("read"))


def test_release_called_when_episode_tools_raises():
    class Failing(NotebookEnv):
        def episode_tools(self, task):
            super().episode_tools(task)
            raise OSError("sandbox did not start")

    env = Failing()
    with pytest.raises(OSError, match="sandbox"):
        env.reset()
    assert env.released == 0
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("read"))
    env.close()
    assert env.released == 1 and env.notebook.closed


def test_schemas_differ_per_episode_and_reach_info():
    env = NotebookEnv()
    _, info = env.reset(seed=0, options={"task_index": 0})
    assert names(info["tools"]) == ["write", "read"]
    assert sorted(env.episode_tools_by_name) == ["read", "write"]
    assert info["tools"] == env.tool_schemas
    _, info = env.reset(options={"task_index": 1})
    assert names(info["tools"]) == ["write", "read", "erase"]
    obs, _, _, _, info = env.step(call("erase"))
    assert obs[-1]["content"] == "erased"
    _, info = env.reset(options={"task_index": 0})
    obs, _, _, _, info = env.step(call("erase"))
    assert not info["tool_calls"][0]["ok"]
    assert "unknown tool 'erase'; available tools: write, read" in info["error"]
    with pytest.raises(TypeError):
        env.episode_tools_by_name["erase"] = None  # read-only view


def test_tools_in_prompt_describes_the_episode_tools():
    env = NotebookEnv(tools_in_prompt=True)
    obs, info = env.reset(seed=0, options={"task_index": 1})
    assert info["tools"] == [] and info["tools_in_prompt"]
    assert "erase" in obs[0]["content"] and "write" in obs[0]["content"]
    obs, info = env.reset(options={"task_index": 0})
    assert "erase" not in obs[0]["content"] and "read" in obs[0]["content"]


def test_no_hook_keeps_constructor_tools_and_prompt():
    def ping() -> str:
        """Answer pong."""
        return "pong"

    env = AgentEnv(TASKS, [ping], tools_in_prompt=True)
    obs, info = env.reset(seed=0)
    assert obs[0]["content"] == env.system_prompt and "ping" in env.system_prompt
    assert env.episode_tools_by_name["ping"] is env.tools["ping"]


def test_episode_tools_are_converted_with_the_env_limits():
    class Duplicate(NotebookEnv):
        def episode_tools(self, task):
            tools = super().episode_tools(task)
            return tools + [tools[0]]

    class Huge(NotebookEnv):
        def episode_tools(self, task):
            super().episode_tools(task)
            return [self.notebook.write, self.notebook.read]

    with pytest.raises(ValueError, match="episode_tools\\(\\): expected unique tool names, got 'write' twice"):
        Duplicate().reset()
    env = Huge(max_tool_output_chars=5)
    env.reset(seed=0)
    env.step(call("write", text="a long note"))
    _, _, _, _, info = env.step(call("read"))
    assert not info["tool_calls"][0]["ok"] and "over the limit of 5" in info["tool_calls"][0]["error"]


class Unlocking(NotebookEnv):
    """Writing the note 'unlock' adds the erase tool for the rest of the episode."""

    def is_useful_call(self, name, arguments):
        if name == "write" and arguments.get("text") == "unlock":
            assert self.notebook is not None
            self.set_episode_tools([self.notebook.write, self.notebook.read, self.notebook.erase])
        return super().is_useful_call(name, arguments)


def test_set_episode_tools_during_a_step():
    env = Unlocking()
    env.reset(seed=0, options={"task_index": 0})
    _, _, _, _, info = env.step(call("write", text="hello"))
    assert "tools" not in info
    _, _, _, _, info = env.step(call("write", text="unlock"))
    assert names(info["tools"]) == ["write", "read", "erase"]
    assert info["tools"] == env.tool_schemas
    obs, _, _, _, info = env.step(call("erase"))
    assert obs[-1]["content"] == "erased" and "tools" not in info
    _, info = env.reset(options={"task_index": 0})
    assert names(info["tools"]) == ["write", "read"]  # the next episode starts from episode_tools again


def test_set_episode_tools_in_a_step_override_and_with_tools_in_prompt():
    class Override(NotebookEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            if self.step_count == 1:
                self.set_episode_tools([self.notebook.read])
                self.attach_tools_info(info)
            return obs, reward, terminated, truncated, info

    env = Override()
    env.reset(seed=0)
    info = env.step(call("read"))[-1]
    assert names(info["tools"]) == ["read"]
    info = env.step(call("read"))[-1]
    assert "tools" not in info

    env = Unlocking(tools_in_prompt=True)
    env.reset(seed=0, options={"task_index": 0})
    info = env.step(call("write", text="unlock"))[-1]
    assert info["tools"] == []  # same rule as reset: the policy passes no schemas
    assert sorted(env.episode_tools_by_name) == ["erase", "read", "write"]


def test_set_episode_tools_needs_an_episode():
    env = NotebookEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.set_episode_tools([])


def test_env_pickles_between_episodes():
    env = NotebookEnv()
    env.reset(seed=0)
    env.step(call("write", text="kept"))
    copy = pickle.loads(pickle.dumps(env))
    obs, *_ = copy.step(call("read"))
    assert obs[-1]["content"] == "kept"
    obs, *_ = env.step(call("read"))
    assert obs[-1]["content"] == "kept"


# "fork" (the default start method on Linux): the workers inherit this process's state, including the tool
# worker pool that the earlier tests (and the sync case) used; their time-limited tool calls must still work.
@pytest.mark.parametrize(
    ("mode", "kwargs"),
    [("sync", {}), ("async", {"vector_kwargs": {"shared_memory": False, "context": "fork"}})],
)
def test_no_leak_between_envs_of_make_vec(mode, kwargs):
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode=mode, **kwargs)
    try:
        envs.reset(seed=[0, 1], options={"task_index": 0})
        obs, *_ = envs.step((call("write", text="from env 0"), call("read")))
        assert obs[0][-1]["content"] == "1 note(s)"
        assert obs[1][-1]["content"] == "(empty)"
        obs, *_ = envs.step((call("read"), call("read")))
        assert [o[-1]["content"] for o in obs] == ["from env 0", "(empty)"]
        envs.reset(seed=[2, 3], options={"task_index": 0})
        obs, *_ = envs.step((call("read"), call("read")))
        assert [o[-1]["content"] for o in obs] == ["(empty)", "(empty)"]
        assert tuple(envs.get_attr("released")) == (1, 1)
        assert tuple(envs.get_attr("episodes")) == (2, 2)
    finally:
        envs.close()
    if mode == "sync":  # the sync env's instances are still reachable: close released them
        assert [e.unwrapped.released for e in envs.envs] == [2, 2]


def test_writing_envs_page_runs(capsys):
    """The code blocks of docs/writing_envs.md, run in order, do what the page says."""
    page = Path(__file__).resolve().parents[2] / "docs" / "writing_envs.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 4
    namespace: dict[str, Any] = {"__name__": "writing_envs_example"}
    try:
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 - the page's own example
        printed = capsys.readouterr().out.splitlines()
        assert printed == [
            "['sql']",
            "{'role': 'tool', 'content': '5'}",
            "True report 1.0",
            "options[\"task\"]: expected 'rows', a list of [customer, item, quantity], got None",
        ]
        env = namespace["OrdersEnv"]()
        env.reset(seed=0, options={"task_index": 1})
        first = env.database
        env.reset(seed=0, options={"task_index": 1})
        assert first is not env.database and first.connection is not env.database.connection
        with pytest.raises(Exception, match="closed"):
            first.connection.execute("SELECT 1")  # released by the second reset
        env.close()
        assert env.database is None
    finally:
        gym.registry.pop("my_envs/Orders-v0", None)
