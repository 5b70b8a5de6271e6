"""Figures of the episodes of one file or batch: :class:`FileSummary` and its rows.

A :class:`FileSummary` holds the per-episode figures of one input (see
:mod:`agent_gym.report.load`) and computes what the report's tables and plots
show: the batch figures of the ``agent-gym rollout`` summary, one
:class:`GroupRow` per env and task field value, error observations by kind,
failing tools and the histogram series (:data:`SERIES`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_gym.checks import check_choice
from agent_gym.errors import ERROR_KINDS
from agent_gym.report.load import EpisodeStats
from agent_gym.report.stats import mean_pass_at_k, wilson_interval

__all__ = ["MISSING", "SERIES", "FileSummary", "GroupRow"]

MISSING = "-"
"""Cell text of a value that was not recorded."""


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
            return MISSING
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
        """Error observations by kind, every kind of :data:`~agent_gym.errors.ERROR_KINDS` present (0 when none)."""
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

    def role_success(self) -> dict[str, dict[str, float]]:
        """Success per role of multi-agent episodes: a role succeeded when its ``role_reward`` is > 0.

        Returns:
            ``role -> {"episodes", "successes", "success_rate", "mean_reward"}``, roles sorted;
            {} when no episode has role rewards.
        """
        rewards: dict[str, list[float]] = {}
        for e in self.episodes:
            for role, reward in e.role_rewards.items():
                rewards.setdefault(role, []).append(reward)
        out: dict[str, dict[str, float]] = {}
        for role, values in sorted(rewards.items()):
            successes = sum(1 for v in values if v > 0)
            out[role] = {"episodes": len(values), "successes": successes, "success_rate": successes / len(values),
                         "mean_reward": sum(values) / len(values)}
        return out

    def series(self, metric: str) -> list[float]:
        """Values of a histogram metric (a key of :data:`SERIES`).

        Raises:
            ConfigError: If the metric is unknown.
        """
        values = _SERIES_VALUES[check_choice("metric", metric, SERIES)]
        return [float(v) for e in self.episodes for v in values(e)]


_SERIES_VALUES: dict[str, Callable[[EpisodeStats], Iterable[float]]] = {
    "reward": lambda e: (e.reward,),
    "steps": lambda e: (e.steps,),
    "response_tokens_per_turn": lambda e: e.sampled_tokens_per_turn,
    "response_tokens_per_episode": lambda e: (e.tokens_sampled,),
    "prompt_tokens_per_turn": lambda e: e.prompt_tokens_per_turn,
    "tool_calls_per_episode": lambda e: (e.tool_calls,),
}

SERIES: dict[str, str] = {
    "reward": "episode reward",
    "steps": "steps per episode",
    "response_tokens_per_turn": "response tokens per turn",
    "response_tokens_per_episode": "response tokens per episode",
    "prompt_tokens_per_turn": "prompt tokens per turn",
    "tool_calls_per_episode": "tool calls per episode",
}
"""Histogram metrics of :meth:`FileSummary.series` and their titles."""
