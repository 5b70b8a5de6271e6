"""The MiniWoB++ tasks of Web-v0: the pages of the ``miniwob`` package, their setup, and scripted oracles.

A task is a page and an instance seed: the page's problem generator draws from ``Math.random``,
seeded with the task's seed before :js:`core.startEpisodeReal()`, so a task is the same problem
every time. The setup (:data:`SETUP_SCRIPT`) lifts MiniWoB++'s 10-second episode limit (the reward
is the raw reward, not the time-decayed one) and wraps the page's own :js:`core.endEpisode` so that
every end of episode the page decides is reported to Python at once, through a binding installed
before the agent acts (:mod:`agent_gym.envs.web.page`).

:data:`SOLVABLE_PAGES` are the pages whose problems the tools solve, each with an oracle
(:data:`ORACLES`) that reads the page's instruction and accessibility snapshot, never the reward.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_gym.envs.web.page import PageSpec
from agent_gym.envs.web.server import static_server

__all__ = [
    "MINIWOB_VIEWPORT",
    "ORACLES",
    "RESTART_CLOCK_SCRIPT",
    "SETUP_SCRIPT",
    "SOLVABLE_PAGES",
    "SnapshotNode",
    "all_pages",
    "miniwob_page_spec",
    "miniwob_root",
    "miniwob_tasks",
    "parse_snapshot",
]

SETUP_SCRIPT = """(seed) => {
  core.EPISODE_MAX_TIME = 2000000000;
  if (!core.agentGymWrapped) {
    const end = core.endEpisode;
    const report = window.__agentGymEpisodeEnd;
    core.endEpisode = function (reward, timeProportional, reason) {
      if (core.EP_TIMER !== null) { report(Number(reward), reason === undefined ? '' : String(reason)); }
      return end.apply(this, arguments);
    };
    core.agentGymWrapped = true;
  }
  Math.seedrandom(String(seed));
  core.startEpisodeReal();
  const query = document.getElementById('query');
  return query ? query.innerText : '';
}"""
"""Run on a loaded MiniWoB++ page before the agent acts: returns the instruction (``#query``)."""

RESTART_CLOCK_SCRIPT = """() => {
  if (core.EP_TIMER === null) { return; }
  clearTimeout(core.EP_TIMER);
  core.ept0 = new Date().getTime();
  core.countdownTimer(core.EPISODE_MAX_TIME);
  core.EP_TIMER = setTimeout(function () { core.endEpisode(-1, false, 'timed out'); }, core.EPISODE_MAX_TIME);
}"""
"""Run when an episode takes a page whose problem was started ahead of it: the clock part of
:js:`core.startEpisodeReal()` again (start time, countdown, end-of-episode timer), so the episode's time
counts from its reset; a page that already ended its episode is left alone."""

HIDDEN = ("#reward-display", "#sync-task-cover")
"""MiniWoB++'s score display and start cover: hidden, so the snapshot shows the task only."""


@functools.cache
def miniwob_root() -> Path:
    """The folder of the ``miniwob`` package's pages (``core/``, ``common/``, ``miniwob/``), found once per process.

    Raises:
        MissingExtraError: Without the ``miniwob`` package.
    """
    from agent_gym.errors import MissingExtraError

    try:
        import miniwob
    except ImportError as exc:
        raise MissingExtraError("miniwob", "web") from exc
    return Path(miniwob.__file__).resolve().parent / "html"


MINIWOB_VIEWPORT = (400, 300)
"""The browser viewport of a MiniWoB++ page (its task area is 160 x 210 pixels)."""


def miniwob_page_spec(task: dict[str, Any] | Any) -> PageSpec:
    """How a MiniWoB++ task's page is opened, started (its instance seed) and read, served from loopback."""
    server = static_server(miniwob_root())
    page = str(task["page"])
    return PageSpec(origin=server.origin, start_path=f"/miniwob/{page}.html",
                    allowed_paths=(f"/miniwob/{page}.html", "/core/", "/common/"), setup_script=SETUP_SCRIPT,
                    setup_arg=int(task["seed"]), snapshot_root="body", hide_selectors=HIDDEN,
                    restart_script=RESTART_CLOCK_SCRIPT, viewport=MINIWOB_VIEWPORT)


def all_pages() -> list[str]:
    """Every MiniWoB++ page the package ships (names without ``.html``)."""
    return sorted(p.stem for p in (miniwob_root() / "miniwob").glob("*.html"))


class SnapshotNode:
    """One line of an accessibility snapshot: ``role``, ``name`` (may be ""), ``ref`` (may be ""), ``checked``."""

    __slots__ = ("checked", "name", "ref", "role")

    def __init__(self, role: str, name: str, ref: str, checked: bool = False) -> None:
        self.role, self.name, self.ref, self.checked = role, name, ref, checked

    def __repr__(self) -> str:
        return f"SnapshotNode({self.role!r}, {self.name!r}, {self.ref!r})"


_LINE = re.compile(r'^\s*- (\w+)(?: "((?:[^"\\]|\\.)*)")?(.*)$')
_REF_IN = re.compile(r"\[ref=([\w]+)\]")


def parse_snapshot(text: str) -> list[SnapshotNode]:
    """The nodes of a snapshot with their roles, names and refs, in document order."""
    nodes = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        ref = _REF_IN.search(match.group(3) or "")
        name = (match.group(2) or "").replace('\\"', '"')
        rest = match.group(3) or ""
        nodes.append(SnapshotNode(match.group(1), name, ref.group(1) if ref else "", "[checked]" in rest))
    return nodes


Calls = list[tuple[str, dict[str, Any]]]


def _ref(nodes: list[SnapshotNode], role: str, name: str | None = None, index: int = 0) -> str:
    found = [n.ref for n in nodes if n.role == role and n.ref and (name is None or n.name == name)]
    if len(found) <= index:
        raise LookupError(f"no {role} {name!r} in the snapshot")
    return found[index]


def _quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


def _click_named_button(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    return [("click", {"ref": _ref(nodes, "button", _quoted(instruction)[0])})]


def _click_test(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    return [("click", {"ref": _ref(nodes, "button")})]


def _click_test_2(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    name = re.search(r"Click button (\w+)", instruction)
    if name is None:
        raise LookupError("no button named in the instruction")
    return [("click", {"ref": _ref(nodes, "button", name.group(1))})]


def _focus_text(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    ordinal = re.search(r"(\d+)(?:st|nd|rd|th) input", instruction)
    index = int(ordinal.group(1)) - 1 if ordinal else 0
    return [("click", {"ref": _ref(nodes, "textbox", index=index)})]


def _enter_text(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    text = _quoted(instruction)[0]
    if "upper case" in instruction:
        text = text.upper()
    elif "lower case" in instruction:
        text = text.lower()
    return [("type", {"ref": _ref(nodes, "textbox"), "text": text}),
            ("click", {"ref": _ref(nodes, "button", "Submit")})]


def _enter_password(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    password = _quoted(instruction)[0]
    return [("type", {"ref": _ref(nodes, "textbox", index=0), "text": password}),
            ("type", {"ref": _ref(nodes, "textbox", index=1), "text": password}),
            ("click", {"ref": _ref(nodes, "button", "Submit")})]


def _login_user(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    username, password = _quoted(instruction)[:2]
    return [("type", {"ref": _ref(nodes, "textbox", index=0), "text": username}),
            ("type", {"ref": _ref(nodes, "textbox", index=1), "text": password}),
            ("click", {"ref": _ref(nodes, "button", "Login")})]


def _click_option(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    name = re.search(r"Select (.*) and click Submit", instruction)
    if name is None:
        raise LookupError("no option named in the instruction")
    return [("click", {"ref": _ref(nodes, "radio", name.group(1))}),
            ("click", {"ref": _ref(nodes, "button", "Submit")})]


def _click_checkboxes(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    match = re.search(r"Select (.*) and click Submit", instruction)
    if match is None:
        raise LookupError("no choice named in the instruction")
    wanted = [] if match.group(1) == "nothing" else [w.strip() for w in match.group(1).split(",") if w.strip()]
    calls: Calls = [("click", {"ref": _ref(nodes, "checkbox", name)}) for name in wanted]
    return [*calls, ("click", {"ref": _ref(nodes, "button", "Submit")})]


def _choose_list(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    match = re.search(r"Select (.*) from the list and click Submit", instruction)
    if match is None:
        raise LookupError("no item named in the instruction")
    return [("select", {"ref": _ref(nodes, "combobox"), "option": match.group(1)}),
            ("click", {"ref": _ref(nodes, "button", "Submit")})]


def _click_dialog(instruction: str, nodes: list[SnapshotNode]) -> Calls:
    return [("click", {"ref": _ref(nodes, "button", "Close")})]


ORACLES: dict[str, Callable[[str, list[SnapshotNode]], Calls]] = {
    "click-button": _click_named_button,
    "click-test": _click_test,
    "click-test-2": _click_test_2,
    "focus-text": _focus_text,
    "focus-text-2": _focus_text,
    "enter-text": _enter_text,
    "enter-text-2": _enter_text,
    "enter-password": _enter_password,
    "login-user": _login_user,
    "click-option": _click_option,
    "click-checkboxes": _click_checkboxes,
    "choose-list": _choose_list,
    "click-dialog": _click_dialog,
}
"""Per solvable page: ``(instruction, snapshot nodes) -> tool calls`` that solve its problem in one message."""

SOLVABLE_PAGES: tuple[str, ...] = tuple(ORACLES)
"""The MiniWoB++ pages that Web-v0's tools solve (each has an oracle in :data:`ORACLES`)."""

SPLIT_INSTANCES = {"train": range(0, 48), "test": range(1000, 1016)}
"""Instance seeds of each split: the test split's problems never appear in training."""


def miniwob_tasks(split: str = "train", pages: str | tuple[str, ...] = "solvable") -> list[dict[str, Any]]:
    """The tasks of ``split`` (``"train"``, ``"test"``) on ``pages`` (``"solvable"``, ``"all"`` or names).

    Each task is ``{"id": "<page>/<seed>", "question", "ground_truth": "", "source": "miniwob",
    "page", "seed"}``; its instruction is read from the page at reset.

    Raises:
        ValueError: For an unknown split or page.
    """
    if split not in SPLIT_INSTANCES:
        raise ValueError(f"split: expected one of {sorted(SPLIT_INSTANCES)}, got {split!r}")
    if pages == "solvable":
        names: tuple[str, ...] = SOLVABLE_PAGES
    elif pages == "all":
        names = tuple(all_pages())
    else:
        names = tuple(pages)
        known = set(all_pages())
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"pages: no MiniWoB++ page {unknown[0]!r}")
    return [{"id": f"{name}/{seed}", "question": f"MiniWoB++ task {name} (instance {seed})", "ground_truth": "",
             "source": "miniwob", "page": name, "seed": seed}
            for name in names for seed in SPLIT_INSTANCES[split]]
