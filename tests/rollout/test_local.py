"""collect / collect_async on deterministic in-process envs: scheduling, statuses, seeds, event loops."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time

import pytest
from rollout_fakes import (
    CrashingTool,
    FailingPolicy,
    ScriptedPolicy,
    add,
    make_add_env,
    make_tasks,
    strip_timings,
)

from agent_gym.env.core import AgentEnv
from agent_gym.errors import MissingExtraError
from agent_gym.rollout import collect, collect_async
from agent_gym.rollout.planning import plan_episodes
from agent_gym.tools import FunctionTool
from agent_gym.types import EpisodeStatus, StepTrajectory


def test_plan_episodes_groups_and_seeds():
    tasks = make_tasks(3)
    specs = plan_episodes(tasks, None, samples_per_task=2, seed=10)
    assert [s.index for s in specs] == list(range(6))
    assert [s.group for s in specs] == [0, 0, 1, 1, 2, 2]
    assert [s.seed for s in specs] == [10, 10, 11, 11, 12, 12]
    assert specs[0].group_id == specs[1].group_id != specs[2].group_id
    assert specs[3].task is tasks[1]
    cycled = plan_episodes(tasks, 5, samples_per_task=1)
    assert [s.task["id"] for s in cycled] == ["add-0", "add-1", "add-2", "add-0", "add-1"]
    assert [s.task for s in plan_episodes(None, 2, 1)] == [None, None]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"tasks": None, "num_episodes": None}, ValueError),
        ({"tasks": make_tasks(1), "samples_per_task": 0}, ValueError),
        ({"tasks": {"id": 1}}, TypeError),
        ({"num_episodes": 1, "n_parallel": 0}, ValueError),
        ({"num_episodes": 1, "backend": "spark"}, ValueError),
        ({"num_episodes": 1, "episode_timeout": -1}, ValueError),
    ],
)
def test_collect_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        collect(make_add_env, ScriptedPolicy(), progress=False, **kwargs)


def test_collect_returns_every_task_in_order_with_groups():
    policy = ScriptedPolicy()
    tasks = make_tasks(10)
    result = collect(make_add_env, policy, tasks=tasks, samples_per_task=3, n_parallel=4, progress=False)
    assert len(result) == 30
    assert all(isinstance(t, StepTrajectory) for t in result)
    assert [t.idx for t in result] == list(range(30))
    assert [t.task["id"] for t in result] == [t["id"] for t in tasks for _ in range(3)]
    assert all(t.status == EpisodeStatus.ENV_DONE for t in result)
    assert all(t.trajectory_reward > 1.0 for t in result)
    for g in range(10):
        siblings = result[3 * g : 3 * g + 3]
        assert len({t.group_id for t in siblings}) == 1
        assert len({t.rollout_id for t in siblings}) == 3
    assert len({t.group_id for t in result}) == 10
    # Every session the policy saw was closed.
    assert set(policy.closed) == policy.sessions and len(policy.sessions) == 30


def test_collect_without_tasks_uses_env_choice_and_same_seed_is_deterministic():
    a = collect(make_add_env, ScriptedPolicy(), num_episodes=6, samples_per_task=2, seed=3, progress=False)
    b = collect(make_add_env, ScriptedPolicy(), num_episodes=6, samples_per_task=2, seed=3, n_parallel=2,
                progress=False)
    assert [strip_timings(x.to_dict()) for x in a] == [strip_timings(x.to_dict()) for x in b]
    assert a[0].task == a[1].task  # siblings share the reset seed, hence the task


def test_blocking_tools_run_off_the_event_loop():
    # Each of the 8 tool calls blocks until all 8 are in progress: run one after another (or on
    # the event loop's thread) the first would wait for the others forever and the barrier break.
    barrier = threading.Barrier(8, timeout=60)

    def meet_then_add(a: int, b: int) -> int:
        """Wait for the other calls, then add.

        Args:
            a: First addend.
            b: Second addend.

        Returns:
            The sum.
        """
        barrier.wait()
        return a + b

    result = collect(lambda: make_add_env(meet_then_add), ScriptedPolicy(), tasks=make_tasks(8), n_parallel=8,
                     progress=False)
    assert not barrier.broken
    assert all(t.status == EpisodeStatus.ENV_DONE and t.trajectory_reward > 1.0 for t in result)


def test_independent_scheduling_a_slow_episode_does_not_hold_the_batch():
    # 2 slots, 10 episodes: episode 0 waits until the 9 others have finished. With independent
    # scheduling the other slot runs all of them meanwhile; in lockstep batches of two episode 1's
    # batch would wait for episode 0, which would wait for the rest: a deadlock (TIMEOUT here).
    finished: list[int] = []
    others_done = asyncio.Event()

    def on_episode(trajectory):
        finished.append(trajectory.idx)
        if len(finished) == 9:
            others_done.set()

    class WaitsForTheOthers(ScriptedPolicy):
        async def aact(self, messages, *, session_id, tools=None):
            if "What is 0 + 1" in messages[1]["content"]:
                await others_done.wait()
            return self._answer(messages)

    result = asyncio.run(collect_async(make_add_env, WaitsForTheOthers(), tasks=make_tasks(10), n_parallel=2,
                                       episode_timeout=60, on_episode=on_episode, progress=False))
    assert len(result) == 10 and all(t.status == EpisodeStatus.ENV_DONE for t in result)
    assert finished[-1] == 0 and sorted(finished) == list(range(10))


def test_policy_exception_gives_policy_error_for_that_episode_only():
    result = collect(make_add_env, ScriptedPolicy(fail_on=3), tasks=make_tasks(6), n_parallel=3, progress=False)
    statuses = [t.status for t in result]
    assert statuses[3] == EpisodeStatus.POLICY_ERROR
    assert statuses[:3] + statuses[4:] == [EpisodeStatus.ENV_DONE] * 5
    assert "policy exploded" in result[3].steps[-1].info["error"]
    assert len(result[3].steps) >= 1


def test_policy_error_output_gives_policy_error():
    result = collect(make_add_env, FailingPolicy(), tasks=make_tasks(2), progress=False)
    assert [t.status for t in result] == [EpisodeStatus.POLICY_ERROR] * 2


def test_env_exception_gives_env_error_for_that_episode_only():
    tasks = make_tasks(16)  # task 13 makes the tool raise
    result = collect(lambda: make_add_env(CrashingTool(), tasks=tasks), ScriptedPolicy(), tasks=tasks, n_parallel=4,
                     progress=False)
    assert result[13].status == EpisodeStatus.ENV_ERROR
    assert "tool crashed" in result[13].steps[-1].info["error"]
    assert all(t.status == EpisodeStatus.ENV_DONE for i, t in enumerate(result) if i != 13)


def test_env_construction_failure_gives_env_error():
    def broken():
        raise OSError("no sandbox")

    result = collect(broken, ScriptedPolicy(), tasks=make_tasks(2), progress=False)
    assert [t.status for t in result] == [EpisodeStatus.ENV_ERROR] * 2
    assert result[0].task["id"] == "add-0"


def test_env_reset_failure_keeps_the_episode_id_and_task():
    class ResetFails(AgentEnv):  # raises at reset for one task
        def reset(self, *, seed=None, options=None):
            if (options or {}).get("task", {}).get("id") == "add-1":
                raise RuntimeError("reset exploded")
            return super().reset(seed=seed, options=options)

    tasks = make_tasks(3)
    tool = FunctionTool(add, name="add", time_limit=None)
    result = collect(lambda: ResetFails(tasks=tasks, tools=[tool], max_steps=4), ScriptedPolicy(), tasks=tasks,
                     progress=False)
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE, EpisodeStatus.ENV_ERROR, EpisodeStatus.ENV_DONE]
    failed = result[1]
    assert failed.rollout_id and failed.rollout_id not in {result[0].rollout_id, result[2].rollout_id}
    assert failed.task["id"] == "add-1"
    assert "reset exploded" in failed.steps[-1].info["error"]


def test_hanging_tool_gives_timeout_for_that_episode_only():
    tasks = make_tasks(16)  # task 13's tool call blocks until released (no tool time limit)
    release, returned = threading.Event(), threading.Event()

    def hang_on_13(a: int, b: int) -> int:
        """Add, blocking on task 13 until released.

        Args:
            a: First addend.
            b: Second addend.

        Returns:
            The sum.
        """
        if a == 13:
            release.wait(120)
            returned.set()
        return a + b

    factory = lambda: make_add_env(hang_on_13, tasks=tasks)  # noqa: E731
    try:
        result = collect(factory, ScriptedPolicy(), tasks=tasks, n_parallel=4, episode_timeout=5.0, progress=False)
        assert not returned.is_set()  # collect returned while the call still hung: abandoned, not awaited
    finally:
        release.set()
    assert result[13].status == EpisodeStatus.TIMEOUT
    assert "episode_timeout" in result[13].steps[-1].info["error"]
    assert all(t.status == EpisodeStatus.ENV_DONE for i, t in enumerate(result) if i != 13)
    assert returned.wait(10)  # the abandoned worker finished its call once released


def test_slow_policy_times_out():
    result = collect(make_add_env, ScriptedPolicy(delay=0.5), tasks=make_tasks(2), episode_timeout=0.2, progress=False)
    assert [t.status for t in result] == [EpisodeStatus.TIMEOUT] * 2


def test_sync_only_policy_runs_in_threads():
    barrier = threading.Barrier(8, timeout=60)  # the first turns of all 8 episodes must overlap

    class SyncOnly:
        def __init__(self):
            self.inner = ScriptedPolicy()

        def act(self, messages, *, session_id, tools=None):
            if len(messages) == 2:
                barrier.wait()
            return self.inner.act(messages, session_id=session_id, tools=tools)

        def close_session(self, session_id):
            pass

    result = collect(make_add_env, SyncOnly(), tasks=make_tasks(8), n_parallel=8, progress=False)
    assert not barrier.broken
    assert all(t.status == EpisodeStatus.ENV_DONE for t in result)


def test_on_episode_sees_every_trajectory():
    seen = []
    result = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(5), on_episode=seen.append, progress=False)
    assert sorted(t.idx for t in seen) == [t.idx for t in result]


def test_failing_on_episode_loses_nothing(caplog):
    calls = []

    def writer(trajectory):
        calls.append(trajectory.idx)
        raise OSError("disk full")

    result = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(4), on_episode=writer, progress=False)
    assert len(result) == 4 and sorted(calls) == [0, 1, 2, 3]
    assert all(t.status == EpisodeStatus.ENV_DONE for t in result)
    assert "disk full" in caplog.text


def test_progress_bar_shows_mean_reward(capsys):
    collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), progress=True)
    err = capsys.readouterr().err
    assert "3/3" in err and "reward=" in err


async def test_collect_inside_a_running_event_loop():
    assert asyncio.get_running_loop() is not None
    result = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), progress=False)
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 3
    result = await collect_async(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), progress=False)
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 3


def test_list_of_env_factories_and_gamma():
    result = collect([make_add_env, make_add_env], ScriptedPolicy(), tasks=make_tasks(4), gamma=0.5, progress=False)
    steps = result[0].steps
    assert steps[0].mc_return == pytest.approx(steps[0].reward + 0.5 * steps[1].reward)


def test_env_kwargs_rejected_with_factories():
    with pytest.raises(ValueError, match="env_kwargs"):
        collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(1), env_kwargs={"max_steps": 2}, progress=False)


HAS_RAY = importlib.util.find_spec("ray") is not None


@pytest.mark.skipif(HAS_RAY, reason="ray is installed; the missing-extra error cannot be shown")
def test_ray_backend_without_ray_names_the_extra():
    with pytest.raises(MissingExtraError, match=r"agent-gym\[ray\]"):
        collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(1), backend="ray", progress=False)


@pytest.mark.skipif(not HAS_RAY, reason="the 'ray' extra is not installed (pip install 'agent-gym[ray]')")
@pytest.mark.timeout(300)
def test_ray_backend_matches_local_backend(local_ray):
    import rollout_fakes
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(rollout_fakes)  # the test helpers are not importable in Ray workers
    tasks = make_tasks(6)
    local = collect(make_add_env, ScriptedPolicy(), tasks=tasks, samples_per_task=2, seed=5, progress=False)
    remote = collect(
        make_add_env, ScriptedPolicy(), tasks=tasks, samples_per_task=2, seed=5, n_parallel=2,
        backend="ray", progress=False,
    )
    failing = collect(
        make_add_env, ScriptedPolicy(fail_on=1), tasks=tasks[:2], n_parallel=2, backend="ray", progress=False
    )
    # A zero-argument factory builds the policy inside each actor.
    built_there = collect(make_add_env, ScriptedPolicy, tasks=tasks[:2], backend="ray", progress=False)
    with pytest.raises(TypeError, match="LockedPolicy that cannot be pickled"):
        collect(make_add_env, LockedPolicy(), tasks=tasks[:2], backend="ray", progress=False)
    assert [strip_timings(x.to_dict()) for x in remote] == [strip_timings(x.to_dict()) for x in local]
    assert [t.status for t in failing] == [EpisodeStatus.ENV_DONE, EpisodeStatus.POLICY_ERROR]
    assert [t.status for t in built_there] == [EpisodeStatus.ENV_DONE] * 2


class LockedPolicy(ScriptedPolicy):
    """A policy holding a lock: it cannot be pickled, so it cannot be shipped to Ray actors."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


def test_max_steps_is_the_one_step_limit():
    import gymnasium as gym

    from agent_gym.rollout.planning import make_env_factory

    env = make_env_factory("agent_gym/ToolUse-v0", max_steps=25)(0)
    assert env.unwrapped.max_steps == 25
    assert env.spec.max_episode_steps is None and gym.spec("agent_gym/ToolUse-v0").max_episode_steps is None


def test_pool_abandon_of_a_call_that_already_returned():
    """wait_for cancels job.future even when the call returned before its result reached the
    loop: abandon must then run `after` itself and keep counting the (live) worker."""
    import threading

    from agent_gym.rollout.thread_pool import ThreadPool

    async def main() -> None:
        pool = ThreadPool(2)
        returned = threading.Event()
        job = pool.submit(returned.set)
        assert returned.wait(5)
        time.sleep(0.2)  # block the loop: run() completes, its result is not delivered yet
        assert job.future.cancel()  # what wait_for's cancellation does to the awaited future
        closed = []
        pool.abandon(job, after=lambda: closed.append(True))
        assert closed == [True]  # the env is closed although its worker will never run `after`
        assert pool.workers == 1  # the worker is alive and back in the pool
        assert await pool.run(lambda: 42) == 42
        assert pool.workers == 1
        pool.shutdown()

    asyncio.run(main())


def test_pool_abandon_of_a_running_call_retires_its_worker():
    import threading

    from agent_gym.rollout.thread_pool import ThreadPool

    async def main() -> None:
        pool = ThreadPool(2)
        release, closed = threading.Event(), threading.Event()
        job = pool.submit(release.wait, 5)
        await asyncio.sleep(0.05)
        job.future.cancel()
        pool.abandon(job, after=closed.set)
        assert pool.workers == 0 and not closed.is_set()
        release.set()
        assert closed.wait(5)  # `after` ran on the worker once the call returned
        assert await pool.run(lambda: 7) == 7
        assert pool.workers == 1
        pool.shutdown()

    asyncio.run(main())


def test_episode_ids_are_deterministic_and_unique():
    first = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), samples_per_task=2, progress=False, seed=5)
    again = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), samples_per_task=2, progress=False, seed=5)
    ids = [t.rollout_id for t in first]
    assert ids == [t.rollout_id for t in again]
    assert len(set(ids)) == len(ids)


def test_pool_keeps_quick_calls_on_few_threads_but_blocking_calls_fan_out():
    """A burst of quick calls is drained by one or two workers; calls that block until all of
    them run at once still get a thread each (the stall check wakes more); idle ones are reused.

    ``stall_after`` is 0.2 s rather than the default 2 ms: on a loaded machine the OS can keep a
    worker off the CPU for a few milliseconds while the loop runs, which the pool rightly reads as
    a stall; a fifth of a second of that is not what this test is about.
    """
    import threading

    from agent_gym.rollout.thread_pool import ThreadPool

    async def main() -> None:
        pool = ThreadPool(8, stall_after=0.2)
        assert sorted(await asyncio.gather(*(pool.run(lambda i=i: i) for i in range(300)))) == list(range(300))
        assert pool.workers <= 3, pool.workers
        for _ in range(2):  # cold (workers started), then warm (idle ones woken)
            barrier = threading.Barrier(8, timeout=5)
            assert await asyncio.gather(*(pool.run(barrier.wait) for _ in range(8))) is not None
            assert pool.workers == 8
        assert sorted(await asyncio.gather(*(pool.run(lambda i=i: i) for i in range(50)))) == list(range(50))
        assert pool.workers == 8
        pool.shutdown()  # idle workers exit
        deadline = time.monotonic() + 30
        while pool.workers and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert pool.workers == 0

    asyncio.run(main())


def test_pool_fans_out_past_a_blocked_worker_even_while_the_loop_is_busy():
    """The stall check skips intervals in which the loop was busy, but not forever: a call queued
    behind a blocked worker gets its own thread while the loop keeps hogging the GIL."""
    import threading

    from agent_gym.rollout.thread_pool import ThreadPool

    async def main() -> None:
        pool = ThreadPool(4)
        release = threading.Event()
        blocked = pool.submit(release.wait, 10)
        await asyncio.sleep(0.05)  # the only worker is now inside the blocking call
        quick = pool.submit(lambda: "done")
        started = time.perf_counter()
        while not quick.future.done() and time.perf_counter() - started < 60:
            busy_until = time.perf_counter() + 0.005
            while time.perf_counter() < busy_until:  # every check runs late
                pass
            await asyncio.sleep(0)
        # The blocked worker holds its call until `release`: only a second worker can have run it.
        assert quick.future.done() and quick.future.result() == "done"
        assert pool.workers == 2
        release.set()
        assert await blocked.future is True
        pool.shutdown()

    asyncio.run(main())


def test_a_cancelled_collect_hands_over_a_record_of_every_unfinished_episode():
    """Cancelling ``collect_async``: ``on_episode`` gets every episode, the unfinished ones as stopped
    ``TIMEOUT`` records (those in flight with their turns so far), and the cancellation goes on."""
    from agent_gym.rollout.reporting import STOPPED_REASON

    seen: list[StepTrajectory] = []

    async def main() -> None:
        task = asyncio.ensure_future(collect_async(lambda: make_add_env(), ScriptedPolicy(delay=0.05),
                                                   num_episodes=12, n_parallel=3, on_episode=seen.append))
        while len(seen) < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.06)  # the next episodes are between their turns
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sorted(t.idx for t in seen) == list(range(12))
    stopped = [t for t in seen if t.steps and t.steps[-1].info.get("error") == STOPPED_REASON]
    assert stopped and all(t.status == EpisodeStatus.TIMEOUT for t in stopped)
    assert all(t.status == EpisodeStatus.ENV_DONE for t in seen if t not in stopped)
    in_flight = [t for t in stopped if t.steps[0].info.get("tool_calls")]
    assert 1 <= len(in_flight) <= 3  # their turns so far are kept
