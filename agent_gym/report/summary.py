"""The summary object of a report: figures per file, per env and per task field.

:class:`Report` holds one :class:`FileSummary` per input (a file or an
in-memory batch). Its figures are those of the ``agent-gym rollout`` summary
table for the same episodes (episodes, mean reward, success rate = share of
episodes with ``res_reward > 0``, mean steps, tokens sampled, env and LLM time,
statuses), plus success confidence intervals, pass@k over ``samples_per_task``
siblings (episodes sharing ``group_id``), error observations by kind, failing
tools and the time split. :meth:`Report.to_text` renders the terminal tables;
:mod:`agent_gym.report.html` the HTML page.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_gym.report.errors import ERROR_KINDS
from agent_gym.report.load import EpisodeStats, load_file, stats_from_trajectories
from agent_gym.report.stats import mean_pass_at_k, wilson_interval

__all__ = ["FileSummary", "GroupRow", "Report", "format_table", "load_report"]

_MISSING = "-"


@dataclass
class GroupRow:
    """Figures of the episodes of one env and one value of the ``by`` field.

    Attributes:
        env: Env id (``"-"`` when not recorded).
        value: Value of the ``by`` task field (``"all"`` without one).
        episodes: Episodes in the row.
        tasks: Distinct tasks (``group_id``s).
        successes: Episodes with ``res_reward > 0``.
        success_rate: ``successes / episodes``.
        ci: 95% Wilson interval of the success rate.
        mean_reward: Mean ``trajectory_reward``.
        k: Samples per task (the smallest sibling count of the row's tasks).
        pass_at_1: Mean unbiased pass@1 over tasks.
        pass_at_k: Mean unbiased pass@k over tasks with ``k`` samples.
        mean_steps: Mean ``metrics["steps"]``.
        statuses: Episodes per status.
    """

    env: str
    value: str
    episodes: int
    tasks: int
    successes: int
    success_rate: float
    ci: tuple[float, float]
    mean_reward: float
    k: int
    pass_at_1: float | None
    pass_at_k: float | None
    mean_steps: float
    statuses: dict[str, int]


def _row(env: str, value: str, episodes: Sequence[EpisodeStats]) -> GroupRow:
    n = len(episodes)
    successes = sum(1 for e in episodes if e.success)
    groups: dict[str, list[int]] = {}
    for e in episodes:
        counts = groups.setdefault(e.group, [0, 0])
        counts[0] += 1
        counts[1] += int(e.success)
    pairs = [(a, b) for a, b in groups.values()]
    k = min(a for a, _ in pairs) if pairs else 1
    return GroupRow(
        env=env,
        value=value,
        episodes=n,
        tasks=len(groups),
        successes=successes,
        success_rate=successes / n if n else 0.0,
        ci=wilson_interval(successes, n),
        mean_reward=sum(e.reward for e in episodes) / n if n else 0.0,
        k=k,
        pass_at_1=mean_pass_at_k(pairs, 1),
        pass_at_k=mean_pass_at_k(pairs, k),
        mean_steps=sum(e.steps for e in episodes) / n if n else 0.0,
        statuses=dict(sorted(Counter(e.status for e in episodes).items())),
    )


def _field_value(task: Any, by: str) -> str:
    value: Any = task
    for part in by.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    if isinstance(value, (dict, list)):
        return str(value)[:40]
    return str(value)


class FileSummary:
    """Figures of the episodes of one file or batch.

    Attributes:
        label: Name of the file or batch.
        path: The file read (None for an in-memory batch).
        episodes: One :class:`~agent_gym.report.load.EpisodeStats` per episode.
        skipped_lines: Incomplete last lines skipped while reading (interrupted writer).
    """

    def __init__(
        self, label: str, episodes: list[EpisodeStats], *, path: Path | None = None, skipped_lines: int = 0
    ) -> None:
        self.label = label
        self.path = path
        self.episodes = episodes
        self.skipped_lines = skipped_lines

    def __repr__(self) -> str:
        return f"FileSummary({self.label!r}, episodes={len(self.episodes)}, skipped_lines={self.skipped_lines})"

    def figures(self) -> dict[str, Any]:
        """The batch figures of the ``agent-gym rollout`` summary table, plus reward time and tokens/s.

        Returns:
            ``episodes``, ``mean_reward``, ``success_rate``, ``mean_steps``, ``tokens_sampled``,
            ``env_time``, ``llm_time``, ``reward_time``, ``statuses`` (as the CLI computes them)
            and ``tokens_per_llm_s`` (sampled tokens per second of LLM time; the files
            record no wall time).
        """
        eps = self.episodes
        n = len(eps)
        tokens = sum(e.tokens_sampled for e in eps)
        llm_time = sum(e.llm_time for e in eps)
        statuses: dict[str, int] = {}
        for e in eps:
            statuses[e.status] = statuses.get(e.status, 0) + 1
        return {
            "episodes": n,
            "mean_reward": sum(e.reward for e in eps) / n if n else 0.0,
            "success_rate": sum(1 for e in eps if e.success) / n if n else 0.0,
            "mean_steps": sum(e.steps for e in eps) / n if n else 0.0,
            "tokens_sampled": tokens,
            "env_time": sum(e.env_time for e in eps),
            "llm_time": llm_time,
            "reward_time": sum(e.reward_time for e in eps),
            "statuses": statuses,
            "tokens_per_llm_s": tokens / llm_time if llm_time > 0 else 0.0,
        }

    def rows(self, by: str | None = None) -> list[GroupRow]:
        """One row per env and value of the task field ``by`` (dotted for nested keys), sorted."""
        buckets: dict[tuple[str, str], list[EpisodeStats]] = {}
        for e in self.episodes:
            key = (e.env, _field_value(e.task, by) if by else "all")
            buckets.setdefault(key, []).append(e)
        return [_row(env, value, eps) for (env, value), eps in sorted(buckets.items())]

    def total(self) -> GroupRow:
        """The row of every episode together."""
        return _row("all", "all", self.episodes)

    def error_kinds(self) -> dict[str, int]:
        """Error observations by kind, every kind of :data:`ERROR_KINDS` present (0 when none)."""
        counts = dict.fromkeys(ERROR_KINDS, 0)
        for e in self.episodes:
            for kind, count in e.errors.items():
                counts[kind] = counts.get(kind, 0) + count
        return counts

    def failing_tools(self, top: int = 10) -> list[tuple[str, int]]:
        """The ``top`` tools with the most failed calls, most first."""
        counts: Counter[str] = Counter()
        for e in self.episodes:
            counts.update(e.failing_tools)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]

    def series(self, metric: str) -> list[float]:
        """Values of a histogram metric (see :data:`agent_gym.report.plots.METRICS`)."""
        eps = self.episodes
        if metric == "reward":
            return [e.reward for e in eps]
        if metric == "steps":
            return [float(e.steps) for e in eps]
        if metric == "response_tokens_per_episode":
            return [float(e.tokens_sampled) for e in eps]
        if metric == "response_tokens_per_turn":
            return [float(v) for e in eps for v in e.sampled_tokens_per_turn]
        if metric == "prompt_tokens_per_turn":
            return [float(v) for e in eps for v in e.prompt_tokens_per_turn]
        if metric == "tool_calls_per_episode":
            return [float(e.tool_calls) for e in eps]
        raise ValueError(f"metric: expected one of {list(SERIES)}, got {metric!r}")


SERIES: dict[str, str] = {
    "reward": "episode reward",
    "steps": "steps per episode",
    "response_tokens_per_turn": "response tokens per turn",
    "response_tokens_per_episode": "response tokens per episode",
    "prompt_tokens_per_turn": "prompt tokens per turn",
    "tool_calls_per_episode": "tool calls per episode",
}
"""Histogram metrics of :meth:`FileSummary.series` and their titles."""


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Render rows as an aligned text table with a header rule."""
    body = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    line = "  ".join("-" * w for w in widths)

    def render(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)

    return "\n".join([render(list(headers)), line, *(render(r) for r in body)])


def _pct(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.1%}"


def _statuses(statuses: Mapping[str, int]) -> str:
    return ", ".join(f"{k or '?'}={v}" for k, v in sorted(statuses.items())) or _MISSING


class Report:
    """Figures of one or more files (or batches) of episodes, side by side.

    Args:
        files: One summary per input.
        by: Task field splitting the rows (default: ``family`` when tasks have one).

    Example:
        >>> report = load_report("rollouts.jsonl")  # doctest: +SKIP
        >>> print(report.to_text())  # doctest: +SKIP
    """

    def __init__(self, files: Sequence[FileSummary], *, by: str | None = None) -> None:
        if not files:
            raise ValueError("Report: expected at least one file or batch, got none")
        self.files = list(files)
        if by is None and any(isinstance(e.task, Mapping) and "family" in e.task
                              for f in self.files for e in f.episodes):
            by = "family"
        self.by = by

    def __repr__(self) -> str:
        return f"Report({[f.label for f in self.files]}, by={self.by!r})"

    @classmethod
    def load(cls, paths: Sequence[str | os.PathLike[str]], *, by: str | None = None) -> Report:
        """Read trajectory files (``.jsonl`` / ``.parquet``, interrupted ones too)."""
        files = []
        for p in paths:
            loaded = load_file(p)
            files.append(FileSummary(loaded.path.name, loaded.episodes, path=loaded.path,
                                     skipped_lines=loaded.skipped_lines))
        labels = [f.label for f in files]
        if len(set(labels)) < len(labels):  # same names in different folders: use the paths
            for f in files:
                f.label = str(f.path)
        return cls(files, by=by)

    @classmethod
    def from_trajectories(cls, batches: Mapping[str, Iterable[Any]] | Iterable[Any], *, by: str | None = None,
                          label: str = "batch") -> Report:
        """Report on in-memory trajectories: one batch, or ``{label: trajectories}`` for several."""
        if isinstance(batches, Mapping):
            files = [FileSummary(str(name), stats_from_trajectories(trajs, str(name)))
                     for name, trajs in batches.items()]
        else:
            files = [FileSummary(label, stats_from_trajectories(batches, label))]
        return cls(files, by=by)

    # ------------------------------------------------------------------ tables
    def overview_rows(self) -> tuple[list[str], list[list[str]]]:
        """The CLI summary figures, one column per file: ``(headers, rows)``."""
        figures = [f.figures() for f in self.files]
        totals = [f.total() for f in self.files]

        def time_cell(fig: Mapping[str, Any]) -> str:
            return f"{fig['env_time']:.2f}s / {fig['llm_time']:.2f}s / {fig['reward_time']:.2f}s"

        rows = [
            ["episodes", *(str(fig["episodes"]) for fig in figures)],
            ["mean reward", *(f"{fig['mean_reward']:.4f}" for fig in figures)],
            ["success rate", *(f"{fig['success_rate']:.1%}" for fig in figures)],
            ["success 95% CI", *(f"{t.ci[0]:.1%} - {t.ci[1]:.1%}" for t in totals)],
            ["pass@k (k)", *(f"{_pct(t.pass_at_k)} ({t.k})" for t in totals)],
            ["mean steps", *(f"{fig['mean_steps']:.2f}" for fig in figures)],
            ["tokens sampled", *(str(fig["tokens_sampled"]) for fig in figures)],
            ["tokens/s of LLM time", *(f"{fig['tokens_per_llm_s']:.1f}" for fig in figures)],
            ["time env / llm / reward", *(time_cell(fig) for fig in figures)],
            ["statuses", *(_statuses(fig["statuses"]) for fig in figures)],
            ["skipped lines", *(str(f.skipped_lines) for f in self.files)],
        ]
        return ["", *(f.label for f in self.files)], rows

    def group_rows(self) -> tuple[list[str], list[list[str]]]:
        """Per file, env and ``by`` value: ``(headers, rows)``."""
        headers = ["file", "env", self.by or "group", "episodes", "tasks", "success", "95% CI", "mean reward",
                   "pass@1", "pass@k (k)", "mean steps", "statuses"]
        rows = []
        for f in self.files:
            for r in f.rows(self.by):
                rows.append([f.label, r.env, r.value, r.episodes, r.tasks, f"{r.success_rate:.1%}",
                             f"{r.ci[0]:.1%} - {r.ci[1]:.1%}", f"{r.mean_reward:.4f}", _pct(r.pass_at_1),
                             f"{_pct(r.pass_at_k)} ({r.k})", f"{r.mean_steps:.2f}", _statuses(r.statuses)])
        return headers, rows

    def error_rows(self) -> tuple[list[str], list[list[str]]]:
        """Error observations by kind (and tool calls per episode), one column per file."""
        kinds = [f.error_kinds() for f in self.files]
        names = list(dict.fromkeys(k for counts in kinds for k in counts))
        rows = [["tool calls / episode",
                 *(f"{sum(e.tool_calls for e in f.episodes) / max(len(f.episodes), 1):.2f}" for f in self.files)]]
        rows += [[name, *(str(counts.get(name, 0)) for counts in kinds)] for name in names]
        return ["error observations", *(f.label for f in self.files)], rows

    def failing_tool_rows(self, top: int = 10) -> tuple[list[str], list[list[str]]]:
        """The most common failing tools per file."""
        rows = [[f.label, name, str(count)] for f in self.files for name, count in f.failing_tools(top)]
        return ["file", "failing tool", "failed calls"], rows

    def time_rows(self) -> tuple[list[str], list[list[str]]]:
        """Time split between env, LLM and reward, and tokens per LLM second."""
        rows = []
        for f in self.files:
            fig = f.figures()
            busy = fig["env_time"] + fig["llm_time"] + fig["reward_time"]

            def share(x: float, busy: float = busy) -> str:
                return f"{x / busy:.0%}" if busy > 0 else _MISSING

            rows.append([f.label, f"{fig['env_time']:.2f}s ({share(fig['env_time'])})",
                         f"{fig['llm_time']:.2f}s ({share(fig['llm_time'])})",
                         f"{fig['reward_time']:.2f}s ({share(fig['reward_time'])})",
                         f"{fig['tokens_per_llm_s']:.1f}"])
        return ["file", "env time", "llm time", "reward time", "tokens/s (LLM)"], rows

    def to_text(self) -> str:
        """All tables, as the terminal shows them."""
        sections = [
            ("Summary", self.overview_rows()),
            (f"By env and {self.by}" if self.by else "By env", self.group_rows()),
            ("Tool use", self.error_rows()),
            ("Most common failing tools", self.failing_tool_rows()),
            ("Time", self.time_rows()),
        ]
        parts = []
        for title, (headers, rows) in sections:
            if not rows:
                continue
            parts.append(f"{title}\n{format_table(headers, rows)}")
        return "\n\n".join(parts)

    def to_html(self, *, dpi: int = 80) -> str:
        """The self-contained HTML page (needs matplotlib, the ``report`` extra)."""
        from agent_gym.report.html import render_html

        return render_html(self, dpi=dpi)

    def write_html(self, path: str | os.PathLike[str], *, dpi: int = 80) -> Path:
        """Write :meth:`to_html` to ``path`` and return the path."""
        path = Path(path)
        text = self.to_html(dpi=dpi)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path


def load_report(*paths: str | os.PathLike[str], by: str | None = None) -> Report:
    """Read one or more trajectory files into a :class:`Report` (see :meth:`Report.load`)."""
    flat: list[Any] = []
    for p in paths:
        flat.extend(p if isinstance(p, (list, tuple)) else [p])
    return Report.load(flat, by=by)
