"""TRL: agent_gym episodes as ``GRPOTrainer`` rollouts (``rollout_func``) or as an ``environment_factory``.

:func:`rollout_func` returns the callable ``GRPOTrainer(rollout_func=...)`` calls with the batch's
prompts and the trainer. It runs one agent_gym episode per prompt entry on the
:class:`~agent_gym.rollout.EpisodeRunner` it holds for its lifetime (envs built once, reused through
``reset``; closed by ``close``) and returns, per entry, the token-exact sample TRL trains on:

* ``prompt_ids``: the episode's prompt ids as the policy saw them;
* ``completion_ids``: the sampled ids and the environment's ids between turns (tool results,
  user nudges, chat-template glue), exactly as the model read them;
* ``logprobs``: the policy's logprob of each sampled id (0 on environment ids);
* ``env_mask``: 1 on sampled ids, 0 on environment ids (TRL multiplies its loss mask by it), 0
  everywhere for an episode that failed for infrastructure reasons;
* extra fields TRL hands to the reward functions: ``episode_reward`` (the reward under the
  chosen :class:`~agent_gym.integrations.contract.RewardAssignment`, None for an episode that
  failed for infrastructure reasons), ``episode_status``, ``episode_metrics``, ``episode_segments``,
  ``episode_failure``, ``rollout_id``, ``task_id`` and ``model_version`` (the weight version the
  sample's oldest sampled id came from, -1 when unknown: what TRL's asynchronous GRPO trainer
  compares with its current version to measure a sample's staleness).

Pass :func:`episode_reward` (or :func:`metric_reward`) as the reward function. An episode that failed
for infrastructure reasons (env error, policy error, timeout; see
:func:`~agent_gym.integrations.contract.is_infra_failure`) gets reward None, which TRL treats as
unscorable: it leaves the group baseline and its advantage is 0, so the trainer never learns from a
fake zero; its ``env_mask`` is all 0, so none of its ids enters TRL's loss, token count or KL term.
An episode that failed before its first turn has no ids: its sample is one masked pad id of prompt
and one of completion (:func:`episode_sample`), a row TRL accepts anywhere in a batch.

**Which task a prompt runs.** TRL gives the rollout function the dataset's ``prompt`` values only.
A prompt is a task: the task dict itself, its JSON (what :func:`task_dataset` writes), or the task's
``id`` (looked up in ``tasks=`` or in the env's own tasks). The env builds the conversation (system
prompt, tools, question) from the task, as in every agent_gym episode.

**Groups.** TRL's list already holds each prompt ``num_generations`` times in a row and TRL
normalises rewards in consecutive blocks of ``num_generations``; the rollout function runs one
episode per entry, in order, and checks that each block holds one task (the contract's advantage
group, :func:`~agent_gym.integrations.contract.advantage_group_key`), so TRL's positional groups
are the task groups.

**The policy.** With ``use_vllm=True`` and ``vllm_mode="server"`` the episodes sample from the
trainer's vLLM server (:class:`~agent_gym.VLLMPolicy`, token-in ``/v1/completions``; TRL syncs the
weights to it before calling the rollout function). Otherwise they sample from the trainer's own
model in process (:class:`~agent_gym.TransformersPolicy` on the live model object, so always the
current weights; its KV caches are dropped before every call). The sampling follows the trainer's
``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty`` and
``max_completion_length`` (the budget of completion ids per episode), and the logprobs are
``processed_logprobs`` (after temperature), which is what TRL computes from its own forward pass
and what TRL's ``trl vllm-serve`` runs with.

**Episodes with several segments** (a memory that rewrote the prompt): TRL takes one completion
per prompt, so the sample is the episode's *last* segment, exactly as the model saw it. Gluing the
segments into one completion would ask the trainer to score later turns in a context the model
never saw (the rewritten prompt is not the earlier conversation), so the logprobs would not match;
the earlier segments are not trained on (``episode_segments`` says how many there were). Use an
adapter with per-segment samples (slime, SkyRL step-wise) to train on every segment.

:func:`~agent_gym.integrations.trl_environment.environment_factory` is the other route: TRL's own
tool loop, with an env's tools as methods. The dataset and reward helpers live in
:mod:`agent_gym.integrations.trl_data`.

Example:
    >>> from trl import GRPOConfig, GRPOTrainer  # doctest: +SKIP
    >>> from agent_gym.integrations.trl import rollout_func  # doctest: +SKIP
    >>> from agent_gym.integrations.trl_data import episode_reward, task_dataset  # doctest: +SKIP
    >>> trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
    ...                       train_dataset=task_dataset("agent_gym/ToolUse-v0"),
    ...                       reward_funcs=episode_reward,
    ...                       rollout_func=rollout_func("agent_gym/ToolUse-v0", max_steps=6))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.integrations.contract import (
    RewardAssignment,
    advantage_group_key,
    filler_token_id,
    own_segments,
    training_segments,
)
from agent_gym.types import EpisodeStatus

__all__ = [
    "RolloutFunction",
    "episode_sample",
    "rollout_func",
]

_INVALID_TASK_ACTIONS = ("raise", "mask")
_SEED_STRIDE = 7919  # collect seeds of successive calls: far apart, so episode ids never repeat
_RESOLVED_CACHE = 65536  # prompts whose task is remembered (a dataset's prompts repeat every epoch)


def rollout_func(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    tasks: Sequence[Mapping[str, Any]] | None = None,
    policy: Any = None,
    sampling: Mapping[str, Any] | Any = None,
    max_steps: int | None = None,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    memory: Any = None,
    n_parallel: int | None = None,
    episode_timeout: float | None = None,
    seed: int = 0,
    logprobs_mode: str = "processed_logprobs",
    invalid_tasks: str = "raise",
    client_options: Mapping[str, Any] | None = None,
) -> RolloutFunction:
    """The ``(prompts, trainer) -> dict`` that ``GRPOTrainer(rollout_func=...)`` calls.

    Args:
        env_id: A registered env id (``"agent_gym/ToolUse-v0"``).
        env_kwargs: Extra ``gym.make`` keyword arguments.
        tasks: Tasks a prompt may name by ``id`` (before the env's own tasks).
        policy: None (the trainer's vLLM server with ``use_vllm``, else its model in process), a
            ``Policy`` used as is (keeping its weights current is then yours), or a callable
            ``trainer -> Policy`` called on every batch.
        sampling: ``SamplingParams`` fields overriding those taken from the trainer's config.
        max_steps: The env's turn limit.
        reward_assignment: The reward a sample carries (see
            :class:`~agent_gym.integrations.contract.RewardAssignment`): ``"episode"`` (the episode's
            reward) or ``"split"`` (reward / number of segments; the sample is one segment).
        memory: A memory configuration for the episodes (see ``collect``).
        n_parallel: Episodes in flight (None: the whole batch).
        episode_timeout: Seconds before an episode ends with ``TIMEOUT`` (a masked sample).
        seed: Base seed of the envs' resets and the episode ids (the sampling seed is the trainer's).
        logprobs_mode: The mode of the recorded logprobs for the policies built here:
            ``"processed_logprobs"`` (after temperature; what TRL's forward pass computes and what
            ``trl vllm-serve`` runs with) or ``"raw_logprobs"`` (for a server run that way).
        invalid_tasks: ``"raise"`` (a task the env rejects raises ``ConfigError``) or ``"mask"``
            (its sample is a masked placeholder whose ``episode_failure`` says why).
        client_options: ``ClientOptions`` fields of the vLLM client (timeouts, retries) with ``use_vllm``.

    Returns:
        A :class:`RolloutFunction`.

    Raises:
        ConfigError: ``env_id`` is not registered, or an argument is invalid.
    """
    return RolloutFunction(env_id, env_kwargs=env_kwargs, tasks=tasks, policy=policy, sampling=sampling,
                           max_steps=max_steps, reward_assignment=reward_assignment, memory=memory,
                           n_parallel=n_parallel, episode_timeout=episode_timeout, seed=seed,
                           logprobs_mode=logprobs_mode, invalid_tasks=invalid_tasks, client_options=client_options)


class RolloutFunction:
    """Runs one agent_gym episode per TRL prompt entry (built by :func:`rollout_func`; see the module doc).

    Attributes:
        env_id: The env the episodes run in.
        last_trajectories: The episodes of the latest call, in prompt order (None where a
            rejected task was masked without running).
        calls: How many batches it has run.
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        policy: Any = None,
        sampling: Mapping[str, Any] | Any = None,
        max_steps: int | None = None,
        reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
        memory: Any = None,
        n_parallel: int | None = None,
        episode_timeout: float | None = None,
        seed: int = 0,
        logprobs_mode: str = "processed_logprobs",
        invalid_tasks: str = "raise",
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        import gymnasium as gym

        from agent_gym.checks import check_choice, check_int

        if not isinstance(env_id, str):
            raise TypeError(f"env_id: expected a registered env id (str), got {type(env_id).__name__}")
        try:
            gym.spec(env_id)
        except gym.error.Error as exc:
            known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
            raise ConfigError(f"env_id: {env_id!r} is not a registered env ({exc}); agent_gym's ids: "
                              f"{', '.join(known)}") from None
        try:
            self.reward_assignment = RewardAssignment(reward_assignment)
        except ValueError:
            names = ", ".join(repr(a.value) for a in RewardAssignment)
            raise ConfigError(f"reward_assignment: expected one of {names}, got {reward_assignment!r}") from None
        if n_parallel is not None:
            check_int("n_parallel", n_parallel, low=1)
        if max_steps is not None:
            check_int("max_steps", max_steps, low=1)
        check_choice("logprobs_mode", logprobs_mode, ("raw_logprobs", "processed_logprobs"))
        check_choice("invalid_tasks", invalid_tasks, _INVALID_TASK_ACTIONS)
        if policy is not None and not callable(policy) and not _is_policy(policy):
            raise TypeError(f"policy: expected None, a Policy or a callable trainer -> Policy, "
                            f"got {type(policy).__name__}")
        if sampling is not None:
            from agent_gym import SamplingParams

            try:
                SamplingParams.coerce(sampling if isinstance(sampling, SamplingParams) else dict(sampling))
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"sampling: expected SamplingParams fields, got {sampling!r} ({exc})") from None
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.tasks_by_id = {str(t["id"]): dict(t) for t in (tasks or ()) if isinstance(t, Mapping) and "id" in t}
        self.policy = policy
        self.sampling = sampling
        self.max_steps = max_steps
        self.memory = memory
        self.n_parallel = n_parallel
        self.episode_timeout = episode_timeout
        self.seed = check_int("seed", seed)
        self.logprobs_mode = logprobs_mode
        self.invalid_tasks = invalid_tasks
        self.client_options = dict(client_options) if client_options is not None else None
        self.calls = 0
        self.last_trajectories: list[Any] | None = None
        self._probe: Any = None
        self._resolved: dict[str, dict[str, Any]] = {}  # prompt -> its task, checked
        self._env_tasks: dict[str, dict[str, Any]] | None = None
        self._cached_policy: tuple[Any, Any] | None = None  # (key, policy)
        self._runner: Any = None  # the EpisodeRunner of every call, built on first use
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the call TRL makes
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        """Run one episode per entry of ``prompts`` and return TRL's rollout fields (see the module doc).

        Args:
            prompts: The batch's ``prompt`` values (each task ``num_generations`` times in a row).
            trainer: The ``GRPOTrainer`` (its config, model, tokenizer and vLLM settings are read).

        Returns:
            ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and the ``episode_*``,
            ``rollout_id`` and ``task_id`` fields, one entry per prompt, in order.

        Raises:
            ConfigError: A prompt names no task, the env rejects a task (``invalid_tasks="raise"``),
                or a block of ``num_generations`` entries holds more than one task.
        """
        with self._lock:
            return self._run(list(prompts), trainer)

    def _run(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        from agent_gym.rollout import plan_episodes
        from agent_gym.rollout.collection import warn_if_truncated
        from agent_gym.utils.runtime import run_sync

        resolved = [self._resolve(i, prompt) for i, prompt in enumerate(prompts)]
        runnable = [i for i, (_, problem) in enumerate(resolved) if problem is None]
        tokenizer = _tokenizer_of(trainer)
        trajectories: list[Any] = [None] * len(prompts)
        if runnable:
            specs = plan_episodes([resolved[i][0] for i in runnable], None, seed=self._collect_seed(trainer))
            runner = self._episode_runner()
            with self._policy_for(trainer) as policy:
                warn_if_truncated(policy)
                ran = run_sync(lambda: runner.run(specs, policy=policy, n_parallel=self.n_parallel or len(specs)),
                               release=[policy])
            for i, trajectory in zip(runnable, ran, strict=True):
                trajectories[i] = trajectory
        self.calls += 1
        self.last_trajectories = trajectories
        self._check_groups(trajectories, trainer)
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                "episode_reward", "episode_status", "episode_metrics",
                                                "episode_segments", "episode_failure", "rollout_id", "task_id",
                                                "model_version")}
        filler = filler_token_id(tokenizer)
        for (task, problem), trajectory in zip(resolved, trajectories, strict=True):
            if trajectory is None:
                sample = _placeholder(task, problem, filler)
            else:
                sample = episode_sample(trajectory, reward_assignment=self.reward_assignment, pad_token_id=filler)
            for key, value in sample.items():
                out[key].append(value)
        return out

    def _collect_seed(self, trainer: Any) -> int:
        """A base seed no earlier call and no other process uses (episode ids and sampling seeds derive from it)."""
        process = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0) or 0)
        return self.seed + _SEED_STRIDE * self.calls + 1_000_003 * process

    # ------------------------------------------------------------------ tasks
    def _resolve(self, index: int, prompt: Any) -> tuple[dict[str, Any], str | None]:
        """The task of one prompt entry and, when the env rejects it (``invalid_tasks="mask"``), why.

        A prompt string whose task was accepted before (the ``num_generations`` repeats, later
        epochs) is not parsed and checked again.
        """
        cached = self._resolved.get(prompt) if isinstance(prompt, str) else None
        if cached is not None:
            return dict(cached), None
        task, problem = self._check_task(index, self._task_of(index, prompt))
        if problem is None and isinstance(prompt, str):
            if len(self._resolved) >= _RESOLVED_CACHE:
                self._resolved.clear()
            self._resolved[prompt] = task
        return task, problem

    def _check_task(self, index: int, task: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """``task`` and None when the env accepts it, else why not (or ``ConfigError``)."""
        try:
            self._probe_env().unwrapped.validate_tasks([dict(task)])
        except (TypeError, ValueError) as exc:
            message = f"prompts[{index}]: {self.env_id} rejects the task {task.get('id', '?')!r}: {exc}"
            if self.invalid_tasks == "raise":
                raise ConfigError(message) from None
            return task, message
        return task, None

    def _task_of(self, index: int, prompt: Any) -> dict[str, Any]:
        if isinstance(prompt, Mapping):
            return dict(prompt)
        if isinstance(prompt, str):
            text = prompt.strip()
            if text.startswith("{"):
                try:
                    task = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"prompts[{index}]: expected a task's JSON, got invalid JSON ({exc})") from None
                if not isinstance(task, dict):
                    raise ConfigError(f"prompts[{index}]: expected a JSON object, got {type(task).__name__}")
                return task
            if text in self.tasks_by_id:
                return dict(self.tasks_by_id[text])
            env_tasks = self._tasks_of_env()
            if text in env_tasks:
                return dict(env_tasks[text])
            raise ConfigError(f"prompts[{index}]: {text[:80]!r} is neither a task's JSON nor the id of a task of "
                              f"{self.env_id} or of tasks=")
        raise ConfigError(f"prompts[{index}]: expected a task (its dict, JSON or id), got {type(prompt).__name__}; "
                          f"build the dataset with agent_gym.integrations.trl_data.task_dataset")

    def _probe_env(self) -> Any:
        if self._probe is None:
            import gymnasium as gym

            kwargs = dict(self.env_kwargs)
            if self.max_steps is not None:
                kwargs["max_steps"] = self.max_steps
            self._probe = gym.make(self.env_id, **kwargs)
        return self._probe

    def _tasks_of_env(self) -> dict[str, dict[str, Any]]:
        if self._env_tasks is None:
            self._env_tasks = {str(t["id"]): t for t in self._probe_env().unwrapped.tasks}
        return self._env_tasks

    def _check_groups(self, trajectories: list[Any], trainer: Any) -> None:
        """Each block of ``num_generations`` entries must be one advantage group: TRL groups by position."""
        size = int(getattr(trainer, "num_generations", 0) or 0)
        accelerator = getattr(trainer, "accelerator", None)
        if size < 2 or len(trajectories) % size or getattr(accelerator, "num_processes", 1) != 1:
            return
        for start in range(0, len(trajectories), size):
            block = {advantage_group_key(t) for t in trajectories[start:start + size] if t is not None}
            if len(block) > 1:
                raise ConfigError(f"prompts[{start}:{start + size}]: expected one task per block of num_generations="
                                  f"{size} entries (TRL's GRPO groups by position), got {sorted(block)}")

    # ------------------------------------------------------------------ the policy
    @contextlib.contextmanager
    def _policy_for(self, trainer: Any) -> Iterator[Any]:
        if self.policy is not None:
            yield self.policy if _is_policy(self.policy) else self.policy(trainer)
            return
        args = getattr(trainer, "args", None)
        if getattr(trainer, "use_vllm", getattr(args, "use_vllm", False)):
            yield self._server_policy(trainer)
            return
        with self._live_model(trainer) as model:
            was_training = model.training  # before the policy is built: building it puts the model in eval mode
            try:
                policy = self._local_policy(trainer, model)
                with policy.engine.lock:
                    policy.engine.clear()  # cached keys/values belong to the weights before the last step
                model.eval()
                try:
                    yield policy
                finally:
                    policy.close()
            finally:
                model.train(was_training)

    @contextlib.contextmanager
    def _live_model(self, trainer: Any) -> Iterator[Any]:
        accelerator = getattr(trainer, "accelerator", None)
        if accelerator is None:
            yield trainer.model
            return
        try:
            from trl.models import unwrap_model_for_generation
        except ImportError:
            raise MissingExtraError("trl", "trl") from None
        args = trainer.args
        with unwrap_model_for_generation(
            getattr(trainer, "model_wrapped", trainer.model), accelerator,
            gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
            gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
        ) as model:
            yield model

    def _local_policy(self, trainer: Any, model: Any) -> Any:
        from agent_gym import TransformersPolicy

        sampling = self._sampling(trainer)
        key = ("local", id(model), sampling.model_dump_json())
        if self._cached_policy is None or self._cached_policy[0] != key:
            policy = TransformersPolicy(model, _tokenizer_of(trainer), sampling=sampling,
                                        max_response_length=_completion_budget(trainer),
                                        logprobs_mode=self.logprobs_mode)
            self._cached_policy = (key, policy)
        return self._cached_policy[1]

    def _server_policy(self, trainer: Any) -> Any:
        from agent_gym import VLLMPolicy

        args = trainer.args
        if getattr(args, "vllm_mode", "server") != "server":
            raise ConfigError("use_vllm: agent_gym's rollout function samples through a vLLM server; set "
                              "GRPOConfig(vllm_mode='server') (trl vllm-serve) or pass policy=")
        base_url = getattr(args, "vllm_server_base_url", None) or (
            f"http://{getattr(args, 'vllm_server_host', '0.0.0.0')}:{getattr(args, 'vllm_server_port', 8000)}")
        client = getattr(getattr(trainer, "vllm_generation", None), "vllm_client", None)
        model_name = getattr(client, "model", None)
        sampling = self._sampling(trainer)
        key = ("server", base_url, model_name, sampling.model_dump_json())
        if self._cached_policy is None or self._cached_policy[0] != key:
            policy = VLLMPolicy(base_url, _tokenizer_of(trainer), sampling=sampling, model=model_name,
                                max_response_length=_completion_budget(trainer), logprobs_mode=self.logprobs_mode,
                                client_options=self.client_options)
            self._cached_policy = (key, policy)
        return self._cached_policy[1]

    def _sampling(self, trainer: Any) -> Any:
        """The trainer's sampling settings as ``SamplingParams``, overridden by ``sampling=``."""
        from agent_gym import SamplingParams

        args = getattr(trainer, "args", None)

        def setting(name: str, default: Any) -> Any:
            value = getattr(trainer, name, None)
            if value is None:
                value = getattr(args, name, None)
            return default if value is None else value

        top_k = int(setting("top_k", 0))
        fields: dict[str, Any] = {
            "temperature": float(setting("temperature", 1.0)),
            "top_p": float(setting("top_p", 1.0)),
            "top_k": top_k if top_k > 0 else -1,
            "min_p": float(setting("min_p", 0.0)),
            "repetition_penalty": float(setting("repetition_penalty", 1.0)),
            "max_tokens": min(_completion_budget(trainer) or 128, 64000),
            "logprobs": 0,
        }
        train_seed = getattr(args, "seed", None)
        if isinstance(train_seed, int):
            fields["seed"] = train_seed % 65536
        fields["truncation_ok"] = fields["top_k"] > 0 or fields["top_p"] < 1.0 or fields["min_p"] > 0.0
        if self.sampling is not None:
            override = (self.sampling.model_dump(exclude_unset=True) if hasattr(self.sampling, "model_dump")
                        else dict(self.sampling))  # only the fields the caller set
            fields.update(override)
        return SamplingParams(**fields)

    def _episode_runner(self) -> Any:
        """The runner all calls' episodes run on (built on first use; its envs are reused through ``reset``)."""
        if self._runner is None:
            from agent_gym.rollout import EpisodeRunner

            self._runner = EpisodeRunner(self.env_id, n_parallel=self.n_parallel or 8, max_steps=self.max_steps,
                                         env_kwargs=self.env_kwargs or None, memory=self.memory,
                                         episode_timeout=self.episode_timeout, progress=False)
        return self._runner

    def close(self) -> None:
        """Close the episode runner's envs, the policy built for the trainer and the env used to check tasks."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._cached_policy is not None:
            self._cached_policy[1].close()
            self._cached_policy = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None


def _is_policy(obj: Any) -> bool:
    return callable(getattr(obj, "aact", None)) and callable(getattr(obj, "close_session", None))


def _tokenizer_of(trainer: Any) -> Any:
    processing = getattr(trainer, "processing_class", None)
    return getattr(processing, "tokenizer", None) or processing


def _completion_budget(trainer: Any) -> int | None:
    value = getattr(trainer, "max_completion_length", None)
    if value is None:
        value = getattr(getattr(trainer, "args", None), "max_completion_length", None)
    return int(value) if value else None


def episode_sample(
    trajectory: Any,
    *,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """The TRL rollout fields of one episode: its own agent's last segment (see the module doc).

    An episode that failed for infrastructure reasons has an all-zero ``env_mask`` (none of its ids
    enters TRL's loss, its token count or its KL term), logprobs 0 and ``episode_reward`` None
    (TRL leaves it out of its group's baseline, advantage 0). An empty prompt or completion (an
    episode that failed before its first turn) is one masked ``pad_token_id``: TRL needs at least
    one id on each side.

    Args:
        trajectory: The episode (from ``collect``).
        reward_assignment: The reward the sample carries (``"episode"`` or ``"split"``).
        pad_token_id: Stand-in id of an empty prompt or completion.

    Returns:
        ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``, ``episode_reward``,
        ``episode_status``, ``episode_metrics``, ``episode_segments``, ``episode_failure``,
        ``rollout_id``, ``task_id`` and ``model_version``.
    """
    segments = training_segments(trajectory, reward_assignment=reward_assignment)
    segment = own_segments(segments)[-1]  # the episode's own agent's last segment (not a subagent's)
    prompt = segment.prompt_ids or [pad_token_id]
    completion, mask, logprobs = segment.response_ids, segment.response_mask, segment.response_logprobs
    if not completion:
        completion, mask, logprobs = [pad_token_id], [0], [0.0]
    failure = None
    if segment.masked:
        mask, logprobs = [0] * len(completion), [0.0] * len(completion)
        steps = getattr(trajectory, "steps", None) or []
        info = steps[-1].info if steps else {}
        failure = str(info.get("error") or info.get("end_reason") or segment.status)
    task = getattr(trajectory, "task", None)
    return {
        "prompt_ids": prompt,
        "completion_ids": completion,
        "logprobs": logprobs,  # the contract's: 0 where the mask is 0
        "env_mask": mask,
        "episode_reward": None if segment.masked else float(segment.reward),
        "episode_status": segment.status,
        "episode_metrics": {k: float(v) for k, v in trajectory.metrics.items() if isinstance(v, (int, float))},
        "episode_segments": segment.count,
        "episode_failure": failure,
        "rollout_id": segment.rollout_id,
        "task_id": str(task.get("id", "")) if isinstance(task, Mapping) else "",
        "model_version": segment.weight_version_start,
    }


def _placeholder(task: Mapping[str, Any], problem: str | None, filler: int) -> dict[str, Any]:
    """The masked sample of a prompt whose task the env rejected (``invalid_tasks="mask"``)."""
    return {
        "prompt_ids": [filler],
        "completion_ids": [filler],
        "logprobs": [0.0],
        "env_mask": [0],
        "episode_reward": None,
        "episode_status": EpisodeStatus.ENV_ERROR.value,
        "episode_metrics": {},
        "episode_segments": 0,
        "episode_failure": problem,
        "rollout_id": "",
        "task_id": str(task.get("id", "")),
        "model_version": -1,
    }
