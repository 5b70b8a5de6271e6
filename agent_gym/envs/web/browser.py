"""One headless Chromium driven by Playwright from a thread of its own: :class:`BrowserWorker`.

Playwright's objects belong to the event loop that made them, while an env's ``reset``/``step``
run on whatever worker thread the rollout gives them. A :class:`BrowserWorker` therefore owns a
daemon thread running an asyncio loop, its own Playwright driver and one browser process; every
call from outside is a coroutine run on that loop with a deadline (:meth:`BrowserWorker.call`).
A call past its deadline means a hung browser (:class:`BrowserHung`), a browser or driver that
went away means a crash (:class:`BrowserCrashed`); either way the worker is dead and
:meth:`BrowserWorker.close` kills its process tree (driver and browser), whatever state it is in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agent_gym.errors import AgentGymError, MissingExtraError

__all__ = [
    "BROWSER_ARGS",
    "BrowserCrashed",
    "BrowserError",
    "BrowserHung",
    "BrowserWorker",
    "browser_unavailable_reason",
    "find_browser",
]

T = TypeVar("T")

BROWSER_ARGS = ("--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--metrics-recording-only", "--no-default-browser-check")
"""Chromium's command line: no sandbox of its own (it runs as an unprivileged child), no background traffic."""

_CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "headless_shell")
_START_LOCK = threading.Lock()  # one driver starts at a time, so its process is known for sure


class BrowserError(AgentGymError):
    """The browser failed (not the agent's doing): the episode ends ENV_ERROR."""


class BrowserCrashed(BrowserError):
    """The browser process or its driver went away."""


class BrowserHung(BrowserError):
    """A browser call ran past its deadline."""


def find_browser(executable: str | None = None) -> str | None:
    """The Chromium to drive: ``executable``, ``$AGENT_GYM_CHROMIUM``, or the first on ``PATH`` (None: none)."""
    for name in (executable, os.environ.get("AGENT_GYM_CHROMIUM"), *_CANDIDATES):
        if not name:
            continue
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


def browser_unavailable_reason(executable: str | None = None) -> str | None:
    """Why no browser can run here (None when one can): the Python package or the binary is missing."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (pip install 'agent-gym[web]')"
    if find_browser(executable) is None:
        return ("no Chromium binary found (apt-get install chromium-headless-shell, or set AGENT_GYM_CHROMIUM "
                "to a Chromium executable)")
    return None


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _new_driver(before: set[int]) -> int | None:
    """The pid of the Playwright driver just started: this process's new child running ``run-driver``."""
    import psutil

    for proc in _descendants(os.getpid()):
        if proc.pid in before:
            continue
        try:
            if proc.ppid() == os.getpid() and "run-driver" in " ".join(proc.cmdline()):
                return int(proc.pid)
        except psutil.Error:  # a short-lived child of another thread, gone already
            continue
    return None


class BrowserWorker:
    """A browser process and the thread that drives it.

    Args:
        executable: The Chromium binary (default: :func:`find_browser`).
        launch_timeout: Seconds the driver and browser may take to start.

    Raises:
        MissingExtraError: Without playwright.
        BrowserError: When no browser is found or it does not start.

    Attributes:
        dead: Why the worker can no longer be used (None while it can).
        contexts: The browser contexts open now (one per running episode, and those prepared in advance).
        prepared: Those of :attr:`contexts` opened in advance for an episode that has not started yet.
    """

    def __init__(self, executable: str | None = None, *, launch_timeout: float = 60.0) -> None:
        try:
            from playwright.async_api import async_playwright
        except ImportError as exc:
            raise MissingExtraError("playwright", "web") from exc
        path = find_browser(executable)
        if path is None:
            raise BrowserError(browser_unavailable_reason(executable) or "no Chromium binary found")
        self.executable = path
        self.pid = os.getpid()  # a forked child inherits this object, never its thread or its processes
        self.dead: str | None = None
        self.contexts: set[Any] = set()
        self.prepared: set[Any] = set()
        self.driver_pid: int | None = None
        self._processes: list[Any] = []  # the driver's and the browser's main process (psutil), for alive()
        self._playwright: Any = None
        self.browser: Any = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-gym-browser", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            with _START_LOCK:
                before = {p.pid for p in _descendants(os.getpid())}
                self._playwright = self._run(async_playwright().start(), launch_timeout)
                self.driver_pid = _new_driver(before)
            self.browser = self._run(self._playwright.chromium.launch(
                executable_path=path, args=list(BROWSER_ARGS), headless=True, timeout=launch_timeout * 1000),
                launch_timeout)
            self.browser.on("disconnected", lambda _: self.mark_dead("the browser process went away"))
            self._processes = self._main_processes()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ calls

    def _run(self, coro: Awaitable[T], timeout: float) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BrowserHung(f"the browser did not answer within {timeout:g}s") from None

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float = 30.0) -> T:
        """Run ``fn(*args)`` (a coroutine function) on the browser's loop and return its result.

        Raises:
            BrowserHung: Past ``timeout`` seconds (the worker is then dead).
            BrowserCrashed: When the worker is dead or the browser went away during the call.
        """
        return self.wait(self.submit(fn, *args), timeout=timeout)

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``fn(*args)`` on the browser's loop without waiting for it (a call in the background).

        Its outcome is read with :meth:`wait`, which applies :meth:`call`'s deadline and failure rules.

        Raises:
            BrowserCrashed: When the worker is dead.
        """
        if self.dead is not None:
            raise BrowserCrashed(self.dead)
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop)  # type: ignore[arg-type]

    def wait(self, future: concurrent.futures.Future[T], *, timeout: float = 30.0) -> T:
        """The result of a call started with :meth:`submit`, waiting at most ``timeout`` seconds.

        Raises:
            BrowserHung: Past ``timeout`` seconds (the call is cancelled and the worker is then dead).
            BrowserCrashed: When the browser went away during the call.
        """
        try:
            try:
                return future.result(timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise BrowserHung(f"the browser did not answer within {timeout:g}s") from None
        except BrowserHung as exc:
            self.mark_dead(str(exc))
            raise
        except Exception as exc:
            if self._gone(exc):
                self.mark_dead(f"the browser went away: {str(exc).splitlines()[0][:200]}")
                raise BrowserCrashed(self.dead or "the browser went away") from None
            raise

    def _gone(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the browser, its context or its driver is gone (not a failed action)."""
        if self.dead is not None or (self.browser is not None and not self.browser.is_connected()):
            return True
        text = str(exc)
        return any(word in text for word in ("has been closed", "Connection closed", "Browser closed",
                                             "Target crashed", "Target closed", "driver", "Page crashed"))

    def mark_dead(self, reason: str) -> None:
        """Take the worker out of use (the first reason stays): it is killed and replaced when given back."""
        if self.dead is None:
            self.dead = reason

    # ------------------------------------------------------------------ processes

    def _main_processes(self) -> list[Any]:
        import psutil

        if self.driver_pid is None:
            return []
        try:
            driver = psutil.Process(self.driver_pid)
            return [driver, *driver.children(recursive=False)]
        except psutil.Error:
            return []

    def alive(self) -> bool:
        """Whether the worker is usable and its driver and browser processes run (asked of the OS, not the browser).

        For a use that makes no call to the browser (a reset taking a page started ahead): a browser killed since
        its last call is found here (the worker is then marked dead), not at the episode's first action.
        """
        import psutil

        if self.dead is not None:
            return False
        for proc in self._processes:
            try:
                running = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                running = False
            if not running:
                self.mark_dead("the browser process went away")
                return False
        return True

    def browser_pids(self) -> list[int]:
        """The processes of this worker: its driver and everything under it (the browser's)."""
        if self.driver_pid is None:
            return []
        return [self.driver_pid, *(p.pid for p in _descendants(self.driver_pid))]

    def kill(self) -> None:
        """Kill the driver and the browser at once (SIGKILL), as for a hung browser."""
        import psutil

        for pid in reversed(self.browser_pids()):
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                continue

    def close(self, *, timeout: float = 10.0) -> None:
        """Close every context, the browser and the driver, then stop the thread; safe twice.

        A worker that is dead or does not close within ``timeout`` seconds is killed.
        """
        if self._closed:
            return
        self._closed = True
        if self.pid != os.getpid():  # a copy in a forked child: the browser and the thread are the parent's
            self.mark_dead("inherited from the parent process")
            return
        clean = False
        if self.dead is None and self._playwright is not None:
            try:
                self._run(self._shutdown(), timeout)
                clean = True
            except Exception:  # noqa: BLE001 - a browser that cannot close cleanly is killed below
                self.mark_dead("the browser did not close cleanly")
        self.mark_dead("closed")
        self.kill()
        self.contexts.clear()
        self.prepared.clear()
        if not clean and self._playwright is not None:  # the driver is gone: let its connection and pipes close
            try:
                self._run(self._playwright.stop(), timeout)
            except Exception:  # noqa: BLE001 - already stopped, or the connection broke: nothing left to close
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive() and not self._loop.is_running():
            self._loop.close()

    async def _shutdown(self) -> None:
        for context in list(self.contexts):
            await context.close()
        if self.browser is not None:
            await self.browser.close()
        await self._playwright.stop()

    async def open_context(self, **options: Any) -> Any:
        """A new browser context (tracked in :attr:`contexts` until :meth:`close_context`)."""
        context = await self.browser.new_context(**options)
        self.contexts.add(context)
        return context

    async def close_context(self, context: Any) -> None:
        """Close a context made by :meth:`open_context` (forgotten first, so it is never counted twice)."""
        self.contexts.discard(context)
        self.prepared.discard(context)
        await context.close()

    def __repr__(self) -> str:
        state = "alive" if self.dead is None else f"dead ({self.dead})"
        return f"BrowserWorker(pid={self.driver_pid}, contexts={len(self.contexts)}, {state})"
