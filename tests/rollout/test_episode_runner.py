"""EpisodeRunner: envs built once and reused through reset, discarded when they may be broken, pooled by key."""

from __future__ import annotations

import asyncio
import threading

import gymnasium as gym
import pytest
from rollout_fakes import CrashingTool, ScriptedPolicy, make_add_env, make_tasks

from agent_gym.rollout import EpisodeRunner, RolloutStream, plan_episodes
from agent_gym.rollout.episode import ActCall, EndEpisode, ResetCall, StepCall, TurnCall, drive, episode_loop
from agent_gym.types import EpisodeStatus
from agent_gym.utils.runtime import run_sync


class _Counting:
    """An env factory counting the envs it built."""

    def __init__(self, **env_kwargs):
        self.built = 0
        self.env_kwargs = env_kwargs
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.built += 1
        return make_add_env(**self.env_kwargs)


def test_a_stream_builds_at_most_n_parallel_envs(monkeypatch):
    from agent_gym.envs.tool_use.tasks import generate_tasks

    calls = []
    make = gym.make

    def counting_make(*args, **kwargs):
        calls.append(args[0])
        return make(*args, **kwargs)

    monkeypatch.setattr(gym, "make", counting_make)
    tasks = generate_tasks(per_family=3, seed=1)[:12]
    with RolloutStream("agent_gym/ToolUse-v0", ScriptedPolicy(), tasks, samples_per_task=4, concurrency=4,
                       n_parallel=4, max_steps=2) as stream:
        groups = list(stream)
    assert len(groups) == 12 and all(len(g.trajectories) == 4 for g in groups)
    assert all(t.status == EpisodeStatus.ENV_DONE for g in groups for t in g.trajectories)
    assert 1 <= len(calls) <= 4  # 48 episodes on at most four envs, reused through reset
    assert stream.runner.env_builds == len(calls) and stream.runner.closed


def test_runs_reuse_the_runners_envs():
    factory = _Counting()
    with EpisodeRunner(factory, ScriptedPolicy(), n_parallel=3) as runner:
        for seed in range(3):
            results = run_sync(lambda seed=seed: runner.run(plan_episodes(make_tasks(6), None, seed=seed)))
            assert [t.status for t in results] == [EpisodeStatus.ENV_DONE] * 6
            assert [t.idx for t in results] == list(range(6))
    assert factory.built <= 3 and runner.env_builds == factory.built


def test_an_env_that_raised_is_rebuilt_the_others_are_kept():
    tasks = make_tasks(16)  # task 13 makes the tool raise
    factory = _Counting(tool=CrashingTool(), tasks=tasks)
    with EpisodeRunner(factory, ScriptedPolicy(), n_parallel=1) as runner:
        results = run_sync(lambda: runner.run(plan_episodes(tasks, None)))
    assert results[13].status == EpisodeStatus.ENV_ERROR
    assert factory.built == 2 and runner.envs.discarded == 1  # the one that raised, then a fresh one


def test_an_env_left_mid_call_by_a_timeout_is_discarded():
    release = threading.Event()

    class _Hang(CrashingTool):
        def run(self, arguments):
            if arguments.get("a") == 1:
                release.wait(30)
            return super().run(arguments)

    factory = _Counting(tool=_Hang(), tasks=make_tasks(3))
    try:
        with EpisodeRunner(factory, ScriptedPolicy(), n_parallel=1, episode_timeout=0.5) as runner:
            results = run_sync(lambda: runner.run(plan_episodes(make_tasks(3), None)))
    finally:
        release.set()
    assert [t.status for t in results] == [EpisodeStatus.ENV_DONE, EpisodeStatus.TIMEOUT, EpisodeStatus.ENV_DONE]
    assert factory.built == 2 and runner.envs.discarded == 1


def test_specs_of_other_env_kwargs_get_envs_of_their_own(monkeypatch):
    calls = []
    make = gym.make
    monkeypatch.setattr(gym, "make", lambda *a, **k: calls.append((a[0], k.get("max_steps"))) or make(*a, **k))
    import dataclasses

    specs = plan_episodes(None, 4)
    specs = [dataclasses.replace(s, env_kwargs={"max_steps": 1 + s.index % 2}) for s in specs]
    with EpisodeRunner("agent_gym/ToolUse-v0", ScriptedPolicy(), n_parallel=2) as runner:  # keeps two idle envs
        results = run_sync(lambda: runner.run(specs, n_parallel=1))
        again = run_sync(lambda: runner.run(specs, n_parallel=1))
    assert sorted(calls) == [("agent_gym/ToolUse-v0", 1), ("agent_gym/ToolUse-v0", 2)]
    assert [len(t.steps) for t in results] == [len(t.steps) for t in again]


def test_a_runner_takes_a_policy_per_call_and_refuses_work_once_closed():
    runner = EpisodeRunner(make_add_env, n_parallel=2)
    policy = ScriptedPolicy()
    (trajectory,) = run_sync(lambda: runner.run(plan_episodes(make_tasks(1), None), policy=policy))
    assert trajectory.status == EpisodeStatus.ENV_DONE and policy.closed == [trajectory.rollout_id]
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(runner.run_episode(plan_episodes(make_tasks(1), None)[0], policy=policy))


def test_the_episode_loop_records_how_each_call_ended():
    def execute(call):
        if isinstance(call, ResetCall):
            return ("obs",), {"tools": [{"name": "t"}]}
        if isinstance(call, TurnCall):
            if call.turn == 2:
                raise EndEpisode(EpisodeStatus.TIMEOUT, "budget")
            return None
        if isinstance(call, ActCall):
            assert call.tools == [{"name": "t"}]
            return "text"
        assert isinstance(call, StepCall)
        return ("obs",), 0.0, False, False, {}

    ending = drive(episode_loop(seed=1), execute)
    assert (ending.status, ending.reason, ending.turns) == (EpisodeStatus.TIMEOUT, "budget", 2)

    def failing(call):
        if isinstance(call, StepCall):
            raise OSError("disk")
        return execute(call)

    ending = drive(episode_loop(), failing)
    assert ending.status == EpisodeStatus.ENV_ERROR and ending.env_failed and "OSError: disk" in ending.reason
