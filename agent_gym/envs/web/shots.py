"""Web-v0's screenshots: where they go (``screenshots``) and which observation messages keep theirs.

``screenshots=True`` (or ``"info"``) puts the viewport into the info of ``reset`` and of every step;
``screenshots="observation"`` attaches it to the observation itself: the newest message the env
added (the task's user message at reset, the step's last tool or user message after) carries it
in its ``images`` key, an OpenAI ``image_url`` content part beside the text (see
:mod:`agent_gym.messages`). Only the newest ``keep_screenshots`` such messages keep their image,
so a long episode does not send every screenshot again with each turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_gym.envs.web.browser import BrowserError, BrowserWorker
from agent_gym.messages import IMAGES_KEY, image_part
from agent_gym.types import Observation

__all__ = ["SCREENSHOT_MODES", "ScreenshotTrail", "check_screenshots", "screenshot_part"]

SCREENSHOT_MODES: tuple[Any, ...] = (False, True, "info", "observation")
"""The values of Web-v0's ``screenshots``: none, the info (``True`` or ``"info"``), or the observation."""


def check_screenshots(screenshots: Any, keep: Any) -> None:
    """Check Web-v0's ``screenshots`` and ``keep_screenshots`` arguments.

    Raises:
        ValueError: ``screenshots`` is not one of :data:`SCREENSHOT_MODES`, or ``keep_screenshots``
            is neither None nor an int >= 1.
    """
    if not any(screenshots is mode or (isinstance(mode, str) and screenshots == mode) for mode in SCREENSHOT_MODES):
        raise ValueError(f"screenshots: expected False, True, 'info' or 'observation', got {screenshots!r}")
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise ValueError(f"keep_screenshots: expected None or an int >= 1, got {keep!r}")


def screenshot_part(worker: BrowserWorker | None, session: Any, timeout: float) -> dict[str, Any] | None:
    """The viewport of ``session``'s page as an ``image_url`` content part.

    None without a page, on a dead browser, or when the screenshot failed (the episode goes on; a
    browser that died is noticed by the next action).
    """
    if session is None or worker is None or worker.dead is not None:
        return None
    try:
        return image_part(worker.call(session.screenshot, timeout=timeout))
    except BrowserError:
        return None


class ScreenshotTrail:
    """The screenshots of an episode's observation messages, by message index; the newest ``keep`` are shown.

    Args:
        keep: How many of the newest messages with a screenshot keep it (None: all).
    """

    def __init__(self, keep: int | None = 1) -> None:
        self.keep = keep
        self.parts: dict[int, dict[str, Any]] = {}

    def clear(self) -> None:
        """Forget the episode's screenshots (a new episode starts)."""
        self.parts.clear()

    def record(self, obs: Sequence[Any], part: dict[str, Any] | None) -> Observation:
        """Give the newest message of ``obs`` the screenshot ``part`` and return ``obs`` with the kept images.

        Nothing is recorded without a part or when the newest message is the assistant's (the step
        added no message of the env's).
        """
        if part is not None and obs and obs[-1].get("role") != "assistant":
            self.parts[len(obs) - 1] = part
            if self.keep is not None:
                for index in sorted(self.parts)[: -self.keep]:
                    del self.parts[index]
        return self.attach(obs)

    def attach(self, obs: Sequence[Any]) -> Observation:
        """Copies of the messages of ``obs``, those with a kept screenshot with ``images``."""
        out = []
        for index, message in enumerate(obs):
            message = dict(message)
            part = self.parts.get(index)
            if part is not None:
                message[IMAGES_KEY] = [dict(part, image_url=dict(part["image_url"]))]
            out.append(message)
        return tuple(out)  # type: ignore[arg-type]
