"""SkyRL adapters: agent_gym envs under skyrl-gym's API, and a token-exact generator for SkyRL's trainer.

Two ways to train on an agent_gym env with SkyRL:

* **Env adapter** (SkyRL's own generator drives the episode). :func:`register` makes any
  agent_gym env a ``skyrl_gym`` env (``skyrl_gym.register``) whose class,
  ``AgentGymTextEnv``, is a ``skyrl_gym`` ``BaseTextEnv``: ``init`` resets the agent_gym env on
  the row's task and returns its system and user messages, ``step(text)`` steps it with the
  text SkyRL's generator sampled and returns the new tool/user messages, the step's reward and
  ``done``. SkyRL then tokenizes the observations itself (its chat template, its masks).
* **Generator** (agent_gym drives the episode, token-exact). :class:`AgentGymGenerator` has
  the ``async generate(input_batch) -> GeneratorOutput`` of SkyRL's ``GeneratorInterface``:
  it runs the batch's episodes on the :class:`~agent_gym.rollout.EpisodeRunner` it holds for its
  lifetime (envs built once, reused through ``reset``) with an agent_gym policy (e.g. a
  ``VLLMPolicy`` on SkyRL's inference servers) and returns ``prompt_token_ids``,
  ``response_ids``, ``loss_masks`` and ``rollout_logprobs`` exactly as the policy sampled them,
  with ``rewards``, ``stop_reasons``, ``trajectory_ids``, ``is_last_step``,
  ``rollout_metrics`` and ``env_metrics``.

Fan-out and masking follow :mod:`agent_gym.integrations.contract`: an episode that memory split
into ``K`` segments becomes ``K`` consecutive rows sharing one ``trajectory_ids`` entry, only
the last with ``is_last_step`` (SkyRL's step-wise mode, ``generator.step_wise_trajectories``:
the trainer computes the advantage on the last row and broadcasts it to the others); each row's
reward follows the chosen :class:`~agent_gym.integrations.contract.RewardAssignment`. An episode
that failed for infrastructure reasons has all-zero ``loss_masks``, ``stop_reasons`` ``"abort"``
and its group's mean reward (:func:`~agent_gym.integrations.contract.neutral_rewards`), so it
neither trains nor moves its siblings' baseline.

``skyrl_gym`` is imported lazily (``pip install 'agent-gym[skyrl]'``); the generator needs no
SkyRL package at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym

from agent_gym.envs import register_envs
from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.integrations.contract import (
    RewardAssignment,
    TrainingSegment,
    failure_reason,
    filler_token_id,
    is_infra_failure,
    neutral_rewards,
    parse_task,
    training_segments,
)
from agent_gym.rollout import EpisodeRunner, RolloutOptions, plan_episodes
from agent_gym.rollout.collection import warn_if_truncated
from agent_gym.types import EpisodeStatus

__all__ = [
    "ENTRY_POINT",
    "MULTI_SEGMENT_MODES",
    "AgentGymGenerator",
    "AgentGymTextEnv",  # noqa: F822 - built on first access by __getattr__ (skyrl_gym imported then)
    "TrajectoryKey",
    "register",
    "register_all",
    "stop_reason",
]

ENTRY_POINT = "agent_gym.integrations.skyrl:AgentGymTextEnv"
"""The ``skyrl_gym`` entry point of every env :func:`register` adds (importable in any process)."""

MULTI_SEGMENT_MODES = ("rows", "last")
"""What :class:`AgentGymGenerator` does with an episode of several segments: one row per segment
(``"rows"``, SkyRL's step-wise mode) or only its last segment (``"last"``, one row per episode)."""

_STOP_REASONS: dict[str, str] = {
    EpisodeStatus.ENV_DONE.value: "stop",
    EpisodeStatus.MAX_STEPS.value: "stop",
    EpisodeStatus.TRUNCATION.value: "length",
    EpisodeStatus.PROMPT_TRUNCATION.value: "length",
    EpisodeStatus.TIMEOUT.value: "abort",
    EpisodeStatus.ENV_ERROR.value: "abort",
    EpisodeStatus.POLICY_ERROR.value: "abort",
    EpisodeStatus.JUDGE_ERROR.value: "abort",
}


def stop_reason(status: str) -> str:
    """SkyRL's stop reason for an episode that ended with agent_gym ``status``.

    ``"stop"`` for an episode the env ended (``ENV_DONE``, ``MAX_STEPS``), ``"length"`` for one
    cut by a token budget (SkyRL's ``zero_reward_on_non_stop`` and ``apply_overlong_filtering``
    act on those), ``"abort"`` for an infrastructure failure.

    Args:
        status: An :class:`~agent_gym.types.EpisodeStatus` value.
    """
    return _STOP_REASONS.get(str(status), "abort")


def _skyrl_gym() -> Any:
    try:
        import skyrl_gym
    except ImportError as exc:
        raise MissingExtraError("skyrl-gym", "skyrl") from exc
    return skyrl_gym


def _check_env_id(env_id: Any) -> str:
    register_envs()
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
        raise ConfigError(f"env_id: expected a registered env id such as {known}, got {env_id!r}")
    return env_id


def _config_get(config: Any, key: str) -> Any:
    """``config[key]`` of SkyRL's per-env config (a dict, an OmegaConf node or an object), or None."""
    if config is None:
        return None
    if isinstance(config, Mapping) or hasattr(config, "get"):
        return config.get(key)
    return getattr(config, key, None)


def _task_of(extras: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    """The task dict a row carries under ``key`` (a dict or its JSON text), or None."""
    return parse_task((extras or {}).get(key), key)


# ---------------------------------------------------------------------------------------------- env adapter


def _text_env_class() -> type:
    """Build ``AgentGymTextEnv`` on skyrl_gym's ``BaseTextEnv`` (imported here, lazily)."""
    _skyrl_gym()
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class AgentGymTextEnv(BaseTextEnv):
        """An agent_gym env as a skyrl-gym ``BaseTextEnv`` (text actions in, chat messages out).

        Built by ``skyrl_gym.make(id, env_config=..., extras=...)`` for ids added by
        :func:`register`. The env is ``gym.make(env_id, max_steps=extras["max_turns"],
        **env_kwargs)``; ``tools_in_prompt`` defaults to True because SkyRL's generator renders
        the chat template without tool schemas (the tools are described in the system message).

        Args:
            env_config: SkyRL's per-env config (``skyrl_gym.<id>`` in its config); its
                ``env_id`` and ``env_kwargs`` are used when the arguments below are not given.
            extras: The dataset row's extra fields: ``task`` (a task dict or its JSON text; None
                lets the env draw one from ``seed``), ``seed`` and ``max_turns`` (set by SkyRL).
            env_id: The agent_gym env id.
            env_kwargs: Extra ``gym.make`` keyword arguments.

        Raises:
            agent_gym.errors.ConfigError: ``env_id`` is not a registered env id.
        """

        def __init__(
            self,
            env_config: Any = None,
            extras: Mapping[str, Any] | None = None,
            *,
            env_id: str | None = None,
            env_kwargs: Mapping[str, Any] | None = None,
        ) -> None:
            super().__init__()
            extras = dict(extras or {})
            env_id = _check_env_id(env_id if env_id is not None else _config_get(env_config, "env_id"))
            kwargs = {"tools_in_prompt": True, **dict(_config_get(env_config, "env_kwargs") or {}),
                      **dict(env_kwargs or {})}
            max_steps = kwargs.pop("max_steps", 10)
            self.max_turns = int(extras.get("max_turns") or max_steps)
            self.env_id = env_id
            self.task = _task_of(extras, "task")
            self.seed = extras.get("seed")
            self.env = gym.make(env_id, max_steps=self.max_turns, **kwargs)
            self.total_reward = 0.0
            self.last_info: dict[str, Any] = {}
            self._seen = 0

        def init(self, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            """Reset the env on the row's task; return its first messages (``prompt`` is not used).

            Raises:
                ValueError: The env rejects the task.
            """
            options = {"task": self.task} if self.task is not None else None
            obs, info = self.env.reset(seed=self.seed, options=options)
            self._seen = len(obs)
            self.turns = 0
            self.total_reward = 0.0
            self.last_info = {}
            return [dict(m) for m in obs], {"task_id": info["task"].get("id"), "episode_id": info.get("episode_id")}

        def step(self, action: str) -> dict[str, Any]:
            """Step the env with the sampled text; return the new messages, reward and ``done``."""
            obs, reward, terminated, truncated, info = self.env.step(action)
            new = [dict(m) for m in obs[self._seen :]]
            if new and new[0].get("role") == "assistant":  # the action itself
                new = new[1:]
            self._seen = len(obs)
            self.turns += 1
            self.total_reward += float(reward)
            self.last_info = info
            metadata = {key: info[key] for key in ("status", "end_reason", "toolcall_reward", "res_reward")
                        if key in info}
            if "status" in metadata:
                metadata["status"] = str(metadata["status"])
            return {
                "observations": new,
                "reward": float(reward),
                "done": bool(terminated or truncated),
                "metadata": metadata,
                "postprocessed_action": None,
            }

        def get_metrics(self) -> dict[str, Any]:
            """Numeric episode metrics: turns taken and the total reward so far."""
            return {"turns": self.turns, "reward": self.total_reward}

        def close(self) -> None:
            """Close the agent_gym env."""
            self.env.close()

    AgentGymTextEnv.__module__ = __name__
    AgentGymTextEnv.__qualname__ = "AgentGymTextEnv"
    return AgentGymTextEnv


_built: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    if name == "AgentGymTextEnv":
        if name not in _built:
            _built[name] = _text_env_class()
        return _built[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(env_id: str, *, skyrl_id: str | None = None, **env_kwargs: Any) -> str:
    """Make the agent_gym env ``env_id`` a skyrl-gym env (``skyrl_gym.register``).

    Call it in the process that runs SkyRL's generator (its entry point), as SkyRL's own
    examples do. Registering the same id with the same arguments again does nothing.

    Args:
        env_id: A registered agent_gym id, e.g. ``"agent_gym/ToolUse-v0"``.
        skyrl_id: The id SkyRL knows the env by (the dataset's ``env_class``); default ``env_id``.
        **env_kwargs: ``gym.make`` keyword arguments (``tools_in_prompt`` defaults to True).

    Returns:
        The skyrl-gym id.

    Raises:
        agent_gym.errors.ConfigError: ``env_id`` is not registered, or ``skyrl_id`` is already
            registered with another entry point or arguments.
        agent_gym.errors.MissingExtraError: skyrl-gym is not installed.
    """
    skyrl_gym = _skyrl_gym()
    env_id = _check_env_id(env_id)
    name = skyrl_id or env_id
    kwargs = {"env_id": env_id, "env_kwargs": dict(env_kwargs)}
    existing = skyrl_gym.registry.get(name)
    if existing is not None:
        if existing.entry_point == ENTRY_POINT and existing.kwargs == kwargs:
            return name
        raise ConfigError(f"skyrl_id: {name!r} is already registered with skyrl_gym with other arguments")
    skyrl_gym.register(id=name, entry_point=ENTRY_POINT, kwargs=kwargs)
    return name


def register_all(**env_kwargs: Any) -> list[str]:
    """:func:`register` every agent_gym env id under its own name; returns the ids."""
    _check_env_id("agent_gym/ToolUse-v0")
    return [register(env_id, **env_kwargs) for env_id in sorted(gym.registry) if env_id.startswith("agent_gym/")]


# ---------------------------------------------------------------------------------------------- generator


@dataclass(frozen=True)
class TrajectoryKey:
    """A trajectory id with the attributes of SkyRL's ``TrajectoryID``, for batches given without one.

    Attributes:
        instance_id: The advantage group (SkyRL groups rows by it).
        repetition_id: Position among the group's samples.
    """

    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        """``"<instance_id>_<repetition_id>"``, as SkyRL writes it."""
        return f"{self.instance_id}_{self.repetition_id}"


@dataclass
class _Group:
    """Rows of one prompt: they run as one ``collect`` task group (same task, same reset seed)."""

    env_id: str
    task: dict[str, Any] | None
    rows: list[int]


class AgentGymGenerator:
    """A SkyRL generator (``async generate(input_batch) -> GeneratorOutput``) running agent_gym episodes.

    Each input row is one episode of its env, run with ``policy`` on the generator's
    :class:`~agent_gym.rollout.EpisodeRunner` (:attr:`runner`, closed by :meth:`close`). Rows of
    one prompt (the same ``trajectory_ids[i].instance_id``; without trajectory ids, the same
    prompt and task) run as one task group: the same task and reset seed. The task is the row's
    ``env_extras[i][task_key]`` (a dict or its JSON text); rows without one let the env draw a
    task from a seed that advances with every group, so each batch gets new tasks. The env is
    ``env`` or, when None, the row's ``env_classes[i]`` (an agent_gym id).

    The policy samples with its own ``SamplingParams``: the batch's ``sampling_params`` (what
    SkyRL sends for evaluation) are not translated. Plug it in by overriding SkyRL's
    ``get_generator(self, cfg, tokenizer, inference_engine_client)``.

    Args:
        policy: An agent_gym policy (``VLLMPolicy`` on SkyRL's servers, ``TransformersPolicy``).
        env: The agent_gym env id every row runs, or None to read it from ``env_classes``.
        reward_assignment: Reward of each segment row: ``"episode"`` or ``"split"``
            (see :class:`~agent_gym.integrations.contract.RewardAssignment`).
        multi_segment: ``"rows"`` (one row per segment, set SkyRL's
            ``generator.step_wise_trajectories``) or ``"last"`` (the last segment only).
        task_key: The ``env_extras`` key holding the task.
        seed: First reset seed of rows without a task.
        pad_token_id: Id standing in for the empty prompt or response of an episode that failed
            before sampling (loss mask 0); default the policy tokenizer's pad or eos id, else 0.
        **collect_options: :class:`~agent_gym.rollout.RolloutOptions` fields of the runner (``n_parallel``: most
            episodes of one batch in flight, ``max_steps``,
            ``memory``, ``env_kwargs``, ``episode_timeout``, ``gamma``, ...).

    Raises:
        ValueError: An unknown ``reward_assignment`` or ``multi_segment``.
        TypeError: ``collect_options`` holds a keyword that is no ``RolloutOptions`` field, or one
            the generator sets itself (``tasks``, ``num_episodes``, ``samples_per_task``, ``seed``).
    """

    def __init__(
        self,
        policy: Any,
        env: str | None = None,
        *,
        reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
        multi_segment: str = "rows",
        task_key: str = "task",
        seed: int = 0,
        pad_token_id: int | None = None,
        **collect_options: Any,
    ) -> None:
        try:
            self.reward_assignment = RewardAssignment(reward_assignment)
        except ValueError:
            names = ", ".join(repr(a.value) for a in RewardAssignment)
            raise ValueError(f"reward_assignment: expected one of {names}, got {reward_assignment!r}") from None
        if multi_segment not in MULTI_SEGMENT_MODES:
            raise ValueError(f"multi_segment: expected one of {MULTI_SEGMENT_MODES}, got {multi_segment!r}")
        reserved = {"tasks", "num_episodes", "samples_per_task", "seed"} & set(collect_options)
        if reserved:
            raise TypeError(f"collect_options: the generator sets {sorted(reserved)} itself")
        checked = RolloutOptions(**{"progress": False, **collect_options})  # unknown keywords and bad values fail here
        if checked.backend != "local":
            raise ConfigError(f"collect_options: backend={checked.backend!r} is not supported; the generator runs "
                              "its episodes on its own local EpisodeRunner")
        self.policy = policy
        self.env = _check_env_id(env) if env is not None else None
        self.multi_segment = multi_segment
        self.task_key = task_key
        self.collect_options = {"progress": False, **collect_options}
        self.runner = EpisodeRunner(policy=policy, **self.collect_options)
        self._next_seed = int(seed)
        if pad_token_id is None:
            pad_token_id = filler_token_id(getattr(policy, "tokenizer", None))
        self.pad_token_id = int(pad_token_id)

    # ------------------------------------------------------------------ planning
    def _groups(self, input_batch: Mapping[str, Any]) -> list[_Group]:
        prompts = list(input_batch.get("prompts") or [])
        n = len(prompts)
        env_classes = list(input_batch.get("env_classes") or [None] * n)
        extras = list(input_batch.get("env_extras") or [{}] * n)
        ids = input_batch.get("trajectory_ids")
        if not (len(env_classes) == len(extras) == n) or (ids is not None and len(ids) != n):
            raise ValueError(f"input_batch: expected as many env_classes, env_extras and trajectory_ids as prompts "
                             f"({n})")
        groups: dict[str, _Group] = {}
        for i in range(n):
            env_id = self.env or _check_env_id(env_classes[i])
            task = _task_of(extras[i], self.task_key)
            if ids is not None:
                key = f"{env_id}\0{ids[i].instance_id}"
            else:
                key = json.dumps([env_id, prompts[i], task], sort_keys=True, default=str)
            group = groups.setdefault(key, _Group(env_id, task, []))
            if group.task != task:
                raise ValueError(f"input_batch: rows {group.rows[0]} and {i} share a trajectory instance id but "
                                 f"carry different tasks")
            group.rows.append(i)
        return list(groups.values())

    async def _run(self, groups: list[_Group]) -> list[Any]:
        """Run ``groups`` (same env, size and task presence) as one run of the runner; one trajectory per row."""
        k = len(groups[0].rows)
        seed = self._next_seed
        self._next_seed += len(groups)
        given = [g.task for g in groups if g.task is not None]  # all or none: batches split by task presence
        tasks = given or None
        specs = plan_episodes(tasks, None if tasks is not None else len(groups), k, seed)
        specs = [replace(spec, env=groups[0].env_id) for spec in specs]
        if specs:
            warn_if_truncated(self.policy)
        options = self.runner.options
        return await self.runner.run(specs, progress=options.progress, on_episode=options.on_episode)

    # ------------------------------------------------------------------ generate
    async def generate(self, input_batch: Mapping[str, Any]) -> dict[str, Any]:
        """Run one episode per input row; return SkyRL's ``GeneratorOutput`` fields, rows in input order.

        Args:
            input_batch: SkyRL's ``GeneratorInput``: ``prompts``, ``env_classes``,
                ``env_extras``, ``trajectory_ids`` (optional), ``sampling_params`` and
                ``batch_metadata`` (not used).

        Returns:
            A ``GeneratorOutput`` dict: ``prompt_token_ids``, ``response_ids``, ``rewards`` (one
            float per row), ``loss_masks``, ``rollout_logprobs``, ``stop_reasons``,
            ``trajectory_ids``, ``is_last_step``, ``rollout_metrics`` and ``env_metrics`` (per
            row: ``rollout_id``, ``group_key``, ``status``, ``masked``, ``segment_index``,
            ``segment_count``, ``loss_weight``, ``episode_reward``, ``error``: why a failed episode
            failed, else None).

        Raises:
            agent_gym.errors.ConfigError: A row names an env id that is not registered.
            ValueError: The batch's lists differ in length, or rows of one prompt carry
                different tasks.
        """
        groups = self._groups(input_batch)
        batches: dict[tuple[str, int, bool], list[_Group]] = {}
        for group in groups:
            batches.setdefault((group.env_id, len(group.rows), group.task is not None), []).append(group)
        results = await asyncio.gather(*(self._run(batch) for batch in batches.values()))
        trajectories: dict[int, Any] = {}
        for batch, trajs in zip(batches.values(), results, strict=True):
            k = len(batch[0].rows)
            for g, group in enumerate(batch):
                for s, row in enumerate(group.rows):
                    trajectories[row] = trajs[g * k + s]
        return self.to_output([trajectories[i] for i in range(len(trajectories))], input_batch.get("trajectory_ids"))

    def close(self) -> None:
        """Close the runner's envs."""
        self.runner.close()

    def to_output(self, trajectories: Sequence[Any], trajectory_ids: Sequence[Any] | None = None) -> dict[str, Any]:
        """The ``GeneratorOutput`` of episodes already collected (what :meth:`generate` returns).

        Args:
            trajectories: One episode per input row, in order (e.g. from ``collect``).
            trajectory_ids: SkyRL's ``TrajectoryID`` per episode; None gives each a
                :class:`TrajectoryKey` of its advantage group and its position in it.

        Returns:
            The ``GeneratorOutput`` dict described in :meth:`generate`.

        Raises:
            ValueError: ``trajectory_ids`` and ``trajectories`` differ in length.
        """
        if trajectory_ids is not None and len(trajectory_ids) != len(trajectories):
            raise ValueError(f"trajectory_ids: expected {len(trajectories)} ids, got {len(trajectory_ids)}")
        per_row: list[list[TrainingSegment]] = []
        for i, trajectory in enumerate(trajectories):
            if not trajectory.rollout_id:  # an episode whose env failed to reset may carry no id
                trajectory = dataclasses.replace(trajectory, rollout_id=f"{trajectory.group_id or 'episode'}#{i}")
            segments = training_segments(trajectory, reward_assignment=self.reward_assignment)
            per_row.append(segments[-1:] if self.multi_segment == "last" else segments)
        rewards = neutral_rewards((s.group_key, s.advantage_id, s.reward, s.masked) for segs in per_row for s in segs)
        out: dict[str, list[Any]] = {key: [] for key in (
            "prompt_token_ids", "response_ids", "rewards", "loss_masks", "rollout_logprobs", "stop_reasons",
            "trajectory_ids", "is_last_step", "env_metrics")}
        seen: dict[str, int] = {}
        for i, segments in enumerate(per_row):
            if trajectory_ids is not None:
                tid = trajectory_ids[i]
            else:
                key = segments[0].group_key
                tid = TrajectoryKey(key, seen.get(key, 0))
                seen[key] = tid.repetition_id + 1
            for segment in segments:
                self._append_row(out, segment, rewards[segment.advantage_id], tid)
        return {**out, "rollout_metrics": self._metrics(trajectories, len(out["response_ids"]))}

    def _append_row(self, out: dict[str, list[Any]], segment: TrainingSegment, reward: float, tid: Any) -> None:
        prompt = segment.prompt_ids or [self.pad_token_id]
        response, mask, logprobs = segment.response_ids, segment.response_mask, segment.response_logprobs
        if not response:  # an episode that failed before sampling: one masked stand-in id
            response, mask, logprobs = [self.pad_token_id], [0], [0.0]
        if segment.masked:  # no id of a failed episode enters the loss (logprobs 0 where masked, as everywhere)
            mask, logprobs = [0] * len(response), [0.0] * len(response)
        last = segment.is_last
        reason = "abort" if segment.masked else (stop_reason(segment.status) if last else "stop")
        out["prompt_token_ids"].append(prompt)  # the segment's own lists (made for this call)
        out["response_ids"].append(response)
        out["rewards"].append(float(reward))
        out["loss_masks"].append(mask)
        out["rollout_logprobs"].append(logprobs)
        out["stop_reasons"].append(reason)
        out["trajectory_ids"].append(tid)
        out["is_last_step"].append(bool(last or self.multi_segment == "last"))
        out["env_metrics"].append({
            "rollout_id": segment.rollout_id,
            "group_key": segment.group_key,
            "status": segment.status,
            "masked": segment.masked,
            "segment_index": segment.index,
            "segment_count": segment.count,
            "loss_weight": segment.loss_weight,
            "episode_reward": segment.episode_reward,
            "error": failure_reason(segment.trajectory),
        })

    @staticmethod
    def _metrics(trajectories: Sequence[Any], rows: int) -> dict[str, float]:
        statuses = [str(t.status) for t in trajectories]
        ran = [float(t.trajectory_reward) for t in trajectories if not is_infra_failure(t)]
        metrics: dict[str, float] = {
            "agent_gym/episodes": float(len(trajectories)),
            "agent_gym/rows": float(rows),
            "agent_gym/masked_episodes": float(len(trajectories) - len(ran)),
            "agent_gym/mean_reward": sum(ran) / len(ran) if ran else 0.0,
        }
        for status in sorted(set(statuses)):
            metrics[f"agent_gym/status/{status}"] = float(statuses.count(status))
        return metrics
