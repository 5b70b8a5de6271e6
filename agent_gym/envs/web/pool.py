"""Browsers kept between episodes and envs: :class:`BrowserPool`, which cannot leak them.

Each Web-v0 env leases one :class:`~agent_gym.envs.web.browser.BrowserWorker` (one browser process
per rollout worker) and opens one fresh context per episode on it. When the env closes, its worker
goes back to the pool, healthy ones kept idle (up to ``max_idle``) for the next env, so a runner
that rebuilds envs does not pay a browser start each time. A worker that crashed or hung is never
given out again: it is killed and a new one starts for the next lease. The pool knows every worker
it made and has not closed (:meth:`BrowserPool.stats`); :meth:`BrowserPool.close` and the process's
exit (``atexit``) close them all. If the Python process is killed outright, each driver sees its
pipe close and takes its browser down with it.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any

from agent_gym.envs.web.browser import BrowserWorker

__all__ = ["BrowserPool", "default_pool"]

_POOLS: weakref.WeakSet[BrowserPool] = weakref.WeakSet()


class BrowserPool:
    """Browser workers leased to envs, reused when healthy, killed when not.

    Args:
        executable: The Chromium binary (default: :func:`~agent_gym.envs.web.browser.find_browser`).
        max_idle: Healthy workers kept idle for later leases; more are closed.
        launch_timeout: Seconds a browser may take to start.
    """

    def __init__(self, executable: str | None = None, *, max_idle: int = 16, launch_timeout: float = 60.0) -> None:
        self.executable = executable
        self.max_idle = max(0, int(max_idle))
        self.launch_timeout = launch_timeout
        self.started = 0
        self.replaced = 0
        self.resets_prepared = 0
        self.resets_cold = 0
        self.resets_started = 0
        self._lock = threading.Lock()
        self._idle: list[BrowserWorker] = []
        self._live: set[BrowserWorker] = set()
        self.pid = os.getpid()
        _POOLS.add(self)

    def __copy__(self) -> BrowserPool:
        return self  # a pool is a shared resource: a copied env spec or env uses the same one

    def __deepcopy__(self, memo: dict[int, Any]) -> BrowserPool:
        return self

    def lease(self) -> BrowserWorker:
        """A healthy worker: an idle one, or a new browser.

        Raises:
            BrowserError: When a browser cannot start.
        """
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.dead is None and worker.pid == os.getpid():
                    return worker
                self._live.discard(worker)
                worker.close()
        worker = BrowserWorker(self.executable, launch_timeout=self.launch_timeout)
        with self._lock:
            self._live.add(worker)
            self.started += 1
        return worker

    def give_back(self, worker: BrowserWorker) -> None:
        """Return a leased worker: kept idle when healthy and wanted, closed (killed if need be) otherwise."""
        with self._lock:
            keep = worker.dead is None and not worker.contexts and len(self._idle) < self.max_idle
            if keep:
                self._idle.append(worker)
                return
            self._live.discard(worker)
            if worker.dead is not None:
                self.replaced += 1
        worker.close()

    def count_reset(self, *, prepared: bool, started: bool = False) -> None:
        """Count an episode start of an env on this pool: on a context prepared in advance, or on one it opened.

        Args:
            prepared: On a context prepared in advance.
            started: Also with the task started ahead (a prepared one).
        """
        with self._lock:
            self.resets_started += started
            if prepared:
                self.resets_prepared += 1
            else:
                self.resets_cold += 1

    def stats(self) -> dict[str, Any]:
        """What the pool holds now and did so far.

        Returns:
            ``browsers`` (live workers), ``idle``, ``contexts`` (open now), ``prepared`` (those of them opened in
            advance for an episode not started yet), ``processes`` (driver and browser
            processes alive), ``started`` and ``replaced`` (dead workers closed) so far, and the envs' episode starts
            so far: ``resets_prepared`` (on a context prepared in advance), ``resets_started`` (those of them whose
            task was started ahead), ``resets_cold`` (on one opened at reset) and ``prepared_hit_rate`` (the share
            of the prepared ones).
        """
        with self._lock:
            live = list(self._live)
            idle = len(self._idle)
            resets = self.resets_prepared + self.resets_cold
        return {"browsers": len(live), "idle": idle, "contexts": sum(len(w.contexts) for w in live),
                "prepared": sum(len(w.prepared) for w in live),
                "processes": sum(len(w.browser_pids()) for w in live), "started": self.started,
                "replaced": self.replaced, "resets_prepared": self.resets_prepared,
                "resets_started": self.resets_started, "resets_cold": self.resets_cold,
                "prepared_hit_rate": self.resets_prepared / resets if resets else 0.0}

    def close(self) -> None:
        """Close every worker this pool made (leased ones too: their episodes fail ENV_ERROR); safe twice."""
        with self._lock:
            workers = list(self._live)
            self._live.clear()
            self._idle.clear()
        for worker in workers:
            worker.close()


_DEFAULT: BrowserPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> BrowserPool:
    """The process's shared pool (made on first use, and again in a forked child; closed at exit)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT.pid != os.getpid():  # a forked child starts its own browsers
            _DEFAULT = BrowserPool()
        return _DEFAULT


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_POOLS):
        pool.close()
