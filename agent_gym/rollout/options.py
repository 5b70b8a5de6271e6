"""How a collection runs: :class:`RolloutOptions`, the one description of the runner options.

``collect``, ``collect_async``, :class:`~agent_gym.rollout.runner.EpisodeRunner` and
the Ray backend all read their settings from a ``RolloutOptions``; the keyword
arguments of ``collect(...)`` are its fields. Values are checked when the object is
built, so a bad argument fails before any env or actor exists.

Example:
    >>> from agent_gym.rollout import RolloutOptions
    >>> options = RolloutOptions(n_parallel=4, gamma=0.9)
    >>> options.replace(seed=3).seed
    3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from agent_gym.checks import check_bool, check_gamma, check_int, check_timeout
from agent_gym.errors import ConfigError
from agent_gym.parsers import canonical_tool_parser, make_reasoning_parser
from agent_gym.rollout.long_tail import LongTail, LongTailGate
from agent_gym.rollout.shard_config import RayShards

__all__ = ["BACKENDS", "OPTION_DEFAULTS", "OptionDefault", "RolloutOptions", "explicit_changes"]

BACKENDS = ("local", "ray", "ray_sharded")
"""Values accepted for :attr:`RolloutOptions.backend`."""


@dataclass(frozen=True)
class RolloutOptions:
    """Settings of a collection (every keyword argument of ``collect`` but ``tasks`` and ``num_episodes``).

    Attributes:
        samples_per_task: Episodes per task; siblings share ``group_id`` and reset seed.
        n_parallel: Maximum episodes in flight (also the number of envs and threads,
            or of Ray actors).
        gamma: Discount factor for ``Step.mc_return``.
        memory: Memory configuration or factory (see ``TrajectoryWrapper``).
        max_steps: Turn limit passed to ``gym.make`` (env ids only).
        episode_timeout: Seconds before an episode ends with ``TIMEOUT`` (None: no limit).
        env_kwargs: Extra ``gym.make`` keyword arguments (env ids only).
        progress: Show a tqdm progress bar with the running mean reward.
        backend: ``"local"`` (threads and an event loop), ``"ray"`` (Ray actors, one episode at
            a time each) or ``"ray_sharded"`` (Ray actors with many episodes in flight each, laid
            out by ``ray_shards``; see :mod:`agent_gym.rollout.sharded_runner`).
        seed: Base seed; group ``g`` resets with ``seed + g``. Episode ids (the
            policy's session ids) derive from it too, so a seeded policy repeats
            its samples run after run; two collects sharing one policy at the same
            time need different seeds.
        on_episode: Called with each trajectory as soon as it finishes (in
            completion order), e.g. an incremental file writer's ``write``; may be
            a coroutine function. Its exceptions are logged, never fatal.
        ray_address: Ray cluster address (``backend="ray"``); None uses
            ``RAY_ADDRESS`` or starts a local instance.
        tool_parser: The tool-call parser of an env id's envs, by vLLM's name (see
            :func:`agent_gym.parsers.make_parser`); None takes the policy's model family (given
            to it or read from its chat template) unless ``env_kwargs`` names a parser.
        reasoning_parser: The reasoning parser name, likewise.
        long_tail: A turn/time budget per episode and what to do with an episode over it: park
            it (resumed once no episode is left to start) or end it with ``TIMEOUT`` (see
            :class:`~agent_gym.rollout.long_tail.LongTail`; parking needs the local backend). A
            :class:`~agent_gym.rollout.long_tail.LongTailGate` shares one gate between runs.
        ray_shards: The layout of ``backend="ray_sharded"``: shard count, episodes per shard,
            placement (``num_cpus``, custom ``resources``) and what a lost shard's episodes do
            (:class:`~agent_gym.rollout.shard_config.RayShards`; None: its defaults).
    """

    samples_per_task: int = 1
    n_parallel: int = 8
    gamma: float = 1.0
    memory: Any = None
    max_steps: int | None = None
    episode_timeout: float | None = None
    env_kwargs: Mapping[str, Any] | None = None
    progress: bool = True
    backend: str = "local"
    seed: int = 0
    on_episode: Callable[[Any], Any] | None = None
    ray_address: str | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    long_tail: LongTail | LongTailGate | None = None
    ray_shards: RayShards | None = None

    def __post_init__(self) -> None:
        check_int("samples_per_task", self.samples_per_task, low=1)
        check_int("n_parallel", self.n_parallel, low=1)
        object.__setattr__(self, "gamma", check_gamma(self.gamma))
        if self.max_steps is not None:
            check_int("max_steps", self.max_steps, low=1)
        object.__setattr__(self, "episode_timeout", check_timeout("episode_timeout", self.episode_timeout))
        if self.env_kwargs is not None:
            if not isinstance(self.env_kwargs, Mapping):
                raise TypeError(f"env_kwargs: expected a dict or None, got {type(self.env_kwargs).__name__}")
            object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        check_bool("progress", self.progress)
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {self.backend!r}")
        check_int("seed", self.seed)
        if self.on_episode is not None and not callable(self.on_episode):
            raise TypeError(f"on_episode: expected a callable or None, got {type(self.on_episode).__name__}")
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise TypeError(f"ray_address: expected str or None, got {type(self.ray_address).__name__}")
        if self.tool_parser is not None:
            canonical_tool_parser(self.tool_parser)
        make_reasoning_parser(self.reasoning_parser)
        if self.long_tail is not None and not isinstance(self.long_tail, (LongTail, LongTailGate)):
            raise TypeError(f"long_tail: expected LongTail, LongTailGate or None, got {type(self.long_tail).__name__}")
        if self.backend != "local" and self.long_tail is not None and _parks(self.long_tail):
            raise ConfigError(f"long_tail: parking needs backend='local', got backend={self.backend!r} (an episode "
                              "parks in the process that runs it)")
        if self.ray_shards is not None and not isinstance(self.ray_shards, RayShards):
            raise TypeError(f"ray_shards: expected RayShards or None, got {type(self.ray_shards).__name__}")

    def replace(self, **changes: Any) -> RolloutOptions:
        """Return a copy with ``changes`` applied (checked like the constructor's arguments)."""
        return self.build(self, where="RolloutOptions.replace", **changes)

    @classmethod
    def build(cls, options: RolloutOptions | None = None, *, where: str = "collect", **changes: Any) -> RolloutOptions:
        """Combine an optional options object with keyword overrides.

        Args:
            options: Starting point (None: the defaults).
            where: Name of the calling function, for error messages.
            **changes: Field values that replace those of ``options``.

        Raises:
            TypeError: For a keyword that is not a field, or ``options`` of another type.
        """
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"{where}: options: expected RolloutOptions or None, got {type(options).__name__}")
        unknown = sorted(set(changes) - _FIELDS)
        if unknown:
            raise TypeError(
                f"{where}() got an unexpected keyword argument {unknown[0]!r} "
                f"(expected one of {', '.join(sorted(_FIELDS))})"
            )
        base = options if options is not None else cls()
        return dataclasses.replace(base, **changes) if changes else base


def _parks(long_tail: LongTail | LongTailGate) -> bool:
    config = long_tail.long_tail if isinstance(long_tail, LongTailGate) else long_tail
    return config.action == "park"


_FIELDS = frozenset(field.name for field in dataclasses.fields(RolloutOptions))
_DEFAULTS: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(RolloutOptions)}


class OptionDefault:
    """The default of a keyword that mirrors a :class:`RolloutOptions` field.

    ``collect(..., n_parallel=8)`` must override ``options.n_parallel`` even though 8 is
    the default, so a keyword that was not passed needs a value of its own. Its ``repr``
    is the field's default, so ``help(collect)`` shows ``n_parallel: int = 8``.

    Attributes:
        name: The field.
        value: The field's default.
    """

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        if name not in _DEFAULTS:
            raise ValueError(f"name: expected a RolloutOptions field, got {name!r}")
        self.name = name
        self.value = _DEFAULTS[name]

    def __repr__(self) -> str:
        return repr(self.value)


OPTION_DEFAULTS: Any = SimpleNamespace(**{name: OptionDefault(name) for name in _DEFAULTS})
"""One :class:`OptionDefault` per field, as attributes (``OPTION_DEFAULTS.n_parallel``): the defaults of
the keyword arguments of ``collect`` and ``collect_async`` (typed ``Any`` so that each can default a
parameter typed like its field)."""


def explicit_changes(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were passed: ``values`` without those still at their :func:`option_default`."""
    return {name: value for name, value in values.items() if not isinstance(value, OptionDefault)}
