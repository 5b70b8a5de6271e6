"""``WebEnv`` (``agent_gym/Web-v0``): operate real web pages in a headless browser, offline."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.checks import check_float, check_int
from agent_gym.env.core import AgentEnv
from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.web.browser import BrowserError, BrowserHung, BrowserWorker
from agent_gym.envs.web.miniwob import ORACLES, miniwob_page_spec, miniwob_tasks, parse_snapshot
from agent_gym.envs.web.next_reset import ResetPredictor
from agent_gym.envs.web.page import PageSession, PageSpec, cut_snapshot
from agent_gym.envs.web.pool import BrowserPool, default_pool
from agent_gym.envs.web.prepared import PagePreparer, close_quietly
from agent_gym.envs.web.shots import ScreenshotTrail, check_screenshots, screenshot_part
from agent_gym.envs.web.site_server import site_server
from agent_gym.envs.web.sites import SITES, site_tasks, split_url
from agent_gym.parsers import ResponseParser
from agent_gym.tools import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIME_LIMIT, Tool, as_tool
from agent_gym.types import Action, EpisodeStatus, Observation

__all__ = ["WebEnv"]

SITE_VIEWPORT = (800, 600)


class WebEnv(AgentEnv):
    """Do a task on a web page in a real headless Chromium, through element refs of its accessibility snapshot.

    ## Description
    Each episode opens a fresh browser context (no cookies, storage or pages of another episode)
    on the env's browser, one Chromium process leased from a
    :class:`~agent_gym.envs.web.pool.BrowserPool` when the env is made and kept for its lifetime
    (replaced after a crash or hang), and loads the task's page from a loopback server. The tasks
    are the MiniWoB++ pages of the ``miniwob`` package, each problem fixed by the task's seed, and
    three seeded synthetic multi-page sites (:mod:`~agent_gym.envs.web.sites`: a sign-up wizard, a
    shop with search and cart, a settings area) whose state lives on their server. The model calls
    ``click(ref)``, ``type(ref, text)``, ``select(ref, option)``, ``press(key)``, ``scroll(direction)``,
    ``goto(url)`` (the task's own pages only) and ``finish(answer)``.

    The next episode's fresh context is opened in the background as soon as an episode starts (and
    when the env is made), with the page of the next reset's guessed task loaded and, when that task
    is known (:mod:`~agent_gym.envs.web.next_reset`: a hint given to :meth:`expect_reset`, as a rollout
    runner does, the generator's next draw, the same task again), started, its first snapshot read.
    A reset on exactly that start, with or without a seed or a given task (a page's start depends on
    its task alone), waits for no browser call (a *started* hit); one on that page only runs the setup
    and reads the page (a hit); any other closes it, never shown, and opens its own context (see
    :mod:`~agent_gym.envs.web.prepared`; a synthetic site gets only the context). A prepared context is
    as fresh as one opened at reset, and a hit shows what a reset that opened its own context shows.
    :attr:`prepared_reset` and :attr:`started_reset` (the current episode), :attr:`reset_stats` and the
    pool's ``stats()`` count the hits (not the info: a reset's info depends on its seed alone).

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``) with tool calls in the parser's
    format (hermes ``<tool_call>{"name": "click", "arguments": {"ref": "e7"}}</tool_call>`` by
    default); an ``<answer>`` ends the episode like ``finish``.

    ## Observation Space
    The conversation so far. The first user message is the page's instruction and its
    accessibility snapshot (YAML-like lines ``- button "Submit" [ref=e7]``, cut at
    ``max_snapshot_chars``); each action's ``tool`` message says what was done and shows the
    snapshot after it. With ``screenshots="observation"`` the newest message the env added (at
    reset the user message, after a step its last tool or user message) also has ``images``: the
    viewport as an OpenAI ``image_url`` content part beside its text, for a vision model (only
    the newest ``keep_screenshots`` messages keep theirs; ``content`` stays text, and text
    consumers never see the images; see :mod:`agent_gym.messages`). With ``screenshots=True``
    the info of ``reset`` and of every step has ``screenshot``, that part, instead.

    ## Rewards
    ``res_reward = rewards.correct * clip(raw, 0, 1)`` where ``raw`` is the raw reward (the one
    without MiniWoB++'s time decay) the page itself gave when it ended its episode: 1 solved,
    -1 (so 0) failed, partial credit in between where the page gives it; 0 when the page did not
    end its episode (``finish`` before solving, ``max_steps``). The page reports it through a
    binding installed before the agent acts (the agent cannot run script, and a page variable
    it could reach is never read). On a synthetic site ``res_reward = rewards.correct * score``,
    the site's server-side checker on the state the agent left (1 when it is the goal, else 0),
    graded at the episode's end (``finish``, ``<answer>`` or ``max_steps``). ``info["web"]`` has
    ``raw_reward``, ``page_reason``, ``site_score`` (sites), ``answer`` and ``blocked_requests``
    at the end. ``toolcall_reward`` shapes tool use as in
    :class:`~agent_gym.env.core.AgentEnv`.

    ## Episode End
    Terminated (ENV_DONE) when the page ends its episode (``end_reason`` ``"page_done"``), on
    ``finish`` (``"finish"``) or an ``<answer>`` (``"answer"``); truncated at ``max_steps``. A
    browser that crashed or hung ends the episode ENV_ERROR (``end_reason`` ``"browser_crashed"`` or
    ``"browser_hung"``, the details in ``info["web"]["browser_error"]``); the browser is killed and
    the next episode gets a new one. A browser failure during ``reset`` is retried once on a new
    browser, then raises :class:`~agent_gym.envs.web.browser.BrowserError`.

    ## Arguments
    * ``tasks``: task dicts (``page``, ``seed``); default: :func:`~agent_gym.envs.web.miniwob.miniwob_tasks`
      of ``split`` on ``pages``.
    * ``tools``: not accepted (:class:`~agent_gym.errors.ConfigError`): the tools act on each
      episode's page (see :attr:`tools_not_accepted`).
    * ``split``: ``"train"`` (default) or ``"test"`` (other instance seeds).
    * ``pages``: ``"solvable"`` (default: the pages with an oracle), ``"all"`` or page names.
    * ``sites``: add the synthetic sites' tasks of ``split`` (default True).
    * ``screenshots``: ``False`` (default), ``True`` or ``"info"`` (a screenshot in the info of each reset and
      step) or ``"observation"`` (attached to the observation's newest message, see Observation Space).
    * ``keep_screenshots``: with ``screenshots="observation"``, how many of the newest messages keep their
      screenshot (default 1; None: all, which keeps each turn's prompt a prefix of the next one's).
    * ``max_snapshot_chars`` (default 6000), ``max_type_chars`` (default 2000).
    * ``action_timeout``: seconds an action may wait for its element (default 3).
    * ``browser_timeout``: seconds any browser call may take before the browser counts as hung (default 30).
    * ``pool``: the :class:`~agent_gym.envs.web.pool.BrowserPool` (default: the process's shared one).
    * ``prepare_next``: prepare the next episode's context in the background (default True; False: every reset
      opens its context and loads its page, one context per env instead of two).
    * ``max_steps`` (default 10), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser``, ``tool_time_limit`` (callables only: the page tools run on the
      browser's own deadlines), ``max_tool_output_chars``, ``max_tool_calls_per_step``, ``render_mode``: see
      :class:`~agent_gym.env.core.AgentEnv`.

    ## Version History
    * v0: MiniWoB++ pages and three synthetic sites over loopback, one context per episode, pooled browsers.
    """

    tools_not_accepted = "the tools are click, type, select, press, scroll, goto and finish on each episode's page"

    default_system_prompt = (
        "You operate a web page in a browser to do the task you are given. The page is shown as an accessibility "
        "snapshot: one line per element with its role, its name and a ref such as [ref=e7]. Act with the tools "
        "(click, type, select, press, scroll, goto) on those refs; each result shows the page after the action. "
        "Call finish when the task is done."
    )

    def __init__(self, tasks: Sequence[Mapping[str, Any]] | None = None, tools: Sequence[Any] | None = None, *,
                 split: str = "train", pages: str | tuple[str, ...] = "solvable", sites: bool = True,
                 screenshots: bool | str = False, keep_screenshots: int | None = 1,
                 max_snapshot_chars: int = 6000, max_type_chars: int = 2000, action_timeout: float = 3.0,
                 browser_timeout: float = 30.0, pool: BrowserPool | None = None, prepare_next: bool = True,
                 max_steps: int = 10,
                 tools_in_prompt: bool = False, system_prompt: str | None = None,
                 rewards: RewardConfig | Mapping[str, float] | None = None, parser: ResponseParser | str | None = None,
                 tool_parser: str | None = None, reasoning_parser: str | None = None,
                 tool_time_limit: float | None = DEFAULT_TIME_LIMIT,
                 max_tool_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS, max_tool_calls_per_step: int = 8,
                 render_mode: str | None = None) -> None:
        check_screenshots(screenshots, keep_screenshots)
        check_int("max_snapshot_chars", max_snapshot_chars, low=200)
        check_int("max_type_chars", max_type_chars, low=1)
        check_float("action_timeout", action_timeout, low=0.1)
        check_float("browser_timeout", browser_timeout, low=1.0)
        self.split, self.pages, self.sites = split, pages, sites
        self.site: Any = None
        """The episode's synthetic site instance (None for a MiniWoB++ page)."""
        self.site_prefix = ""
        """The path of the episode's site instance on the site server (``/s/<token>/``; "" for a MiniWoB++ page)."""
        self.screenshots = screenshots
        self.screenshot_trail = ScreenshotTrail(keep_screenshots) if screenshots == "observation" else None
        """The screenshots on the episode's observation messages (``screenshots="observation"``; else None)."""
        self.max_snapshot_chars = max_snapshot_chars
        self.max_type_chars = max_type_chars
        self.action_timeout = action_timeout
        self.browser_timeout = browser_timeout
        self.pool = pool
        self.prepare_next = prepare_next
        self.reset_counts = {"prepared": 0, "cold": 0, "started": 0}
        """Resets so far that started on a prepared context (``prepared``), those of them whose task was started
        ahead (``started``), and those that opened their own context (``cold``)."""
        self.prepared_reset = False
        """Whether the current episode started on a prepared context."""
        self.started_reset = False
        """Whether the current episode's task was started ahead, with its first snapshot (a started hit)."""
        self._preparer = PagePreparer()
        self._ended: list[PageSession] = []  # released episodes' contexts, closed once the next episode started
        self._closing: list[Any] = []  # those closes under way (futures)
        self._drew_task = self._unseeded_draw = False  # the current reset drew its task (without a seed)
        self._predictor = ResetPredictor()  # the next reset's task, which the preparation starts ahead
        self.worker: BrowserWorker | None = None
        self.session: PageSession | None = None
        self.browser_failure: tuple[str, str] | None = None
        self._page_text = ""
        self._finish_answer: str | None = None
        super().__init__(tasks, tools, max_steps=max_steps, tools_in_prompt=tools_in_prompt,
                         system_prompt=system_prompt, rewards=rewards, parser=parser, tool_parser=tool_parser,
                         reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)
        self.worker = (self.pool or default_pool()).lease()  # the env's browser, started with it
        self._prepare(self.tasks[0] if self.tasks else None)

    # ------------------------------------------------------------------ tasks

    def default_tasks(self) -> Sequence[Mapping[str, Any]]:
        """The MiniWoB++ tasks of ``split`` on ``pages``, then (with ``sites``) the synthetic sites' tasks."""
        return miniwob_tasks(self.split, self.pages) + (site_tasks(self.split) if self.sites else [])

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Tasks also need an int ``seed`` and ``page`` (a MiniWoB++ page name) or ``site`` (a synthetic site)."""
        checked = super().validate_tasks(tasks)
        for i, task in enumerate(checked):
            if task.get("source") == "site":
                if task.get("site") not in SITES:
                    raise ValueError(f"tasks[{i}]: expected 'site', one of {sorted(SITES)}, got {task.get('site')!r}")
                if not isinstance(task.get("seed"), int):
                    raise ValueError(f"tasks[{i}]: expected an int 'seed', got {task.get('seed')!r}")
                continue
            page = task.get("page")
            if not isinstance(page, str) or not page.replace("-", "").isalnum():
                raise ValueError(f"tasks[{i}]: expected 'page', a MiniWoB++ page name, got {page!r}")
            if not isinstance(task.get("seed"), int):
                raise ValueError(f"tasks[{i}]: expected an int 'seed', got {task.get('seed')!r}")
        return checked

    def format_question(self, task: Mapping[str, Any]) -> str:
        """The page's instruction and its snapshot."""
        instruction = self.session.instruction if self.session is not None else str(task["question"])
        return f"Task: {instruction}\n\nThe page now:\n{self._page_text}"

    # ------------------------------------------------------------------ browser and episodes

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        assert self.worker is not None
        return self.worker.call(fn, *args, timeout=self.browser_timeout if timeout is None else timeout)

    def _drop_worker(self) -> None:
        """Give the env's browser back to the pool, its prepared and closing contexts closed first.

        A dead browser's contexts go with it (the pool kills it).
        """
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if worker.dead is None:
            self._preparer.discard(timeout=self.browser_timeout)
            self._close_ended(worker)
            for future in self._closing:
                try:
                    worker.wait(future, timeout=min(self.browser_timeout, 10.0))
                except BrowserError:
                    break
        self._preparer.forget()
        self._ended, self._closing = [], []
        (self.pool or default_pool()).give_back(worker)

    def _page_spec(self, task: Mapping[str, Any]) -> PageSpec:
        if task.get("source") == "site":
            self.site = SITES[str(task["site"])](int(task["seed"]))
            sites = site_server()
            self.site_prefix = sites.register(self.site)
            return PageSpec(origin=sites.origin, start_path=self.site_prefix, allowed_paths=(self.site_prefix,),
                            setup_script="() => ''", viewport=SITE_VIEWPORT)
        return miniwob_page_spec(task)

    def expect_reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        """Say what a coming reset will be, so its task is started ahead (an optional hint; no browser call).

        The next preparation, the one the next ``reset`` starts for the episode after it, uses it: call it
        before ``reset`` with the ``(seed, options)`` of the reset that will follow that one (a rollout runner
        does, see :mod:`agent_gym.rollout.next_reset`). A wrong hint costs the prepared page (closed, never
        shown); one whose task cannot be made out (an invalid ``options["task"]``) is ignored.

        Args:
            seed: The seed that reset will get.
            options: Its options (``task`` or ``task_index``; other keys do not change the page).
        """
        self._predictor.expect(seed, options)

    def _prepare_next(self, current: Mapping[str, Any] | None) -> None:
        """Prepare the episode after one on ``current`` (guessed once per reset; None: the guess made at reset)."""
        if current is not None:
            self._predictor.predict(current, tasks=self.tasks, np_random=self.np_random,
                                    validate=self.validate_tasks, owner=type(self).__name__,
                                    drew=self._drew_task, unseeded=self._unseeded_draw)
        guess = self._predictor.guess
        if guess is not None:
            self._prepare(guess[0], start=guess[1])

    def _prepare(self, task: Mapping[str, Any] | None, start: bool = False) -> None:
        """Open an episode's context in the background, its page (MiniWoB++) loaded and, with ``start``, started."""
        if not self.prepare_next or task is None or self.worker is None or self.worker.dead is not None:
            return
        if task.get("source") == "site":  # a site instance's address is made at reset: the context only
            spec = PageSpec(origin="", start_path="", allowed_paths=(), setup_script="() => ''",
                            viewport=SITE_VIEWPORT)
            self._preparer.prepare(self.worker, spec, action_timeout_ms=self.action_timeout * 1000, load=False)
        else:
            self._preparer.prepare(self.worker, miniwob_page_spec(task), action_timeout_ms=self.action_timeout * 1000,
                                   load=True, start=start)

    def episode_tools(self, task: dict[str, Any]) -> Sequence[Tool | Callable[..., Any]]:
        """Start the episode and return its tools.

        The episode starts on the prepared context when it fits (see :mod:`~agent_gym.envs.web.prepared`),
        else on a context opened now (on a new browser if the env's died).
        """
        self.browser_failure = None
        self._finish_answer = None
        self.site, self.site_prefix = None, ""
        spec = self._page_spec(task)
        timeout_ms = self.action_timeout * 1000
        for attempt in range(2):
            if self.worker is not None and self.worker.dead is not None:
                self._drop_worker()
            if self.worker is None:
                self.worker = (self.pool or default_pool()).lease()
            session: PageSession | None = None
            try:
                session = self._preparer.take(self.worker, spec, action_timeout_ms=timeout_ms,
                                              timeout=self.browser_timeout)
                self.prepared_reset = session is not None
                self.started_reset = session is not None and session.first_snapshot is not None
                if session is None:
                    session = PageSession(spec, action_timeout_ms=timeout_ms)
                if session.first_snapshot is not None:  # started ahead: nothing to ask the browser
                    self._page_text = cut_snapshot(session.first_snapshot, self.max_snapshot_chars)
                else:
                    self._page_text = self._call(session.begin, self.worker, self.max_snapshot_chars)
            except BrowserError:
                self._drop_worker()
                if attempt:
                    raise
                continue
            except BaseException:
                if session is not None:
                    self._close_session(session)
                raise
            if self.site is not None:
                session.instruction = self.site.instruction
            self.session = session
            break
        self._close_ended(self.worker)
        self._predictor.score(task)
        self._prepare_next(task)  # ready by the time this episode ends
        self.reset_counts["prepared" if self.prepared_reset else "cold"] += 1
        self.reset_counts["started"] += self.started_reset
        (self.pool or default_pool()).count_reset(prepared=self.prepared_reset, started=self.started_reset)
        limit = self.max_snapshot_chars + 2000
        return [as_tool(getattr(self, name), time_limit=None, max_output_chars=limit)
                for name in ("click", "type", "select", "press", "scroll", "goto", "finish")]

    @property
    def next_ready(self) -> bool:
        """Whether the next episode's context is prepared and ready now (its preparation done, nothing to wait for)."""
        return self._preparer.ready

    @property
    def reset_stats(self) -> dict[str, Any]:
        """Reset counts: ``resets``, ``prepared``, ``started`` (of the prepared: task started ahead), ``cold``.

        ``hit_rate`` is prepared/resets.
        """
        resets = self.reset_counts["prepared"] + self.reset_counts["cold"]
        return {"resets": resets, **self.reset_counts,
                "hit_rate": self.reset_counts["prepared"] / resets if resets else 0.0}

    def _close_session(self, session: PageSession) -> None:
        if self.worker is None:
            return
        try:
            self._call(session.close, self.worker, timeout=min(self.browser_timeout, 10.0))
        except Exception:  # noqa: BLE001 - a context that cannot close: its browser is replaced
            if self.worker is not None:
                self.worker.mark_dead("a context did not close")
            self._drop_worker()

    def _close_ended(self, worker: BrowserWorker | None) -> None:
        """Start closing the released episodes' contexts on ``worker`` in the background (a dead one's go with it)."""
        ended, self._ended = self._ended, []
        self._closing = [future for future in self._closing if not future.done()]
        if worker is None or worker.dead is not None:
            return
        for session in ended:
            try:
                self._closing.append(worker.submit(close_quietly, session, worker))
            except BrowserError:
                return

    def release_episode(self) -> None:
        """Release the episode's context and its site; a browser that failed is given up.

        The context is closed in the background once the next episode started (or the env closes), so that
        closing it does not compete with the next reset.
        """
        session, self.session = self.session, None
        if session is not None:
            self._ended.append(session)
        if self.site_prefix:
            site_server().unregister(self.site_prefix)
        self.site, self.site_prefix = None, ""
        if self.worker is not None and self.worker.dead is not None:
            self._drop_worker()

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        """Start an episode (see :class:`~agent_gym.env.core.AgentEnv`).

        :attr:`prepared_reset` then says whether it started on a prepared context, :attr:`started_reset` whether
        its task was started ahead (a reset whose start is exactly the one prepared takes such a page).
        """
        self._drew_task = not options or (options.get("task") is None and options.get("task_index") is None)
        self._unseeded_draw = self._drew_task and seed is None
        obs, info = super().reset(seed=seed, options=options)
        if self.screenshot_trail is not None:
            self.screenshot_trail.clear()
            obs = self.screenshot_trail.record(obs, screenshot_part(self.worker, self.session, self.browser_timeout))
        return obs, info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """One step (see :class:`~agent_gym.env.core.AgentEnv`).

        When it ends the episode and no context is prepared (the one started with the episode failed), the next
        episode's context starts being prepared in the background.
        """
        obs, reward, terminated, truncated, info = super().step(action)
        if self.screenshot_trail is not None:
            obs = self.screenshot_trail.record(obs, screenshot_part(self.worker, self.session, self.browser_timeout))
        if not self.episode_running:
            self._prepare_next(None)  # the guess made at reset, when its preparation failed
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the episode's context and the prepared one, and give the browser back to the pool."""
        super().close()
        self._drop_worker()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # processes cannot be copied: a copy needs a reset
        state.update(worker=None, session=None, pool=None, site=None, site_prefix="", _preparer=PagePreparer(),
                     _ended=[], _closing=[])
        return state

    # ------------------------------------------------------------------ tools

    def _act(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a page action, let the page's reports in, and end the episode when the page ended its own."""
        session = self.session
        if session is None or self.worker is None:
            raise RuntimeError("no page: this environment was copied or closed; call reset()")
        try:
            result = self._call(fn, *args)
            self._call(session.settle)
        except BrowserError as exc:
            kind = "browser_hung" if isinstance(exc, BrowserHung) else "browser_crashed"
            self.browser_failure = (kind, str(exc))
            if self.episode_running:
                self.end_episode(EpisodeStatus.ENV_ERROR, kind)
            raise
        if session.reports and self.episode_running:
            self.end_episode(EpisodeStatus.ENV_DONE, "page_done")
        return result

    def _page_now(self, done: str) -> str:
        assert self.session is not None
        try:
            self._page_text = self._call(self.session.snapshot, self.max_snapshot_chars)
        except BrowserError as exc:
            kind = "browser_hung" if isinstance(exc, BrowserHung) else "browser_crashed"
            self.browser_failure = (kind, str(exc))
            if self.episode_running:
                self.end_episode(EpisodeStatus.ENV_ERROR, kind)
            raise
        ended = "\nThe page ended its task." if self.session.reports else ""
        return f"{done}{ended}\n\nThe page now:\n{self._page_text}"

    def click(self, ref: str) -> str:
        """Click an element of the page.

        Args:
            ref: The element's ref from the latest snapshot (e.g. e7).

        Returns:
            What was done and the page after it.
        """
        self._act(self._session().click, ref)
        return self._page_now(f"Clicked {ref}.")

    def type(self, ref: str, text: str) -> str:
        """Replace the text of a text field with the given text.

        Args:
            ref: The field's ref from the latest snapshot.
            text: The text to put into it.

        Returns:
            What was done and the page after it.
        """
        if len(text) > self.max_type_chars:
            raise ValueError(f"text has {len(text)} characters, over the limit of {self.max_type_chars}")
        self._act(self._session().type, ref, text)
        return self._page_now(f"Typed {len(text)} characters into {ref}.")

    def select(self, ref: str, option: str) -> str:
        """Choose an option of a drop-down list.

        Args:
            ref: The list's ref (a combobox) from the latest snapshot.
            option: The option's text.

        Returns:
            What was done and the page after it.
        """
        self._act(self._session().select, ref, option[:200])
        return self._page_now(f"Selected {option[:80]!r} in {ref}.")

    def press(self, key: str) -> str:
        """Press a key on the element that has the focus.

        Args:
            key: A key name: Enter, Tab, Escape, Backspace, ArrowDown, a, Control+a, ...

        Returns:
            What was done and the page after it.
        """
        self._act(self._session().press, key)
        return self._page_now(f"Pressed {key}.")

    def scroll(self, direction: str) -> str:
        """Scroll the page by one step.

        Args:
            direction: up, down, left or right.

        Returns:
            What was done and the page after it.
        """
        self._act(self._session().scroll, direction)
        return self._page_now(f"Scrolled {direction}.")

    def goto(self, url: str) -> str:
        """Open a page of this task's site (other sites and other kinds of address are refused).

        Args:
            url: A path such as /miniwob/click-button.html, or a full address on the task's site.

        Returns:
            What was done and the page after it.
        """
        self._act(self._session().goto, url)
        return self._page_now(f"Opened {url[:200]}.")

    def finish(self, answer: str = "") -> str:
        """Say that the task is done; this ends the episode.

        Args:
            answer: An answer, for tasks that ask for one (optional).

        Returns:
            A confirmation.
        """
        self._finish_answer = answer[:2000]
        if self.episode_running:
            self.end_episode(EpisodeStatus.ENV_DONE, "finish")
        return "Finished."

    def _session(self) -> PageSession:
        if self.session is None:
            raise RuntimeError("no page: this environment was copied or closed; call reset()")
        return self.session

    # ------------------------------------------------------------------ grading

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """An ``<answer>`` ends the episode; the page's reward is paid by :meth:`grade_episode`, not here."""
        return 0.0

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """The page's raw reward, clipped to [0, 1]; a browser failure is an infrastructure failure."""
        session = self.session
        first = session.reports[0] if session is not None and session.reports else None
        raw = first[0] if first is not None else None
        info["web"] = {"raw_reward": raw, "page_reason": first[1] if first is not None else None,
                       "blocked_requests": session.blocked_count if session is not None else 0,
                       "answer": self._finish_answer}
        if self.browser_failure is not None:
            info["web"]["browser_error"] = self.browser_failure[1]
            return Grade.infra_failure(self.browser_failure[0])
        if status not in (EpisodeStatus.ENV_DONE, EpisodeStatus.MAX_STEPS):
            return Grade.ungraded()
        if self.site is not None:
            info["web"]["site_score"] = score = self.site.score()
            return Grade.scored(score)
        return Grade.scored(0.0 if raw is None else min(max(raw, 0.0), 1.0))

    def episode_info(self) -> Mapping[str, Any]:
        """``screenshot`` (an ``image_url`` content part) with ``screenshots`` True or "info" and a page open."""
        info_mode = self.screenshots is True or self.screenshots == "info"
        part = screenshot_part(self.worker, self.session, self.browser_timeout) if info_mode else None
        return {} if part is None else {"screenshot": part}

    # ------------------------------------------------------------------ oracle

    def oracle_action(self) -> str:
        """The scripted solution of the page's problem, read from its instruction and snapshot; then ``finish``."""
        if self.task is None or not self.episode_running or self.session is None:
            raise RuntimeError("oracle_action() needs a running episode; call env.reset() first")
        if self.site is not None:
            nodes = parse_snapshot(self._call(self.session.snapshot, self.max_snapshot_chars))
            path, query = split_url(self.session.url, self.site_prefix)
            return self.parser.format_calls(type(self.site).oracle(self.session.instruction, nodes, path, query))
        oracle = ORACLES.get(str(self.task.get("page")))
        if self.step_count == 0 and oracle is not None:
            nodes = parse_snapshot(self._call(self.session.snapshot, self.max_snapshot_chars))
            return self.parser.format_calls(oracle(self.session.instruction, nodes))
        return self.parser.format_calls([("finish", {})])
