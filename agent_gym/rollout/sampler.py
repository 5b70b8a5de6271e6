"""Which task each group runs: :class:`TaskSampler`, env mixtures with a pass-rate curriculum.

One sampler serves ``collect(..., sampler=...)`` and ``RolloutStream(..., sampler=...)``. It draws
each group's task from several envs (:class:`EnvSource`, each with its tasks, ``gym.make`` keyword
arguments and a weight): a group's episodes run on envs of its source only (the runner pools envs by
id and keyword arguments), so each episode sees only its own env's tools. After a group ends the
sampler observes it: per source it counts groups, episodes, infrastructure failures and successes
(:meth:`TaskSampler.metrics`), and per task it tracks the pass rate as an exponential moving
average over *valid* samples only (an episode that ended for infrastructure reasons is never a
failure; see :mod:`~agent_gym.rollout.outcome`). A group moves the rate by its success share as a
whole, so the order its siblings finished in does not matter.

With a :class:`Curriculum`, a task's pass rate puts it in a difficulty band (``unseen`` until
``min_samples`` valid samples, then ``too_easy`` at or above ``too_easy``, ``too_hard`` at or below
``too_hard``, ``learnable`` between) and tasks are drawn with the band's weight: the draw picks a
band with probability proportional to its weight times its tasks, then a task of it uniformly, so a
draw costs the same over ten tasks or a million.

Draws come from one seeded ``random.Random``: the same seed, sources and observations give the same
tasks. :meth:`TaskSampler.state_dict` / :meth:`TaskSampler.load_state_dict` carry the generator,
the pass rates, the order of the tasks within their bands and the counters (plain JSON values) with a
trainer's checkpoint: a restored sampler draws what the saved one would have drawn.

Example:
    >>> from agent_gym.rollout.sampler import Curriculum, EnvSource, TaskSampler
    >>> sampler = TaskSampler([EnvSource("agent_gym/ToolUse-v0", [{"id": "a"}, {"id": "b"}], weight=3.0),
    ...                        EnvSource("agent_gym/RAG-v0", [{"id": "c"}])], curriculum=Curriculum(), seed=0)
    >>> draw = sampler.sample()
    >>> draw.source in ("agent_gym/ToolUse-v0", "agent_gym/RAG-v0")
    True
"""

from __future__ import annotations

import bisect
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from agent_gym.checks import check_float, check_int
from agent_gym.errors import ConfigError
from agent_gym.rollout.outcome import is_valid, succeeded

__all__ = ["BANDS", "Curriculum", "EnvSource", "SampledTask", "TaskSampler"]

BANDS = ("unseen", "too_easy", "learnable", "too_hard")
"""The difficulty bands of a task, by its tracked pass rate."""


@dataclass(frozen=True)
class EnvSource:
    """One env of a mixture: its id, tasks, ``gym.make`` keyword arguments and weight.

    Attributes:
        env: A registered env id (or an env factory).
        tasks: Its task dicts (ids unique within the source; a task without ``"id"`` is keyed by
            its position).
        weight: Relative share of the groups drawn from this source (> 0).
        env_kwargs: Its ``gym.make`` keyword arguments (None: the runner's).
        name: The source's name in metrics and state (default: the env id); unique in a sampler.
    """

    env: Any
    tasks: Sequence[dict[str, Any]]
    weight: float = 1.0
    env_kwargs: Mapping[str, Any] | None = None
    name: str = ""

    @property
    def label(self) -> str:
        """``name``, or the env id when no name is given."""
        return self.name or (self.env if isinstance(self.env, str) else getattr(self.env, "__name__", "env"))


@dataclass(frozen=True)
class Curriculum:
    """Difficulty bands by tracked pass rate and the weight each band gets in the draw.

    Attributes:
        too_easy: A pass rate at or above it makes a task too easy.
        too_hard: A pass rate at or below it makes a task too hard (below ``too_easy``).
        easy_weight: Draw weight of a too-easy task.
        learnable_weight: Draw weight of a learnable task.
        hard_weight: Draw weight of a too-hard task.
        unseen_weight: Draw weight of a task with fewer than ``min_samples`` valid samples.
        alpha: Weight of a new valid sample in the moving average. A group of ``k`` valid samples
            with success share ``m`` moves the rate as ``k`` samples of ``m`` would:
            ``rate += (1 - (1 - alpha) ** k) * (m - rate)``; a task's first group sets it to ``m``.
        min_samples: Valid samples before a task leaves the ``unseen`` band.
    """

    too_easy: float = 0.9
    too_hard: float = 0.1
    easy_weight: float = 0.1
    learnable_weight: float = 1.0
    hard_weight: float = 0.1
    unseen_weight: float = 1.0
    alpha: float = 0.3
    min_samples: int = 1

    def __post_init__(self) -> None:
        check_float("too_easy", self.too_easy, low=0.0, high=1.0)
        check_float("too_hard", self.too_hard, low=0.0, high=1.0)
        if self.too_hard >= self.too_easy:
            raise ConfigError(f"too_hard: expected below too_easy={self.too_easy}, got {self.too_hard}")
        for name in ("easy_weight", "learnable_weight", "hard_weight", "unseen_weight"):
            check_float(name, getattr(self, name), low=0.0)
        if self.easy_weight + self.learnable_weight + self.hard_weight + self.unseen_weight <= 0:
            raise ConfigError("Curriculum: expected at least one band weight > 0, got all 0")
        check_float("alpha", self.alpha, low=0.0, high=1.0, low_open=True)
        check_int("min_samples", self.min_samples, low=1)

    def band(self, rate: float | None, samples: int) -> str:
        """The band of a task with pass rate ``rate`` over ``samples`` valid samples."""
        if rate is None or samples < self.min_samples:
            return "unseen"
        if rate >= self.too_easy:
            return "too_easy"
        if rate <= self.too_hard:
            return "too_hard"
        return "learnable"

    def weight(self, band: str) -> float:
        """The draw weight of ``band``."""
        return {"unseen": self.unseen_weight, "too_easy": self.easy_weight,
                "learnable": self.learnable_weight, "too_hard": self.hard_weight}[band]


@dataclass(frozen=True)
class SampledTask:
    """One draw: the task of a group and the env it runs on.

    Attributes:
        source: The source's name.
        key: ``"<source>/<task id>"``: the task's key in the pass rates and the state.
        task: The task dict.
        env: The source's env.
        env_kwargs: The source's ``gym.make`` keyword arguments.
        band: The task's band when drawn.
    """

    source: str
    key: str
    task: dict[str, Any]
    env: Any
    env_kwargs: Mapping[str, Any] | None
    band: str = "unseen"


@dataclass
class _Counts:
    groups: int = 0
    episodes: int = 0
    infra: int = 0
    successes: int = 0
    res_reward: float = 0.0


class _Bucket:
    """Task indices of one band with O(1) add, remove and uniform pick."""

    __slots__ = ("items", "where")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self.items: list[int] = list(items)
        self.where = {item: i for i, item in enumerate(self.items)}

    def add(self, item: int) -> None:
        self.where[item] = len(self.items)
        self.items.append(item)

    def remove(self, item: int) -> None:
        i = self.where.pop(item)
        last = self.items.pop()
        if last != item:
            self.items[i] = last
            self.where[last] = i


@dataclass
class _Source:
    spec: EnvSource
    keys: list[str]
    index: dict[str, int]
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    counts: _Counts = field(default_factory=_Counts)


class TaskSampler:
    """Draws each group's task from a weighted mixture of envs, by difficulty band when given a curriculum.

    Args:
        sources: The envs of the mixture (at least one; unique names).
        curriculum: Bands and band weights (None: tasks drawn uniformly within their source; pass
            rates are tracked all the same).
        seed: Seed of the draws.

    Raises:
        ConfigError: No source, a source without tasks, a weight <= 0, or names or task ids repeated.
        TypeError: A task is not a dict.
    """

    def __init__(self, sources: Sequence[EnvSource], *, curriculum: Curriculum | None = None,
                 seed: int = 0) -> None:
        if not sources:
            raise ConfigError("sources: expected at least one EnvSource, got none")
        self.curriculum = curriculum
        self._band_weights = tuple(curriculum.weight(b) for b in BANDS) if curriculum is not None else ()
        self.seed = check_int("seed", seed)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sources: list[_Source] = []
        self._by_name: dict[str, _Source] = {}
        self._rates: dict[str, list[float]] = {}  # key -> [rate, valid samples]
        self.draws = 0
        for i, spec in enumerate(sources):
            if not isinstance(spec, EnvSource):
                raise TypeError(f"sources[{i}]: expected EnvSource, got {type(spec).__name__}")
            check_float(f"sources[{i}].weight", spec.weight, low=0.0, low_open=True)
            name = spec.label
            if name in self._by_name:
                raise ConfigError(f"sources[{i}]: the name {name!r} is taken; give each source its own name")
            if not spec.tasks:
                raise ConfigError(f"sources[{i}] ({name}): expected at least one task, got none")
            keys = []
            for j, task in enumerate(spec.tasks):
                if not isinstance(task, dict):
                    raise TypeError(f"sources[{i}].tasks[{j}]: expected dict, got {type(task).__name__}")
                task_id = task.get("id")
                keys.append(f"{name}/{task_id if task_id not in (None, '') else f'#{j}'}")
            index = {key: j for j, key in enumerate(keys)}
            if len(index) < len(keys):
                raise ConfigError(f"sources[{i}] ({name}): task ids repeat; ids must be unique within a source")
            source = _Source(spec, keys, index)
            self._sources.append(source)
            self._by_name[name] = source
        self._cum_weights = list(accumulate(s.spec.weight for s in self._sources))
        self._rebuild()

    # ------------------------------------------------------------------ bands
    def _band(self, key: str) -> str:
        if self.curriculum is None:
            return "unseen"
        rate = self._rates.get(key)
        return self.curriculum.band(rate[0] if rate else None, int(rate[1]) if rate else 0)

    def _rebuild(self) -> None:
        for source in self._sources:
            members: dict[str, list[int]] = {band: [] for band in BANDS}
            for j, key in enumerate(source.keys):
                members[self._band(key)].append(j)
            source.buckets = {band: _Bucket(items) for band, items in members.items()}

    # ------------------------------------------------------------------ draws
    def sample(self) -> SampledTask:
        """Draw the next group's source and task."""
        with self._lock:
            rng = self._rng
            sources = self._sources
            source = sources[0] if len(sources) == 1 else sources[
                min(bisect.bisect(self._cum_weights, rng.random() * self._cum_weights[-1]), len(sources) - 1)]
            band = "unseen"
            if self.curriculum is None:
                j = rng.randrange(len(source.keys))
            else:
                buckets = source.buckets
                weights = [w * len(buckets[b].items) for w, b in zip(self._band_weights, BANDS, strict=True)]
                total = sum(weights)
                if total <= 0:  # every task of the source is in a band of weight 0: draw uniformly
                    j = rng.randrange(len(source.keys))
                    band = self._band(source.keys[j])
                else:
                    point, k = rng.random() * total, 0
                    while k < len(BANDS) - 1 and (point >= weights[k] or weights[k] <= 0):
                        point -= weights[k]
                        k += 1
                    while weights[k] <= 0:  # rounding at the top end: the last band with tasks
                        k -= 1
                    band = BANDS[k]
                    items = buckets[band].items
                    j = items[rng.randrange(len(items))]
            self.draws += 1
            spec = source.spec
            return SampledTask(spec.label, source.keys[j], spec.tasks[j], spec.env, spec.env_kwargs, band)

    def sample_many(self, count: int) -> list[SampledTask]:
        """``count`` draws (the pass rates do not move in between)."""
        return [self.sample() for _ in range(check_int("count", count, low=0))]

    def observe(self, draw: SampledTask, trajectories: Sequence[Any]) -> None:
        """Count a finished group of ``draw`` and move its task's pass rate by its valid samples.

        Args:
            draw: What :meth:`sample` returned for the group.
            trajectories: The group's episodes (``metrics["res_reward"]`` and ``status`` are read).
        """
        with self._lock:
            source = self._by_name.get(draw.source)
            counts = source.counts if source is not None else _Counts()
            counts.groups += 1
            before = self._band(draw.key)
            alpha = self.curriculum.alpha if self.curriculum is not None else Curriculum.alpha
            outcomes: list[float] = []
            for trajectory in trajectories:
                counts.episodes += 1
                if not is_valid(trajectory):
                    counts.infra += 1
                    continue
                outcomes.append(1.0 if succeeded(trajectory) else 0.0)
                counts.res_reward += float(trajectory.metrics.get("res_reward", 0.0))
            counts.successes += int(sum(outcomes))
            if outcomes:
                self._move_rate(draw.key, outcomes, alpha)
            after = self._band(draw.key)
            if source is not None and after != before and draw.key in source.index:
                j = source.index[draw.key]
                source.buckets[before].remove(j)
                source.buckets[after].add(j)

    def _move_rate(self, key: str, outcomes: Sequence[float], alpha: float) -> None:
        """Move the pass rate of ``key`` by one group's valid outcomes, whatever order they finished in.

        The group's success share ``m`` of its ``k`` valid samples moves the rate by ``1 - (1 - alpha) ** k``
        of the way (what ``k`` samples of ``m`` each would move it); a task's first group sets it to ``m``.
        """
        share = sum(outcomes) / len(outcomes)
        rate = self._rates.get(key)
        if rate is None:
            self._rates[key] = [share, float(len(outcomes))]
            return
        rate[0] += (1.0 - (1.0 - alpha) ** len(outcomes)) * (share - rate[0])
        rate[1] += len(outcomes)

    # ------------------------------------------------------------------ reading
    def pass_rate(self, key: str) -> float | None:
        """The tracked pass rate of the task ``key`` (``"<source>/<task id>"``), or None before a valid sample."""
        with self._lock:
            rate = self._rates.get(key)
            return None if rate is None else rate[0]

    def band_of(self, key: str) -> str:
        """The band of the task ``key`` now (``"unseen"`` without a curriculum)."""
        with self._lock:
            return self._band(key)

    def metrics(self) -> dict[str, dict[str, float]]:
        """Figures per source.

        Returns:
            Per source name: groups, episodes, infra failures, valid episodes, success rate and mean
            ``res_reward`` over valid episodes, and the number of tasks in each band now (``tasks_<band>``).
        """
        with self._lock:
            out: dict[str, dict[str, float]] = {}
            for source in self._sources:
                c = source.counts
                valid = c.episodes - c.infra
                row: dict[str, float] = {
                    "groups": c.groups, "episodes": c.episodes, "infra": c.infra, "valid": valid,
                    "success_rate": c.successes / valid if valid else 0.0,
                    "mean_res_reward": c.res_reward / valid if valid else 0.0,
                }
                row.update({f"tasks_{band}": len(source.buckets[band].items) for band in BANDS})
                out[source.spec.label] = row
            return out

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The sampler's state as plain JSON values: generator, pass rates, counters."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {
                "format": 1,
                "rng": [version, list(internal), gauss],
                "draws": self.draws,
                "rates": {key: [rate, int(n)] for key, (rate, n) in self._rates.items()},
                "counts": {s.spec.label: [s.counts.groups, s.counts.episodes, s.counts.infra, s.counts.successes,
                                          s.counts.res_reward] for s in self._sources},
                "order": {s.spec.label: {band: list(bucket.items) for band, bucket in s.buckets.items()}
                          for s in self._sources},
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (pass rates of tasks no source has now are kept).

        Raises:
            ConfigError: ``state`` is not a state of this format.
        """
        if not isinstance(state, Mapping) or state.get("format") != 1:
            raise ConfigError(f"state: expected a TaskSampler.state_dict() (format 1), got {state!r:.80}")
        try:
            version, internal, gauss = state["rng"]
            rng_state = (int(version), tuple(int(x) for x in internal), gauss)
            rates = {str(k): [float(v[0]), float(v[1])] for k, v in state["rates"].items()}
            counts = {str(k): _Counts(int(v[0]), int(v[1]), int(v[2]), int(v[3]), float(v[4]))
                      for k, v in state.get("counts", {}).items()}
            draws = int(state.get("draws", 0))
            order = {str(k): {str(b): [int(i) for i in items] for b, items in v.items()}
                     for k, v in state.get("order", {}).items()}
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError(f"state: malformed TaskSampler state ({type(exc).__name__}: {exc})") from exc
        with self._lock:
            self._rng.setstate(rng_state)
            self._rates = rates
            self.draws = draws
            for source in self._sources:
                source.counts = counts.get(source.spec.label, _Counts())
            self._rebuild()
            for source in self._sources:  # the draw order within each band too, when it fits these tasks
                saved = order.get(source.spec.label)
                if saved is not None and all(sorted(saved.get(b, [])) == sorted(bucket.items)
                                             for b, bucket in source.buckets.items()):
                    source.buckets = {b: _Bucket(saved.get(b, [])) for b in BANDS}
