"""Run a coroutine to completion from synchronous code, also inside a running event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

__all__ = ["run_sync"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


def run_sync(factory: Callable[[], Awaitable[T]], *, release: Sequence[Any] = ()) -> T:
    """Run the coroutine made by ``factory`` to completion from synchronous code.

    Uses ``asyncio.run`` when this thread has no running event loop; inside a
    running loop (Jupyter, async frameworks) the coroutine runs on a fresh loop
    in a helper thread and this call blocks until it is done.

    Args:
        factory: Zero-argument callable returning the awaitable.
        release: Objects whose ``aclose()`` coroutine (if any) releases what they
            bound to the temporary loop (e.g. a policy's HTTP connections); it is
            awaited before the loop closes.

    Returns:
        The awaitable's result.
    """
    # The result is handed back through ``box``, not as the main task's result: on
    # Python 3.11, ``asyncio.run`` ends with ``signal.getsignal(SIGINT)``, which
    # formats the repr of its SIGINT handler, a partial holding the main task, and
    # so the repr of the task's result (e.g. every trajectory of a collect, tensors
    # included): tens of milliseconds per call for nothing.
    box: list[T] = []

    async def main() -> None:
        box.append(await _await(factory, release))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return box[0]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent-gym-collect") as executor:
        executor.submit(lambda: asyncio.run(main())).result()
    return box[0]


async def _await(factory: Callable[[], Awaitable[T]], release: Sequence[Any]) -> T:
    try:
        return await factory()
    finally:
        for obj in release:
            aclose = getattr(obj, "aclose", None)
            if inspect.iscoroutinefunction(aclose):
                try:
                    await aclose()
                except Exception:  # noqa: BLE001 - releasing loop-bound resources is best effort
                    logger.debug("aclose() failed", exc_info=True)
