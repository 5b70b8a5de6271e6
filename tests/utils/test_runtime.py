"""The concurrency plumbing: loop threads start, run, stop cleanly; calls past their timeout are abandoned safely."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agent_gym.errors import CallTimeoutError
from agent_gym.utils.runtime import LoopThread, WorkerPool, call_outcome, call_with_timeout, run_blocking, run_sync


# ------------------------------------------------------------------------------------------- LoopThread
def test_loop_thread_starts_on_first_use_runs_coroutines_and_stops():
    runner = LoopThread("test-loop")
    assert runner.thread is None and not runner.alive and runner.running_loop is None

    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert runner.call(where()) == "test-loop"
    assert runner.alive and runner.running_loop is not None
    assert runner.submit(where()).result(5) == "test-loop"
    loop = runner.loop
    assert runner.stop() is True
    assert not runner.alive and loop.is_closed() and runner.running_loop is None
    assert runner.stop() is True  # twice is fine
    assert runner.call(where()) == "test-loop"  # and it restarts on a fresh loop
    assert runner.loop is not loop
    runner.stop()


def test_stop_cancels_pending_work_so_no_caller_waits_for_ever():
    runner = LoopThread("test-cancel")
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    future = runner.submit(forever())
    assert started.wait(5)
    t0 = time.perf_counter()
    assert runner.stop(timeout=5) is True
    assert time.perf_counter() - t0 < 5
    assert future.cancelled()


def test_call_from_the_loop_thread_is_refused_and_a_timeout_cancels():
    runner = LoopThread("test-refuse")

    async def nested() -> None:
        inner = asyncio.sleep(0)
        runner.call(inner)

    with pytest.raises(RuntimeError, match="called from the loop thread"):
        runner.call(nested())
    with pytest.raises(TimeoutError):
        runner.call(asyncio.sleep(3600), timeout=0.05)
    runner.stop()


def test_stop_from_the_loop_thread_does_not_wait_for_itself():
    runner = LoopThread("test-self-stop")

    async def stop_here() -> bool:
        return runner.stop()

    future = runner.submit(stop_here())
    assert future.result(5) is False  # not waited for: the thread was still running it
    runner.thread.join(5)
    assert not runner.alive


def test_run_and_iterate_from_another_loop():
    runner = LoopThread("test-bridge")

    async def name() -> str:
        return threading.current_thread().name

    async def numbers():
        for i in range(3):
            await asyncio.sleep(0)
            yield i, threading.current_thread().name

    async def main() -> tuple[str, list]:
        return await runner.run(name()), [item async for item in runner.iterate(numbers)]

    there, items = asyncio.run(main())
    assert there == "test-bridge"
    assert items == [(i, "test-bridge") for i in range(3)]
    runner.stop()


def test_a_dropped_owner_can_stop_its_loop_thread_from_a_finalizer():
    class Owner:
        def __init__(self) -> None:
            import weakref

            self.runner = LoopThread("test-owner")
            weakref.finalize(self, self.runner.stop)

    owner = Owner()
    owner.runner.call(asyncio.sleep(0))
    thread = owner.runner.thread
    del owner
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


# ------------------------------------------------------------------------------------------- calls
def test_call_with_timeout_returns_raises_and_abandons_in_time():
    assert call_with_timeout(lambda a, b=0: a + b, 5, 1, b=2) == 3
    assert call_with_timeout(lambda: "inline", None) == "inline"
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 5)

    def timeout_error() -> None:
        raise TimeoutError("its own")

    with pytest.raises(TimeoutError, match="its own") as info:  # fn's own TimeoutError is not a timeout
        call_with_timeout(timeout_error, 5)
    assert not isinstance(info.value, CallTimeoutError)
    release = threading.Event()
    finished = threading.Event()

    def hang() -> None:
        release.wait(10)
        finished.set()
        raise RuntimeError("after being abandoned")  # dropped: nobody waits for it any more

    t0 = time.perf_counter()
    with pytest.raises(CallTimeoutError, match="did not return within 0.1 s"):
        call_with_timeout(hang, 0.1)
    assert time.perf_counter() - t0 < 2
    release.set()
    assert finished.wait(5)
    # the worker rejoined the pool; later calls work
    assert call_with_timeout(lambda: "still fine", 5) == "still fine"


def test_call_with_timeout_passes_any_keyword_name():
    assert call_with_timeout(lambda **kw: sorted(kw), 5, fn=1, timeout=2) == ["fn", "timeout"]


def test_call_outcome_returns_failures_as_values():
    assert call_outcome(lambda: 1, 5) == ("ok", 1)
    state, error = call_outcome(sys.exit, 5, 3)
    assert state == "error" and isinstance(error, SystemExit)
    release = threading.Event()
    assert call_outcome(release.wait, 0.05, 10) == ("timeout", None)
    release.set()


def test_worker_pool_reuses_threads_bounds_them_and_shuts_down():
    pool = WorkerPool(2, name="test-pool")
    futures = [pool.submit(time.sleep, 0.05) for _ in range(6)]
    for future in futures:
        future.result(5)
    assert pool.threads <= 2
    assert pool.call(lambda: threading.current_thread().name, 5)[1].startswith("test-pool-")
    pool.shutdown(wait=True)
    assert pool.threads == 0
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(print)
    with pytest.raises(ValueError, match="max_workers"):
        WorkerPool(0)


def test_sequential_calls_reuse_one_worker():
    pool = WorkerPool(name="test-reuse")
    names = {pool.call(lambda: threading.current_thread().name, 5)[1] for _ in range(50)}
    assert len(names) == 1
    pool.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_workers():
    script = textwrap.dedent(
        """
        import os, sys
        from agent_gym.utils.runtime import call_with_timeout
        call_with_timeout(lambda: None, 5)  # a worker is idle in the parent
        pid = os.fork()
        if pid == 0:
            ok = call_with_timeout(lambda: "child", 5) == "child"
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "0", result.stderr


def test_run_blocking_runs_on_the_offload_pool():
    async def main() -> str:
        return await run_blocking(lambda: threading.current_thread().name)

    assert asyncio.run(main()).startswith("agent-gym-offload-")


def test_run_sync_with_and_without_a_running_loop():
    assert run_sync(lambda: asyncio.sleep(0, result=3)) == 3

    async def inside_a_running_loop() -> int:
        return run_sync(lambda: asyncio.sleep(0, result=7))

    assert asyncio.run(inside_a_running_loop()) == 7


def test_iterate_closed_early_stops_the_iteration_there():
    runner = LoopThread("test-early")
    stopped = threading.Event()

    async def endless():
        try:
            i = 0
            while True:
                await asyncio.sleep(0.001)
                yield i
                i += 1
        finally:
            stopped.set()

    async def main() -> int:
        items = runner.iterate(endless)
        first = await items.__anext__()
        await items.aclose()
        return first

    assert asyncio.run(main()) == 0
    assert stopped.wait(5)
    runner.stop()
