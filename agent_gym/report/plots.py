"""Figures of a report, as matplotlib ``Figure`` objects (the ``report`` extra).

Every ``plot_*`` function takes a :class:`~agent_gym.report.summary.Report` (or
a list of trajectories, reported as one batch) and returns a new
``matplotlib.figure.Figure`` without touching pyplot's global state. When the
report holds several files, each figure has one column per file, side by side,
with the same bins and shared axes so that before/after runs compare at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, cast

from agent_gym.checks import check_choice
from agent_gym.errors import MissingExtraError
from agent_gym.report.file_summary import SERIES, FileSummary
from agent_gym.report.load import stats_from_trajectories

__all__ = [
    "METRICS",
    "plot_distributions",
    "plot_histogram",
    "plot_prompt_lengths",
    "plot_response_tokens",
    "plot_rewards",
    "plot_steps",
    "plot_time_split",
    "plot_tool_use",
]

METRICS: dict[str, str] = dict(SERIES)
"""Histogram metrics and their titles."""

_INTEGER_METRICS = {"steps", "tool_calls_per_episode"}


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report") from None
    return Figure


def _files(data: Any) -> list[FileSummary]:
    """The file summaries to draw: a report's, one summary, or trajectories as one batch."""
    if isinstance(data, FileSummary):
        return [data]
    files = getattr(data, "files", None)  # a Report (not imported here: the report draws these plots)
    if isinstance(files, list) and files and all(isinstance(f, FileSummary) for f in files):
        return files
    trajectories = cast("Iterable[Any]", data)  # neither a Report nor a FileSummary
    return [FileSummary("batch", stats_from_trajectories(list(trajectories), "batch"))]


def _bins(values: Sequence[float], metric: str, bins: int) -> list[float]:
    if not values:
        return [0.0, 1.0]
    low, high = min(values), max(values)
    if metric in _INTEGER_METRICS or all(float(v).is_integer() for v in values):
        if high - low + 1 <= bins:
            return [v - 0.5 for v in range(int(low), int(high) + 2)]
    if high == low:
        return [low - 0.5, high + 0.5]
    step = (high - low) / bins
    return [low + i * step for i in range(bins)] + [high]


def plot_distributions(data: Any, metrics: Sequence[str] = ("reward", "steps"), *, bins: int = 20,
                       width: float = 3.6, height: float = 2.4) -> Any:
    """Histograms: one row per metric, one column per file (same bins across files).

    Args:
        data: A ``Report`` (or a ``FileSummary``, or a list of trajectories).
        metrics: Keys of :data:`METRICS`.
        bins: Bins of a histogram (integer metrics with a small range get one bin per value).
        width: Inches per column.
        height: Inches per row.

    Returns:
        A ``matplotlib.figure.Figure``.

    Raises:
        MissingExtraError: If matplotlib is not installed.
        ConfigError: If a metric is unknown (a ``ValueError``).
    """
    figure_class = _figure_class()
    files = _files(data)
    for metric in metrics:
        check_choice("metrics", metric, METRICS)
    fig = figure_class(figsize=(width * len(files), height * len(metrics)), layout="constrained")
    axes = fig.subplots(len(metrics), len(files), squeeze=False, sharey="row")
    for row, metric in enumerate(metrics):
        series = [f.series(metric) for f in files]
        edges = _bins([v for s in series for v in s], metric, bins)
        for col, (f, values) in enumerate(zip(files, series, strict=True)):
            ax = axes[row][col]
            ax.hist(values, bins=edges, color=f"C{col}", edgecolor="white", linewidth=0.5)
            mean = sum(values) / len(values) if values else math.nan
            ax.axvline(mean, color="black", linestyle="--", linewidth=1)
            ax.set_title(f"{f.label}: {METRICS[metric]}" if len(files) > 1 else METRICS[metric], fontsize=9)
            ax.set_xlabel(f"mean {mean:.3g}, n={len(values)}", fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel("count", fontsize=8)
            ax.set_xlim(edges[0], edges[-1])
    return fig


def plot_histogram(data: Any, metric: str, *, bins: int = 20) -> Any:
    """One histogram metric (see :data:`METRICS`), one panel per file."""
    return plot_distributions(data, (metric,), bins=bins)


def plot_rewards(data: Any, *, bins: int = 20) -> Any:
    """Histogram of episode rewards."""
    return plot_distributions(data, ("reward",), bins=bins)


def plot_steps(data: Any, *, bins: int = 20) -> Any:
    """Histogram of steps per episode."""
    return plot_distributions(data, ("steps",), bins=bins)


def plot_response_tokens(data: Any, *, bins: int = 20) -> Any:
    """Histograms of response (sampled) tokens per turn and per episode."""
    return plot_distributions(data, ("response_tokens_per_turn", "response_tokens_per_episode"), bins=bins)


def plot_prompt_lengths(data: Any, *, bins: int = 20) -> Any:
    """Histogram of prompt tokens per turn."""
    return plot_distributions(data, ("prompt_tokens_per_turn",), bins=bins)


def plot_tool_use(data: Any, *, top: int = 8, width: float = 4.0, height: float = 2.6) -> Any:
    """Tool calls per episode, error observations by kind and the most common failing tools.

    Returns:
        A figure with one row per file and three panels per row.
    """
    figure_class = _figure_class()
    files = _files(data)
    fig = figure_class(figsize=(width * 3, height * len(files)), layout="constrained")
    axes = fig.subplots(len(files), 3, squeeze=False)
    calls = [f.series("tool_calls_per_episode") for f in files]
    edges = _bins([v for s in calls for v in s], "tool_calls_per_episode", 20)
    for row, (f, values) in enumerate(zip(files, calls, strict=True)):
        prefix = f"{f.label}: " if len(files) > 1 else ""
        ax = axes[row][0]
        ax.hist(values, bins=edges, color=f"C{row}", edgecolor="white", linewidth=0.5)
        ax.set_title(f"{prefix}tool calls per episode", fontsize=9)
        kinds = f.error_kinds()
        ax = axes[row][1]
        ax.barh(list(kinds)[::-1], list(kinds.values())[::-1], color=f"C{row}")
        ax.set_xlim(0, max(1, *kinds.values()) * 1.05)
        ax.set_title(f"{prefix}error observations by kind", fontsize=9)
        tools = f.failing_tools(top)
        ax = axes[row][2]
        if tools:
            ax.barh([name for name, _ in tools][::-1], [count for _, count in tools][::-1], color=f"C{row}")
        else:
            ax.text(0.5, 0.5, "no failed calls", ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_title(f"{prefix}failing tools", fontsize=9)
        for ax in axes[row]:
            ax.tick_params(labelsize=7)
    return fig


def plot_time_split(data: Any, *, width: float = 5.0, height: float = 0.6) -> Any:
    """Share of env, LLM and reward time per file (stacked bars), with the seconds and tokens/s."""
    figure_class = _figure_class()
    files = _files(data)
    fig = figure_class(figsize=(width, 1.2 + height * len(files)), layout="constrained")
    ax = fig.subplots()
    parts = ("env_time", "llm_time", "reward_time")
    figures = [f.figures() for f in files]
    labels = [f.label for f in files][::-1]
    left = [0.0] * len(files)
    for i, part in enumerate(parts):
        shares = []
        for fig_data in figures[::-1]:
            busy = sum(fig_data[p] for p in parts)
            shares.append(fig_data[part] / busy if busy > 0 else 0.0)
        ax.barh(labels, shares, left=left, color=f"C{i}", label=part.replace("_", " "))
        left = [a + b for a, b in zip(left, shares, strict=True)]
    for y, fig_data in enumerate(figures[::-1]):
        ax.text(1.01, y, f"{fig_data['tokens_per_llm_s']:.0f} tok/s", va="center", fontsize=8)
    ax.set_xlim(0, 1.2)
    ax.set_xlabel("share of time", fontsize=8)
    ax.legend(fontsize=7, loc="lower right", ncols=3)
    ax.tick_params(labelsize=7)
    return fig
