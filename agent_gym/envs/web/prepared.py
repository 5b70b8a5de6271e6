"""The next episode's context, opened while the last one ends: :class:`PagePreparer`.

An episode's fresh context and its task page take a few hundred milliseconds to open and load;
starting the task on a page already loaded (for MiniWoB++, the page's own episode start) takes a
few. So when an episode ends, and when an env is made, a :class:`PagePreparer` opens the next
episode's context in the background on the env's browser, exactly as a reset would (fresh, with
the same request filter and report binding), and loads in it the page the next episode most
likely needs. The next reset takes it when it fits (a *hit*: the same page and context options)
and only starts the task on it; otherwise (a *miss*) it closes the prepared context and opens its
own. A prepared context is never shown to an episode before its reset, no agent action ever
reached it, and it is a context like any other: tracked in
:attr:`~agent_gym.envs.web.browser.BrowserWorker.contexts`, closed by :meth:`PagePreparer.discard`
when the env closes, and killed with its browser when that crashes or hangs.

Three kinds: ``loaded`` (a MiniWoB++ page: loaded, its score display hidden, Playwright's page script
in place), *started* (loaded, and the task already started with its setup argument and its first
snapshot read, with no warm-up snapshot before it, as on a page a reset loads itself: for a next
episode whose task and argument are known in advance, see below) and blank
(a synthetic site: each episode's site instance gets an address of its own at reset, so only the
context and an empty page can be ready).

A started page serves only a reset whose start is exactly that start: the same page spec (setup
argument included) and the same context options. Nothing else of a page's start depends on the reset:
a MiniWoB++ page's problem is fixed by its task's instance seed (the spec's setup argument), not by
the reset's seed, which only draws the task (and the episode id). So a reset with a seed, or with a
given task, takes a started page as an unseeded draw does when its task is the one started; the env
predicts that task (see :class:`~agent_gym.envs.web.env.WebEnv`). Such a reset costs no round trip to
the browser (it asks the OS whether the browser's processes still run, so that a browser killed
since the preparation is found at the reset, which is then retried on a new browser): it takes the
instruction and the first snapshot as they are and sends the page's clock
restart (the spec's ``restart_script``) without waiting for it; the driver delivers a page's commands
in order, so it runs before anything the episode then does on the page. A started page that does not
serve its reset (another task or argument, other context options, a page that ended its task by
itself) is closed, never shown, and the reset opens its own context: a problem once started is never
started again on the same page.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, replace

from agent_gym.envs.web.browser import BrowserCrashed, BrowserError, BrowserWorker
from agent_gym.envs.web.page import PageSession, PageSpec

__all__ = ["PagePreparer", "close_quietly"]


async def _make_ready(session: PageSession, worker: BrowserWorker, load: bool, start: bool) -> None:
    await session.open_blank(worker, prepared=True)
    if load:
        await session.load()
        if start:  # the first snapshot is read here: no warm-up snapshot (as on a page a reset loads itself)
            await session.start_ahead()
        else:
            await session.warm()


async def close_quietly(session: PageSession, worker: BrowserWorker) -> None:
    """Close ``session``'s context; one that does not close takes its browser out of use (it is then replaced)."""
    try:
        await session.close(worker)
    except Exception:  # noqa: BLE001 - a context that cannot close: its browser is killed and replaced
        worker.mark_dead("a context did not close")


@dataclass
class _Prepared:
    worker: BrowserWorker
    session: PageSession
    future: concurrent.futures.Future[None]
    loaded: bool
    started: bool

    def fits(self, spec: PageSpec, action_timeout_ms: float) -> bool:
        if self.session.action_timeout_ms != action_timeout_ms:
            return False
        if self.started:  # exactly this start: the same page, setup argument and context options
            return self.session.spec == spec
        if self.loaded:  # the same page and options; only the setup's argument (the instance seed) may differ
            return replace(self.session.spec, setup_arg=None) == replace(spec, setup_arg=None)
        return self.session.spec.viewport == spec.viewport


class PagePreparer:
    """At most one prepared context (with its page) for an env's next episode.

    Attributes:
        prepared: Contexts prepared so far.
        started: Those of them whose task was started ahead (see the module's description).
    """

    def __init__(self) -> None:
        self.prepared = 0
        self.started = 0
        self._next: _Prepared | None = None

    @property
    def pending(self) -> bool:
        """Whether a prepared context is waiting for a reset."""
        return self._next is not None

    @property
    def spec(self) -> PageSpec | None:
        """The spec the waiting context was prepared for (None when none waits)."""
        return None if self._next is None else self._next.session.spec

    @property
    def ready(self) -> bool:
        """Whether a prepared context waits and its preparation is done (a reset taking it waits for nothing)."""
        return self._next is not None and self._next.future.done()

    @property
    def started_ahead(self) -> bool:
        """Whether the waiting context's task was started ahead (False when none waits)."""
        return self._next is not None and self._next.started

    def prepare(self, worker: BrowserWorker, spec: PageSpec, *, action_timeout_ms: float, load: bool,
                start: bool = False) -> None:
        """Start opening a context on ``worker`` (and loading ``spec``'s start page when ``load``) in the background.

        A no-op when one is prepared already or the worker is dead.

        Args:
            worker: The env's browser.
            spec: The page (``load``) or only the context options (viewport) of the expected next episode.
            action_timeout_ms: The context's default timeout for actions.
            load: Load the start page (and get it ready to start) or leave an empty page.
            start: Also start the task with ``spec.setup_arg`` and read its first snapshot (with ``load`` only):
                for a next episode known exactly.
        """
        if self._next is not None or worker.dead is not None:
            return
        start = start and load
        session = PageSession(spec, action_timeout_ms=action_timeout_ms)
        try:
            future = worker.submit(_make_ready, session, worker, load, start)
        except BrowserError:
            return
        self._next = _Prepared(worker, session, future, load, start)
        self.prepared += 1
        self.started += start

    def take(self, worker: BrowserWorker, spec: PageSpec, *, action_timeout_ms: float,
             timeout: float) -> PageSession | None:
        """The prepared session, now for ``spec``, when it fits; otherwise None (the prepared context is closed).

        A session whose task was started ahead (its :attr:`~PageSession.first_snapshot` set) is returned only
        for exactly its spec; its clock restart is then sent to the page, not waited for.

        Args:
            worker: The env's browser now.
            spec: The episode's page.
            action_timeout_ms: The episode's action timeout.
            timeout: Seconds to wait for a preparation still under way (or a close).

        Raises:
            BrowserError: When the browser crashed or hung meanwhile (the worker is then dead; for a task started
                ahead, found by :meth:`~agent_gym.envs.web.browser.BrowserWorker.alive`).
        """
        prepared = self._next
        if prepared is None:
            return None
        if prepared.worker is not worker or not prepared.fits(spec, action_timeout_ms):
            self.discard(timeout=timeout)
            return None
        self._next = None
        session = prepared.session
        try:
            worker.wait(prepared.future, timeout=timeout)
        except BrowserError:
            raise
        except Exception:  # noqa: BLE001 - the page did not load: a miss, its context closed, the reset loads anew
            worker.call(close_quietly, session, worker, timeout=timeout)
            return None
        if prepared.started and session.reports:  # the page ended its task by itself before the episode
            worker.call(close_quietly, session, worker, timeout=timeout)
            return None
        if prepared.started and not worker.alive():  # no browser call below: ask the OS whether it still runs
            raise BrowserCrashed(worker.dead or "the browser process went away")
        session.spec = spec
        worker.prepared.discard(session.context)
        if prepared.started:
            worker.submit(session.restart_clock)  # runs before the episode's first command on the page
        return session

    def discard(self, *, timeout: float) -> None:
        """Close the prepared context, if any (waiting for its preparation to finish first); safe twice.

        A context on a dead browser is left to the browser's end (it is killed with it); one that does
        not close takes its browser out of use.
        """
        prepared, self._next = self._next, None
        if prepared is None or prepared.worker.dead is not None:
            return
        worker = prepared.worker
        try:
            try:
                worker.wait(prepared.future, timeout=timeout)
            except BrowserError:
                return
            except Exception:  # noqa: BLE001 - a page that did not load: its context (if any) is closed below
                pass
            worker.call(close_quietly, prepared.session, worker, timeout=timeout)
        except BrowserError:
            return

    def forget(self) -> None:
        """Drop the prepared context without closing it: for a browser that is being killed (it goes with it)."""
        self._next = None
