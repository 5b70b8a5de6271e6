"""The summary object of a report: figures per file, per env and per task field.

:class:`Report` holds one :class:`~agent_gym.report.file_summary.FileSummary`
per input (a file or an in-memory batch). Its figures are those of the ``agent-gym rollout`` summary
table for the same episodes (episodes, mean reward, success rate = share of
episodes with ``res_reward > 0``, mean steps, tokens sampled, env and LLM time,
statuses), plus success confidence intervals, pass@k over ``samples_per_task``
siblings (episodes sharing ``group_id``), error observations by kind, failing
tools and the time split, and the counters of a dynamic sampling filter when given
(``filtered``: groups kept and dropped too easy / too hard / for infrastructure failures).
:meth:`Report.to_text` renders the terminal tables;
:mod:`agent_gym.report.html` the HTML page.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.checks import check_non_empty
from agent_gym.report.file_summary import MISSING, FileSummary
from agent_gym.report.load import load_file, stats_from_trajectories

__all__ = ["Report", "format_table", "load_report"]


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
    return MISSING if value is None else f"{value:.1%}"


def _statuses(statuses: Mapping[str, int]) -> str:
    return ", ".join(f"{k or '?'}={v}" for k, v in sorted(statuses.items())) or MISSING


class Report:
    """Figures of one or more files (or batches) of episodes, side by side.

    Args:
        files: One summary per input.
        by: Task field splitting the rows (default: ``family`` when tasks have one).
        filtered: Counters of dynamic sampling (``DynamicSampling.stats.as_dict()``), shown as a table.

    Example:
        >>> report = load_report("rollouts.jsonl")  # doctest: +SKIP
        >>> print(report.to_text())  # doctest: +SKIP
    """

    def __init__(self, files: Sequence[FileSummary], *, by: str | None = None,
                 filtered: Mapping[str, int] | None = None) -> None:
        self.files = list(check_non_empty("files", files))
        self.filtered = dict(filtered or {})
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
                          label: str = "batch", filtered: Mapping[str, int] | None = None) -> Report:
        """Report on in-memory trajectories: one batch, or ``{label: trajectories}`` for several.

        ``filtered`` takes the counters of dynamic sampling (``DynamicSampling.stats.as_dict()``).
        """
        if isinstance(batches, Mapping):
            files = [FileSummary(str(name), stats_from_trajectories(trajs, str(name)))
                     for name, trajs in batches.items()]
        else:
            files = [FileSummary(label, stats_from_trajectories(batches, label))]
        return cls(files, by=by, filtered=filtered)

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
                rows.append([f.label, r.env, r.value, str(r.episodes), str(r.tasks), f"{r.success_rate:.1%}",
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
        if any(e.summaries or e.failed_summaries for f in self.files for e in f.episodes):
            rows.append(["memory summaries", *(str(sum(e.summaries for e in f.episodes)) for f in self.files)])
            rows.append(["failed summary calls",
                         *(str(sum(e.failed_summaries for e in f.episodes)) for f in self.files)])
        rows += self._judge_rows()
        return ["error observations", *(f.label for f in self.files)], rows

    def _judge_rows(self) -> list[list[str]]:
        """Judge usage, failures by kind and each rubric criterion's mean (no rows when nothing was judged)."""
        judged = [[e for e in f.episodes if e.rubric_scores or e.judge_calls or e.judge_failure] for f in self.files]
        if not any(judged):
            return []
        rows = [["judge calls", *(str(sum(e.judge_calls for e in es)) for es in judged)],
                ["judge cache hits", *(str(sum(e.judge_cache_hits for e in es)) for es in judged)],
                ["judge failures (JUDGE_ERROR)", *(str(sum(1 for e in es if e.judge_failure)) for es in judged)]]
        kinds = sorted({e.judge_failure for es in judged for e in es if e.judge_failure})
        rows += [[f"judge failure: {kind}", *(str(sum(1 for e in es if e.judge_failure == kind)) for es in judged)]
                 for kind in kinds]
        names = sorted({name for es in judged for e in es for name in e.rubric_scores})
        for name in names:
            means = []
            for es in judged:
                values = [e.rubric_scores[name] for e in es if name in e.rubric_scores]
                means.append(f"{sum(values) / len(values):.3f}" if values else MISSING)
            rows.append([f"rubric {name} (mean)", *means])
        return rows

    def role_rows(self) -> tuple[list[str], list[list[str]]]:
        """Success per role of multi-agent episodes (no rows when no episode has roles)."""
        rows = [[f.label, role, str(int(r["episodes"])), f"{r['success_rate']:.1%}", f"{r['mean_reward']:.4f}"]
                for f in self.files for role, r in f.role_success().items()]
        return ["file", "role", "episodes", "success", "mean reward"], rows

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
                return f"{x / busy:.0%}" if busy > 0 else MISSING

            rows.append([f.label, f"{fig['env_time']:.2f}s ({share(fig['env_time'])})",
                         f"{fig['llm_time']:.2f}s ({share(fig['llm_time'])})",
                         f"{fig['reward_time']:.2f}s ({share(fig['reward_time'])})",
                         f"{fig['tokens_per_llm_s']:.1f}"])
        return ["file", "env time", "llm time", "reward time", "tokens/s (LLM)"], rows

    def filter_rows(self) -> tuple[list[str], list[list[str]]]:
        """Groups kept and dropped by dynamic sampling (no rows without ``filtered``)."""
        rows = [[name.replace("_", " "), str(value)] for name, value in self.filtered.items()]
        return ["groups", "count"], rows

    def to_text(self) -> str:
        """All tables, as the terminal shows them."""
        sections = [
            ("Summary", self.overview_rows()),
            (f"By env and {self.by}" if self.by else "By env", self.group_rows()),
            ("Tool use", self.error_rows()),
            ("Most common failing tools", self.failing_tool_rows()),
            ("By role", self.role_rows()),
            ("Time", self.time_rows()),
            ("Dynamic sampling", self.filter_rows()),
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
