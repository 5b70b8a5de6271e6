"""The report as one self-contained HTML page: tables and inline PNG figures, no network."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any, Protocol

from agent_gym.report import plots
from agent_gym.report.file_summary import FileSummary

Rows = tuple[list[str], list[list[str]]]

__all__ = ["ReportTables", "figure_to_data_uri", "render_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
p.note { font-size: 0.85em; color: #555; }
"""


def figure_to_data_uri(fig: Any, *, dpi: int = 80) -> str:
    """Encode a matplotlib figure as a ``data:image/png;base64,...`` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class ReportTables(Protocol):
    """What the page reads of a report (:class:`~agent_gym.report.summary.Report` has it all)."""

    files: list[FileSummary]
    by: str | None

    def overview_rows(self) -> Rows:
        """The summary table: headers and rows."""
        ...

    def group_rows(self) -> Rows:
        """The table by env (and group key)."""
        ...

    def error_rows(self) -> Rows:
        """The tool-use table."""
        ...

    def failing_tool_rows(self) -> Rows:
        """The most common failing tools."""
        ...

    def time_rows(self) -> Rows:
        """The time table."""
        ...


def render_html(report: ReportTables, *, dpi: int = 80) -> str:
    """Render every table and figure of ``report`` as a standalone HTML document.

    Raises:
        MissingExtraError: If matplotlib (the ``report`` extra) is not installed.
    """
    figures = [
        ("Reward and episode length", plots.plot_distributions(report, ("reward", "steps"))),
        ("Response tokens", plots.plot_response_tokens(report)),
        ("Prompt length per turn", plots.plot_prompt_lengths(report)),
        ("Tool use", plots.plot_tool_use(report)),
        ("Time split", plots.plot_time_split(report)),
    ]
    images = [(title, figure_to_data_uri(fig, dpi=dpi)) for title, fig in figures]
    labels = ", ".join(f.label for f in report.files)
    skipped = [f for f in report.files if f.skipped_lines]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>agent_gym report: {html.escape(labels)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>agent_gym report: {html.escape(labels)}</h1>",
    ]
    for f in skipped:
        parts.append(f'<p class="note">{html.escape(f.label)}: skipped {f.skipped_lines} incomplete last line '
                     "(the writer was interrupted)</p>")
    parts.append("<h2>Summary</h2>" + _table(*report.overview_rows()))
    parts.append('<p class="note">Success: <code>res_reward &gt; 0</code>; 95% Wilson interval. pass@k: unbiased '
                 "estimator over the k samples of each task (episodes sharing a group id). Tokens/s: sampled "
                 "tokens per second of LLM time.</p>")
    title = f"By env and {report.by}" if report.by else "By env"
    parts.append(f"<h2>{html.escape(title)}</h2>" + _table(*report.group_rows()))
    parts.append("<h2>Tool use</h2>" + _table(*report.error_rows()))
    headers, rows = report.failing_tool_rows()
    if rows:
        parts.append(_table(headers, rows))
    parts.append("<h2>Time</h2>" + _table(*report.time_rows()))
    for title, uri in images:
        parts.append(f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" src="{uri}">')
    parts.append("</body></html>")
    return "\n".join(parts)
