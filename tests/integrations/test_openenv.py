"""OpenEnv both ways: ``agent-gym serve-env`` driven by OpenEnv's own client, and OpenEnv envs under ``collect``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

openenv = pytest.importorskip("openenv", reason="openenv-core is not installed (pip install 'agent-gym[openenv]')")

from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from agent_gym import collect  # noqa: E402
from agent_gym.envs.openenv import OpenEnvEnv  # noqa: E402
from agent_gym.errors import ConfigError, EnvServerError  # noqa: E402
from agent_gym.integrations.openenv import create_openenv_app  # noqa: E402
from agent_gym.types import EpisodeStatus  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeEnv:
    """``agent-gym serve-env ID`` in a subprocess."""

    def __init__(self, env_id: str, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "agent_gym", "serve-env", env_id, "--port", str(self.port), *extra]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"serve-env did not start: {log.read_text()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def tool_use_server(tmp_path_factory):
    server = ServeEnv("agent_gym/ToolUse-v0", tmp_path_factory.mktemp("serve-env") / "log.txt",
                      "--max-sessions", "32")
    yield server
    server.kill()


def oracle_turns(task: dict[str, Any]) -> list[str]:
    """The task's solution as assistant messages, then its answer."""
    turns = ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls) for calls in task["solution"]]
    return [*turns, f"<answer>{task['ground_truth']}</answer>"]


def test_served_env_with_openenv_client_16_concurrent_sessions(tool_use_server):
    schema = httpx.get(f"{tool_use_server.url}/schema").json()
    assert schema["action"]["required"] == ["message"] and "messages" in schema["observation"]["properties"]

    def episode(seed: int) -> dict[str, Any]:
        with GenericEnvClient(base_url=tool_use_server.url).sync() as client:
            first = client.reset(seed=seed)
            task = first.observation["info"]["task"]
            question = first.observation["messages"][1]["content"]
            rewards, lengths = [], []
            for turn in oracle_turns(task):
                result = client.step({"message": turn})
                rewards.append(result.reward)
                lengths.append(len(result.observation["messages"]))
                state = client.state()
                assert state["task"]["id"] == task["id"] and state["step_count"] == len(rewards)
            return {"task": task, "question": question, "rewards": rewards, "lengths": lengths, "done": result.done,
                    "terminated": result.observation["terminated"]}

    with ThreadPoolExecutor(16) as pool:
        episodes = list(pool.map(episode, range(16)))
    # Sixteen sessions, each with its own env: its own task, its own conversation.
    assert len({e["task"]["id"] for e in episodes}) > 8
    for e in episodes:
        assert e["task"]["question"] == e["question"]
        grows = [1 + len(calls) for calls in e["task"]["solution"]] + [1]  # the message and its tool results
        assert e["lengths"] == [2 + sum(grows[: i + 1]) for i in range(len(grows))]
        assert e["done"] and e["terminated"] and e["rewards"][-1] >= 1.0


def test_serve_env_validates_its_arguments(capsys):
    from agent_gym.cli import main

    with pytest.raises(ConfigError, match="registered env id"):
        create_openenv_app("agent_gym/Nope-v0")
    with pytest.raises(ConfigError, match="max_sessions"):
        create_openenv_app("agent_gym/ToolUse-v0", max_sessions=0)
    assert main(["serve-env", "agent_gym/ToolUse-v0", "--env-kwargs", "[1]"]) == 2
    assert "expected a JSON object" in capsys.readouterr().err
    assert main(["serve-env", "agent_gym/ToolUse-v0", "--env-kwargs", '{"nope": 1}']) == 2


# --------------------------------------------------------------------------- an OpenEnv env of its own
class CountAction(Action):
    """Say a number."""

    text: str


class CountObservation(Observation):
    """What the counter says."""

    prompt: str = ""


class CountEnvironment(Environment):
    """Count to a target one number per step: reward 1 on reaching it, -1 on a wrong number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.target, self.current = 3, 0
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CountObservation:
        self.target, self.current = 2 + (seed or 0) % 3, 0
        self._state = State(episode_id=episode_id, step_count=0)
        return CountObservation(prompt=f"Count from 1 to {self.target}, one number per message.")

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> CountObservation:
        self._state.step_count += 1
        if action.text.strip() != str(self.current + 1):
            return CountObservation(prompt="wrong", done=True, reward=-1.0)
        self.current += 1
        done = self.current == self.target
        return CountObservation(prompt="done" if done else f"next after {self.current}", done=done,
                                reward=1.0 if done else 0.0)

    @property
    def state(self) -> State:
        return self._state


class Counter:
    """A string policy that counts from the conversation it sees."""

    def act(self, messages, *, session_id, tools=None):
        return str(sum(1 for m in messages if m["role"] == "assistant") + 1)


@pytest.fixture(scope="module")
def count_server():
    import uvicorn

    app = create_fastapi_app(CountEnvironment, CountAction, CountObservation, max_concurrent_envs=16)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)


def test_an_openenv_env_runs_under_collect(count_server):
    def make() -> OpenEnvEnv:
        return OpenEnvEnv(count_server, action_field="text", observation_field="prompt", max_steps=8,
                          system_prompt="Count.")

    trajectories = collect(make, Counter(), num_episodes=6, n_parallel=4, seed=0)
    assert [t.status for t in trajectories] == [EpisodeStatus.ENV_DONE] * 6
    for t in trajectories:
        target = len(t.steps)
        assert 2 <= target <= 4 and t.trajectory_reward == 1.0
        assert t.steps[0].chat_completions[:2] == [{"role": "system", "content": "Count."},
                                                   {"role": "user", "content": f"Count from 1 to {target}, "
                                                                               "one number per message."}]
        assert [s.model_response for s in t.steps] == [str(i) for i in range(1, target + 1)]
    assert {len(t.steps) for t in trajectories} == {2, 3, 4}  # the seeds reached the remote resets


def test_served_agent_gym_env_under_collect_and_a_killed_server(tool_use_server):
    """Runs last: it kills the module's server (starting one costs tens of seconds on a loaded machine)."""
    server = tool_use_server

    class Oracle:
        """Plays each task's solution; kills the server at the second turn of the last episode."""

        def __init__(self) -> None:
            self.kill_armed = False

        def act(self, messages, *, session_id, tools=None):
            task = next(t for t in tasks if t["question"] == messages[1]["content"])
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if self.kill_armed and turn == 1:
                server.kill()
            return oracle_turns(task)[turn]

    from agent_gym.envs.tool_use.tasks import builtin_tasks

    tasks = [dict(t) for t in builtin_tasks()[:3]]
    policy = Oracle()
    done = collect(lambda: OpenEnvEnv(server.url), policy, tasks=tasks, n_parallel=3)
    assert [t.status for t in done] == [EpisodeStatus.ENV_DONE] * 3
    assert [t.task["id"] for t in done] == [t["id"] for t in tasks]
    assert all(t.trajectory_reward > 1.0 for t in done)  # tool-call shaping plus the answer, as in process
    assert done[0].steps[1].info["tool_calls"][0]["ok"]
    policy.kill_armed = True
    broken = collect(lambda: OpenEnvEnv(server.url, message_timeout=20), policy, tasks=tasks[:1])
    assert server.process.poll() is not None
    assert broken[0].status == EpisodeStatus.ENV_ERROR
    error = broken[0].steps[-1].info["error"]
    assert error.startswith("env.step raised EnvServerError") and server.url in error, error
    with pytest.raises(EnvServerError, match=server.url):
        OpenEnvEnv(server.url, connect_timeout=5).reset(seed=0)
