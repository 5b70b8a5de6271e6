"""How a sharded Ray collection is laid out: :class:`RayShards`.

``collect(..., backend="ray_sharded", ray_shards=RayShards(...))`` and
``RolloutStream(..., backend="ray_sharded", ray_shards=RayShards(...))`` run their episodes in
``shards`` Ray actors, each holding one long-lived
:class:`~agent_gym.rollout.runner.EpisodeRunner` with many episodes in flight (see
:mod:`agent_gym.rollout.sharded_runner`). This module holds only the settings (no Ray import),
so :class:`~agent_gym.rollout.options.RolloutOptions` can check them.

Example:
    >>> from agent_gym.rollout.shard_config import RayShards
    >>> RayShards(shards=4, resources={"env_worker": 1}).per_shard(128)
    32
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_gym.checks import check_bool, check_choice, check_float, check_int
from agent_gym.errors import ConfigError

__all__ = ["SHARD_LOSS_ACTIONS", "RayShards"]

SHARD_LOSS_ACTIONS = ("rerun", "fail")
"""What happens to the unfinished episodes of a shard that was lost (:attr:`RayShards.on_shard_loss`)."""


@dataclass(frozen=True)
class RayShards:
    """Layout and fault handling of a sharded Ray collection.

    Attributes:
        shards: Ray actors running episodes (each on the node Ray places it; one per node with
            ``spread`` when the nodes have room).
        episodes_per_shard: Most episodes in flight in one shard (None: the collection's
            ``n_parallel``, or a stream's ``concurrency``, split evenly over the shards). The sum
            over the shards is the load the policy's servers see: it is the backpressure.
        num_cpus: CPUs each shard reserves on its node (Ray's ``num_cpus``).
        resources: Custom Ray resources each shard needs, e.g. ``{"env_worker": 1}`` to place the
            shards on nodes started with ``ray start --resources='{"env_worker": 8}'`` (near the
            sandboxes), away from the GPU nodes.
        spread: Ask Ray to spread the shards over the nodes (``scheduling_strategy="SPREAD"``).
        on_shard_loss: ``"rerun"``: the unfinished episodes of a shard whose actor or node died run
            again on another shard (from their start: an episode is never resumed half-way on
            another machine); ``"fail"``: they end with ``ENV_ERROR``. Either way each comes back
            exactly once.
        max_reruns: Most times one episode is re-run after losing its shard; one more loss ends it
            ``ENV_ERROR`` (an episode that kills every worker it runs on cannot take the cluster down).
        start_timeout: Seconds the collection waits, while episodes wait to run, with no shard
            started (no node offers the shard's ``num_cpus`` and ``resources``, or every start
            fails) before it ends the waiting episodes ``ENV_ERROR``.
        env_vars: Environment variables of the shards' processes (e.g.
            ``AGENT_GYM_SANDBOX_CREATION_RATE``; see :mod:`agent_gym.utils.creation_limit`).
        poll_batch: Most finished episodes one poll of a shard brings back.

    Raises:
        ConfigError: A value out of range.
    """

    shards: int = 2
    episodes_per_shard: int | None = None
    num_cpus: float = 1.0
    resources: Mapping[str, float] | None = None
    spread: bool = True
    on_shard_loss: str = "rerun"
    max_reruns: int = 2
    start_timeout: float = 300.0
    env_vars: Mapping[str, str] | None = None
    poll_batch: int = 64

    def __post_init__(self) -> None:
        check_int("shards", self.shards, low=1)
        if self.episodes_per_shard is not None:
            check_int("episodes_per_shard", self.episodes_per_shard, low=1)
        check_float("num_cpus", self.num_cpus, low=0.0)
        if self.resources is not None:
            if not isinstance(self.resources, Mapping):
                raise TypeError(f"resources: expected a dict or None, got {type(self.resources).__name__}")
            for name, amount in self.resources.items():
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"resources: expected resource names as non-empty str, got {name!r}")
                check_float(f"resources[{name!r}]", amount, low=0.0, low_open=True)
            object.__setattr__(self, "resources", dict(self.resources))
        check_bool("spread", self.spread)
        check_choice("on_shard_loss", self.on_shard_loss, SHARD_LOSS_ACTIONS)
        check_int("max_reruns", self.max_reruns, low=0)
        check_float("start_timeout", self.start_timeout, low=0.0, low_open=True)
        if self.env_vars is not None:
            if not isinstance(self.env_vars, Mapping):
                raise TypeError(f"env_vars: expected a dict or None, got {type(self.env_vars).__name__}")
            object.__setattr__(self, "env_vars", {str(k): str(v) for k, v in self.env_vars.items()})
        check_int("poll_batch", self.poll_batch, low=1)

    def per_shard(self, in_flight: int) -> int:
        """Episodes in flight per shard for ``in_flight`` in all (``episodes_per_shard`` when given)."""
        if self.episodes_per_shard is not None:
            return self.episodes_per_shard
        return max(1, math.ceil(in_flight / self.shards))

    def actor_options(self) -> dict[str, Any]:
        """Ray's ``.options(...)`` of a shard actor."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_restarts": 0, "max_task_retries": 0}
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.spread:
            options["scheduling_strategy"] = "SPREAD"
        if self.env_vars:
            options["runtime_env"] = {"env_vars": dict(self.env_vars)}
        return options
