"""One episode's browser state: :class:`PageSession`, a fresh context and page on a leased browser.

Every method here is a coroutine run on the browser's own loop (see
:meth:`~agent_gym.envs.web.browser.BrowserWorker.call`). The context is fresh for each episode
(no cookies, storage or pages of another), blocks every request that does not go to the task's
own pages on the loopback server, blocks service workers and downloads, and carries one binding,
installed before the agent acts, through which the page reports its episode's end and raw reward
(:attr:`PageSession.reports`): the agent clicks and types, it cannot run script, so it cannot
call or replace it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ActionError", "PageSession", "PageSpec", "SCROLL_DIRECTIONS", "cut_snapshot"]

SCROLL_DIRECTIONS = {"up": (0, -300), "down": (0, 300), "left": (-300, 0), "right": (300, 0)}
"""Pixels one ``scroll(direction)`` moves the page."""

_REF = re.compile(r"^(?:f\d{1,4})?e\d{1,6}$")
_KEY = re.compile(r"^(?:(?:Control|Shift|Alt|Meta)\+){0,3}(?:[A-Za-z0-9]{1,12}|[^\s])$")
_REPORT_BINDING = "__agentGymEpisodeEnd"
_VISIBLE_POINT = """(e) => {
  const r = e.getBoundingClientRect();
  for (const fy of [0.5, 0.25, 0.75, 0.1, 0.9]) {
    for (const fx of [0.5, 0.25, 0.75, 0.1, 0.9]) {
      const hit = document.elementFromPoint(r.left + r.width * fx, r.top + r.height * fy);
      if (hit && (hit === e || e.contains(hit))) { return {x: r.width * fx, y: r.height * fy}; }
    }
  }
  return null;
}"""


def cut_snapshot(text: str, max_chars: int) -> str:
    """``text`` (a snapshot) cut to ``max_chars`` characters, with a line saying so when it was cut."""
    if len(text) > max_chars:
        return text[:max_chars] + f"\n[snapshot cut at {max_chars} characters]"
    return text


class ActionError(Exception):
    """An action the page refused (a missing ref, a URL out of bounds, a value not offered): the agent's doing."""


@dataclass(frozen=True)
class PageSpec:
    """Where an episode's page lives and what it may reach.

    Attributes:
        origin: ``http://127.0.0.1:<port>`` of the loopback server.
        start_path: The page the episode opens (a path on ``origin``).
        allowed_paths: Path prefixes on ``origin`` the page may load and ``goto`` may open.
        setup_script: A function expression evaluated (with ``setup_arg``) once the page loaded, before the
            agent acts; it returns the task's instruction.
        setup_arg: The argument of ``setup_script`` (e.g. the episode's seed).
        snapshot_root: CSS selector of the part of the page the snapshot shows.
        hide_selectors: Elements hidden from the page (e.g. a score display).
        viewport: The page's size in pixels.
        restart_script: A function expression run on a page whose task was started ahead of its episode
            (:meth:`PageSession.start_ahead`) when the episode takes it: it restarts the task's clock, so the
            episode has the time a task started at reset has ("": the task has no clock).
    """

    origin: str
    start_path: str
    allowed_paths: tuple[str, ...]
    setup_script: str
    setup_arg: Any = None
    snapshot_root: str = "body"
    hide_selectors: tuple[str, ...] = ()
    viewport: tuple[int, int] = (400, 400)
    restart_script: str = ""


@dataclass
class PageSession:
    """An episode's context and page on a browser (make with :meth:`open`, end with :meth:`close`).

    Attributes:
        spec: Where the page lives.
        action_timeout_ms: Milliseconds one click/type/select may wait for its element.
        reports: ``(raw_reward, reason)`` of each end of episode the page reported, in order.
        blocked: Requests refused by the filter (their URLs, first 20).
        instruction: What the setup script returned.
        loaded: Whether the start page is loaded (the task may start).
        first_snapshot: The whole first snapshot, read when the task was started ahead of its episode
            (:meth:`start_ahead`); None otherwise.
    """

    spec: PageSpec
    action_timeout_ms: float = 3000.0
    reports: list[tuple[float, str]] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    blocked_count: int = 0
    instruction: str = ""
    loaded: bool = False
    first_snapshot: str | None = None
    context: Any = None
    page: Any = None

    # ------------------------------------------------------------------ setup and end

    def allows(self, url: str) -> bool:
        """Whether ``url`` is one of the task's own pages (same origin, an allowed path)."""
        try:
            parts = urlsplit(url)
        except ValueError:
            return False
        if f"{parts.scheme}://{parts.netloc}" != self.spec.origin or parts.username or parts.password:
            return False
        path = parts.path or "/"
        if ".." in path.split("/") or "%2e" in path.lower() or "\\" in path:
            return False
        return any(path.startswith(prefix) for prefix in self.spec.allowed_paths)

    async def open(self, worker: Any) -> str:
        """Open the episode's context and page on ``worker``, load the task and run its setup.

        Returns:
            The task's instruction (what the setup script returned).
        """
        await self.open_blank(worker)
        await self.load()
        return await self.start()

    async def open_blank(self, worker: Any, *, prepared: bool = False) -> None:
        """Open a fresh context on ``worker`` with an empty page: filter and binding installed, nothing loaded.

        Args:
            worker: The browser.
            prepared: Opened in advance: counted in ``worker.prepared`` until an episode takes it.
        """
        width, height = self.spec.viewport
        self.context = await worker.open_context(viewport={"width": width, "height": height},
                                                 service_workers="block", accept_downloads=False,
                                                 java_script_enabled=True)
        if prepared:
            worker.prepared.add(self.context)
        self.context.set_default_timeout(self.action_timeout_ms)
        await self.context.route("**/*", self._filter)
        await self.context.expose_binding(_REPORT_BINDING, self._report)
        self.page = await self.context.new_page()

    async def load(self) -> None:
        """Load the start page and hide what the spec hides; the task itself starts with :meth:`start`."""
        await self.page.goto(self.spec.origin + self.spec.start_path, wait_until="load", timeout=30000)
        await self._hide()
        self.loaded = True

    async def warm(self) -> None:
        """Get the snapshot machinery ready before the episode: Playwright's page script in place and run once.

        The snapshot taken here is the plain one, which gives elements no refs, so the episode's first snapshot
        numbers its refs as on a page that was never read (a test compares the two).
        """
        await self.page.locator(self.spec.snapshot_root).first.aria_snapshot(timeout=10000)

    async def start(self) -> str:
        """Run the setup script on the loaded page (for a MiniWoB++ page: start the seeded problem).

        Returns:
            The task's instruction (what the setup script returned).
        """
        self.instruction = str(await self.page.evaluate(self.spec.setup_script, self.spec.setup_arg) or "")
        return self.instruction

    async def start_ahead(self) -> None:
        """Start the task (:meth:`start`) and read the first snapshot (whole, in :attr:`first_snapshot`) now.

        For a page prepared for an episode whose task and setup argument are known in advance: the episode
        then takes the instruction and the first snapshot as they are, and :meth:`restart_clock` gives it the
        task's whole time.
        """
        await self.start()
        self.first_snapshot = await self._read()

    async def restart_clock(self) -> None:
        """Run the spec's ``restart_script`` (see :class:`PageSpec`) on the page, if it has one."""
        if self.spec.restart_script:
            await self.page.evaluate(self.spec.restart_script)

    async def begin(self, worker: Any, max_chars: int) -> str:
        """Start the episode: open the context and load the page where not done yet, run the setup, read the page.

        A session made ready in advance (:mod:`~agent_gym.envs.web.prepared`) only runs the setup and reads the
        page; a new one opens, loads, sets up and reads, in the order :meth:`open` does.

        Returns:
            The first snapshot (see :meth:`snapshot`); the instruction is in :attr:`instruction`.
        """
        if self.context is None:
            await self.open_blank(worker)
        if not self.loaded:
            await self.load()
        await self.start()
        return await self.snapshot(max_chars)

    async def _set_up(self) -> str:
        """Hide what the spec hides and run the setup script on the page just loaded; returns the instruction."""
        await self._hide()
        return await self.start()

    async def _hide(self) -> None:
        if self.spec.hide_selectors:
            rule = ", ".join(self.spec.hide_selectors) + " { display: none !important; }"
            await self.page.add_style_tag(content=rule)

    async def close(self, worker: Any) -> None:
        """Close the episode's context (its page with it)."""
        context, self.context, self.page = self.context, None, None
        if context is not None:
            await worker.close_context(context)

    async def _filter(self, route: Any) -> None:
        url = route.request.url
        if self.allows(url):
            await route.continue_()
            return
        self.blocked_count += 1
        if len(self.blocked) < 20:
            self.blocked.append(url[:200])
        await route.abort("blockedbyclient")

    def _report(self, source: Any, reward: Any, reason: Any = None) -> None:
        try:
            value = float(reward)
        except (TypeError, ValueError):
            value = 0.0
        self.reports.append((value, str(reason)[:200] if reason is not None else ""))

    async def settle(self) -> None:
        """Let the page's pending reports reach Python (one round trip to the page, then the loop's turn)."""
        if self.page is not None:
            await self.page.evaluate("0")
        for _ in range(3):
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ reading

    async def snapshot(self, max_chars: int) -> str:
        """The accessibility snapshot of the page (with element refs), cut to ``max_chars`` (:func:`cut_snapshot`)."""
        return cut_snapshot(await self._read(), max_chars)

    async def _read(self) -> str:
        text: str = await self.page.locator(self.spec.snapshot_root).first.aria_snapshot(mode="ai", timeout=10000)
        return text

    async def screenshot(self) -> bytes:
        """A PNG of the viewport."""
        return await self.page.screenshot(type="png", timeout=10000)

    @property
    def url(self) -> str:
        """The page's address now ("" without a page)."""
        return "" if self.page is None else str(self.page.url)

    # ------------------------------------------------------------------ actions

    def _element(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not _REF.match(ref):
            raise ActionError(f"{str(ref)[:40]!r} is not an element ref (refs look like e12, from the snapshot)")
        return self.page.locator(f"aria-ref={ref}")

    async def _existing(self, ref: Any) -> Any:
        element = self._element(ref)
        if await element.count() == 0:
            raise ActionError(f"no element with ref {ref} on the page now (take refs from the latest snapshot)")
        return element

    async def _act(self, action: Any) -> None:
        from playwright.async_api import Error as PlaywrightError

        try:
            await action
        except PlaywrightError as exc:
            if "has been closed" in str(exc) or "crashed" in str(exc):
                raise
            raise ActionError(str(exc).splitlines()[0][:300]) from None

    async def click(self, ref: str) -> None:
        """Click the element ``ref`` where it shows: its center, or another point of it when that is covered."""
        element = await self._existing(ref)
        await self._act(element.scroll_into_view_if_needed(timeout=self.action_timeout_ms))
        point = await element.evaluate(_VISIBLE_POINT)
        if point is None:
            await self._act(element.click(timeout=self.action_timeout_ms))
        else:
            await self._act(element.click(position=point, timeout=self.action_timeout_ms))

    async def type(self, ref: str, text: str) -> None:
        """Replace the text of the field ``ref`` with ``text``."""
        element = await self._existing(ref)
        await self._act(element.fill(text, timeout=self.action_timeout_ms))

    async def select(self, ref: str, option: str) -> str:
        """Choose ``option`` (its label, else its value) in the list ``ref``; returns what was chosen."""
        element = await self._existing(ref)
        labels: Sequence[str] = await element.evaluate(
            "e => e.tagName === 'SELECT' ? Array.from(e.options).map(o => o.label) : null")
        if labels is None:
            raise ActionError(f"{ref} is not a list of options")
        if option in labels:
            await self._act(element.select_option(label=option, timeout=self.action_timeout_ms))
        else:
            values: Sequence[str] = await element.evaluate("e => Array.from(e.options).map(o => o.value)")
            if option not in values:
                shown = ", ".join(repr(label) for label in list(labels)[:20])
                raise ActionError(f"{ref} has no option {option[:80]!r} (options: {shown})")
            await self._act(element.select_option(value=option, timeout=self.action_timeout_ms))
        return option

    async def press(self, key: str) -> None:
        """Press ``key`` (a key name such as ``Enter``, ``ArrowDown``, ``a``, ``Control+a``) on the focused element."""
        if not isinstance(key, str) or not _KEY.match(key):
            raise ActionError(f"{str(key)[:40]!r} is not a key name (e.g. Enter, Tab, ArrowDown, a, Control+a)")
        await self._act(self.page.keyboard.press(key))

    async def scroll(self, direction: str) -> None:
        """Scroll the page one step ``up``, ``down``, ``left`` or ``right``."""
        if direction not in SCROLL_DIRECTIONS:
            raise ActionError(f"direction: expected one of {sorted(SCROLL_DIRECTIONS)}, got {str(direction)[:40]!r}")
        dx, dy = SCROLL_DIRECTIONS[direction]
        await self.page.evaluate("([dx, dy]) => window.scrollBy(dx, dy)", [dx, dy])

    async def goto(self, url: str) -> None:
        """Open ``url``, one of the task's own pages (a path or a full address on its origin), and set it up again.

        The setup script runs on the page loaded (for a MiniWoB++ page: the same problem again, from its start).
        """
        if not isinstance(url, str) or not url or len(url) > 2000:
            raise ActionError("url: expected a non-empty address of at most 2000 characters")
        full = self.spec.origin + url if url.startswith("/") and not url.startswith("//") else url
        if not self.allows(full):
            raise ActionError(f"{url[:120]!r} is not one of this task's pages: goto opens only addresses under "
                              f"{self.spec.origin}{self.spec.allowed_paths[0]}")
        await self._act(self.page.goto(full, wait_until="load", timeout=30000))
        await self._set_up()
