"""Reports on batches of trajectories: tables, distributions and an HTML page.

``load_report(*paths)`` reads trajectory files (JSONL or Parquet, interrupted
ones too) into a :class:`Report`; ``Report.from_trajectories`` does the same for
trajectories in memory. The report's tables need nothing beyond the core
install; the ``plot_*`` functions and the HTML page need matplotlib
(``pip install 'agent-gym[report]'``) and raise
:class:`~agent_gym.errors.MissingExtraError` naming that extra without it.

Example:
    >>> from agent_gym.report import load_report, plot_rewards  # doctest: +SKIP
    >>> report = load_report("before.jsonl", "after.jsonl")  # doctest: +SKIP
    >>> print(report.to_text())  # doctest: +SKIP
    >>> report.write_html("report.html")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from agent_gym.report.errors import classify_call_error, step_errors
from agent_gym.report.file_summary import FileSummary, GroupRow
from agent_gym.report.load import EpisodeStats, load_file
from agent_gym.report.stats import mean_pass_at_k, pass_at_k, wilson_interval
from agent_gym.report.summary import Report, format_table, load_report

__all__ = [
    "EpisodeStats",
    "FileSummary",
    "GroupRow",
    "Report",
    "classify_call_error",
    "format_table",
    "load_file",
    "load_report",
    "mean_pass_at_k",
    "pass_at_k",
    "plot_distributions",
    "plot_histogram",
    "plot_prompt_lengths",
    "plot_response_tokens",
    "plot_rewards",
    "plot_steps",
    "plot_time_split",
    "plot_tool_use",
    "step_errors",
    "wilson_interval",
]

_PLOTS = frozenset(name for name in __all__ if name.startswith("plot_"))


def __getattr__(name: str) -> Any:
    # The plotting module is loaded on first use; matplotlib itself only when a figure is drawn.
    if name in _PLOTS:
        from agent_gym.report import plots

        return getattr(plots, name)
    raise AttributeError(f"module 'agent_gym.report' has no attribute {name!r}")
