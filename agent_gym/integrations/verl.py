"""verl adapter: an agent loop that runs agent_gym episodes through verl's inference servers.

verl's agent-loop trainer builds one agent loop per dataset row and awaits
``run(sampling_params, **row)``, which must return an ``AgentLoopOutput``. Here:

* :class:`VerlServerPolicy` is an agent_gym policy whose turns are sampled by verl's
  ``server_manager.generate(request_id, *, prompt_ids=..., sampling_params=...)``: each turn's
  prompt ids come from a :class:`~agent_gym.policy.ChatTokenBuilder` (the previous turn's exact
  ids plus the new messages), and the ids and logprobs the server returns are kept as they are.
* ``AgentGymAgentLoop`` (built on verl's ``AgentLoopBase`` when first accessed, which also
  registers it as ``"agent_gym"`` with verl's ``@register``) runs one episode of an agent_gym env
  with that policy on the process's :class:`~agent_gym.rollout.EpisodeRunner` for its settings
  (:func:`settings_runner`: envs built once and reused through ``reset``, not one per row), and
  returns the episode as an ``AgentLoopOutput``
  (:func:`agent_loop_fields`). It is also loadable from an ``agent_loop_config_path`` YAML (a
  list of ``{name, _target_: agent_gym.integrations.verl.AgentGymAgentLoop, env_id, ...}``),
  verl's way for loops living in another package.

verl takes exactly one trajectory per dataset row. An episode that memory split into ``K``
segments (the prompt was rewritten) is handed over as its **last** segment, the one holding the
final answer; its earlier segments are not trained on (``extra_fields["agent_gym_segments"]``
says how many there were). Its reward follows the chosen
:class:`~agent_gym.integrations.contract.RewardAssignment` (``"split"`` gives it ``reward / K``);
verl takes no per-sample loss weight. An episode that failed for infrastructure reasons (server
error, env error, timeout) has an all-zero ``response_mask`` (it gives no gradient), reward 0.0
and ``extra_fields["agent_gym_masked"]`` set. An agent loop sees one row, not its group, so it
cannot keep that reward out of the group's baseline: verl's own ``grpo`` estimator averages it in;
:func:`~agent_gym.integrations.verl_advantage.grpo_advantages` (registered by
:func:`~agent_gym.integrations.verl_advantage.register_advantage_estimator` as ``agent_gym_grpo``)
leaves every row with an all-zero mask out of its group.

verl is imported only by ``AgentGymAgentLoop`` (``pip install 'agent-gym[verl]'``; verl 0.9.1
pins ``transformers<5.11``).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

from agent_gym.envs import register_envs
from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.integrations.contract import (
    RewardAssignment,
    failure_reason,
    filler_token_id,
    own_segments,
    parse_task,
    training_segments,
)
from agent_gym.integrations.verl_advantage import register_advantage_estimator
from agent_gym.memory import MemoryConfig
from agent_gym.policy import ChatTokenBuilder, SamplingParams, TokenPolicyBase
from agent_gym.rollout import EpisodeRunner, RolloutOptions, plan_episodes
from agent_gym.types import FinishReason, Message, PolicyOutput

__all__ = [
    "AGENT_NAME",
    "AgentGymAgentLoop",  # noqa: F822 - built on first access by __getattr__ (verl imported then)
    "EpisodeSettings",
    "VerlServerPolicy",
    "agent_loop_fields",
    "finish_reason",
    "run_row",
    "settings_runner",
    "shared_builder",
]

AGENT_NAME = "agent_gym"
"""The name ``AgentGymAgentLoop`` registers under with verl's ``@register`` (the rows' ``agent_name``)."""

_ABORTED = frozenset({"aborted", "abort", "cancelled"})
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                  "frequency_penalty")


_BUILDERS: weakref.WeakKeyDictionary[Any, dict[str, ChatTokenBuilder]] = weakref.WeakKeyDictionary()
_BUILDERS_LOCK = threading.Lock()


def shared_builder(tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> ChatTokenBuilder:
    """The process's :class:`~agent_gym.policy.ChatTokenBuilder` for ``tokenizer`` and these template kwargs.

    verl builds an agent loop (so a policy) per dataset row; building a token builder costs
    tens of milliseconds (the tokenizer's base renders), so the policies of a process share one
    per tokenizer, each under its own session prefix.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        chat_template_kwargs: Extra chat template variables.
    """
    key = json.dumps(dict(chat_template_kwargs or {}), sort_keys=True, default=str)
    with _BUILDERS_LOCK:
        builders = _BUILDERS.setdefault(tokenizer, {})
        if key not in builders:
            builders[key] = ChatTokenBuilder(tokenizer, chat_template_kwargs, track_retokenization=False)
        return builders[key]


def finish_reason(stop_reason: str | None, token_ids: Sequence[int], stop_ids: frozenset[int], budget: int) -> str:
    """agent_gym's finish reason of a turn verl's server answered with ``stop_reason``.

    verl's vLLM server says ``"completed"`` both for a stop and for the token limit (SGLang's
    says ``"stop"``/``"length"``), so a completed turn counts as ``"length"`` when it did not
    end on a stop id and used the whole budget.

    Args:
        stop_reason: ``TokenOutput.stop_reason`` (``"completed"``, ``"aborted"``, ``"stop"``,
            ``"length"``, ``"abort"`` or None).
        token_ids: The sampled ids.
        stop_ids: Ids that end a turn.
        budget: The ``max_tokens`` the turn was sent with.

    Returns:
        ``"stop"``, ``"length"`` or ``"error"`` (aborted: the turn is not kept).
    """
    reason = (stop_reason or "").lower()
    if reason in _ABORTED:
        return FinishReason.ERROR
    if reason == "length":
        return FinishReason.LENGTH
    if token_ids and token_ids[-1] in stop_ids:
        return FinishReason.STOP
    return FinishReason.LENGTH if len(token_ids) >= budget else FinishReason.STOP


class VerlServerPolicy(TokenPolicyBase):
    """Token-exact agent_gym policy sampling through verl's ``server_manager.generate``.

    Each turn sends the session's prompt ids with verl's ``sampling_params`` plus
    ``max_tokens`` (what is left of ``max_response_length`` and ``max_model_len``),
    ``logprobs=True`` and the template's stop ids; ``request_id`` is stable per session (verl
    routes a session's turns to one server). The token builder is shared by the policies of a
    process (:func:`shared_builder`); each policy keys its sessions with its own prefix, so
    policies whose episodes have the same ids do not meet.

    Args:
        server_manager: verl's ``LLMServerClient`` (``AgentLoopBase.server_manager``), or
            anything with ``async generate(request_id, *, prompt_ids, sampling_params)``
            returning an object with ``token_ids``, ``log_probs`` and ``stop_reason``.
        tokenizer: The model's tokenizer (with a chat template).
        sampling_params: verl's sampling parameters for the rollout (``temperature``,
            ``top_p``, ``top_k``, ``repetition_penalty``, ``logprobs``), sent as given.
        max_response_length: verl's ``rollout.response_length``: most ids after a segment's first
            prompt (sampled and environment ids).
        max_model_len: Context length (``prompt_length + response_length`` in verl).
        chat_template_kwargs: Extra chat template variables (verl's ``apply_chat_template_kwargs``).
        logprobs_mode: The logprobs verl's server returns (its ``rollout.logprobs_mode``,
            ``processed_logprobs`` by default): recorded in each turn's ``sampling``.

    Raises:
        ValueError: A tokenizer without a chat template; a sampling value out of range.
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        sampling_params: Mapping[str, Any] | None = None,
        *,
        max_response_length: int | None = None,
        max_model_len: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        logprobs_mode: str = "processed_logprobs",
    ) -> None:
        super().__init__()
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.request_params = {k: v for k, v in dict(sampling_params or {}).items()
                               if k not in ("max_tokens", "max_new_tokens", "logprobs")}
        known = {k: self.request_params[k] for k in _SAMPLING_KEYS if self.request_params.get(k) is not None}
        limit = max_response_length or max_model_len or SamplingParams().max_tokens
        self.sampling = SamplingParams(**known, max_tokens=min(limit, 64000), seed=None, truncation_ok=True)
        self.logprobs_mode = logprobs_mode
        self.max_response_length = max_response_length
        self.max_model_len = max_model_len
        self.builder = shared_builder(tokenizer, chat_template_kwargs)
        self.stop_ids = frozenset(self.builder.stop_ids)
        self._prefix = uuid.uuid4().hex[:12]
        self._remember_config(server_manager=server_manager, tokenizer=tokenizer, sampling_params=sampling_params,
                              max_response_length=max_response_length, max_model_len=max_model_len,
                              chat_template_kwargs=chat_template_kwargs, logprobs_mode=logprobs_mode)

    async def aact(
        self, messages: Sequence[Message], *, session_id: str, tools: list[dict] | None = None
    ) -> PolicyOutput:
        """Sample the next assistant turn through ``server_manager.generate``.

        An aborted request ends the episode (``POLICY_ERROR``); an exception of the server
        manager propagates (``collect`` records it as ``POLICY_ERROR`` too).
        """
        self._check_session(session_id)
        start = time.perf_counter()
        key = self._key(session_id)
        plan = self.builder.prepare(key, messages, self._session_tools(session_id, tools))
        budget = self._max_tokens(len(plan.prompt_ids), plan.response_length, self.max_model_len)
        if budget <= 0:
            why = f"prompt of {len(plan.prompt_ids)} ids leaves no room to sample"
            return self._truncated(plan.prompt_ids, plan.new_segment, start, why)
        params = {**self.request_params, "max_tokens": budget, "logprobs": True,
                  "stop_token_ids": sorted(self.stop_ids)}
        output = await self.server_manager.generate(request_id=key, prompt_ids=list(plan.prompt_ids),
                                                    sampling_params=params)
        ids = [int(i) for i in output.token_ids]
        logprobs = getattr(output, "log_probs", None)
        logprobs = [float(x) for x in logprobs] if logprobs is not None and len(logprobs) == len(ids) else None
        finish = finish_reason(getattr(output, "stop_reason", None), ids, self.stop_ids, budget)
        error = f"the server aborted the request ({output.stop_reason})" if finish == FinishReason.ERROR else None
        return self._commit_turn(plan, ids, logprobs, finish, start, stop_ids=self.stop_ids, error=error)

    def _key(self, session_id: str) -> str:
        """The session's id in the shared builder and verl's ``request_id``."""
        return f"{self._prefix}-{session_id}"

    def close_session(self, session_id: str) -> None:
        """Forget the session's token state (in the shared builder) and tools."""
        self.builder.close(self._key(session_id))
        super().close_session(session_id)


def agent_loop_fields(
    trajectory: Any,
    *,
    prompt_length: int,
    response_length: int,
    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
    with_logprobs: bool = True,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """The ``AgentLoopOutput`` fields of one episode (its last segment), and its ``AgentLoopMetrics``.

    The prompt is the segment's prompt ids and the response its sampled and environment ids
    with ``response_mask`` 1 on sampled ids; both fit verl's padded lengths: a longer response is
    cut to its first ``response_length`` ids (as verl's own loops do), a longer prompt keeps its
    last ``prompt_length`` ids and the sample is masked (its ids are no longer what the model saw).
    An episode that failed for infrastructure reasons is masked with ``reward_score`` 0.0 (its own
    total stays in ``extra_fields["agent_gym_episode_reward"]``).

    Args:
        trajectory: The episode (from ``collect``).
        prompt_length: verl's ``rollout.prompt_length``.
        response_length: verl's ``rollout.response_length``.
        reward_assignment: The segment's reward: ``"episode"`` or ``"split"``.
        with_logprobs: Fill ``response_logprobs`` (verl's ``sampling_params["logprobs"]``).
        pad_token_id: Stands in for an empty prompt or response (episode that failed first; masked).

    Returns:
        ``{"output": {prompt_ids, response_ids, response_mask, response_logprobs, reward_score,
        num_turns, extra_fields}, "metrics": {generate_sequences, tool_calls}}``.
    """
    segments = training_segments(trajectory, reward_assignment=reward_assignment)
    segment = own_segments(segments)[-1]  # the episode's own agent's last segment (not a subagent's)
    prompt, response = segment.prompt_ids, segment.response_ids  # lists made for this call
    mask, logprobs = segment.response_mask, segment.response_logprobs
    masked = segment.masked
    cut_prompt = len(prompt) > prompt_length
    if cut_prompt:
        prompt = prompt[-prompt_length:]
        masked = True
    cut_response = len(response) > response_length
    if cut_response:
        response, mask, logprobs = response[:response_length], mask[:response_length], logprobs[:response_length]
    if not prompt:
        prompt = [pad_token_id]
    if not response:
        response, mask, logprobs = [pad_token_id], [0], [0.0]
    if masked:
        mask, logprobs = [0] * len(response), [0.0] * len(response)
    conversation = getattr(trajectory, "chat_completions", None) or []
    metrics = getattr(trajectory, "metrics", None) or {}
    extra = {
        "agent_gym_rollout_id": segment.rollout_id,
        "agent_gym_group_key": segment.group_key,
        "agent_gym_status": segment.status,
        "agent_gym_masked": masked,
        "agent_gym_segments": segment.count,
        "agent_gym_role": segment.role,
        "agent_gym_episode_reward": segment.episode_reward,
        "agent_gym_truncated": cut_prompt or cut_response,
        "agent_gym_error": failure_reason(trajectory),
        # verl's fully-async names: the versions the sample's first and last sampled ids came from
        "param_version_start": segment.weight_version_start,
        "param_version_end": segment.weight_version_end,
    }
    return {
        "output": {
            "prompt_ids": prompt,
            "response_ids": response,
            "response_mask": mask,
            "response_logprobs": logprobs if with_logprobs else None,
            "reward_score": 0.0 if segment.masked else float(segment.reward),
            "num_turns": sum(1 for m in conversation if m.get("role") != "system"),
            "extra_fields": extra,
        },
        "metrics": {
            "generate_sequences": float(metrics.get("llm_time", 0.0)),
            "tool_calls": float(metrics.get("env_time", 0.0)),
        },
    }


def _plain(value: Any) -> Any:
    """``value`` with OmegaConf containers (hydra passes YAML mappings as DictConfig) made plain."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def _row_value(row: Mapping[str, Any], key: str) -> Any:
    """``row[key]``, else ``row["extra_info"][key]`` (verl keeps a row's extra columns in ``extra_info``)."""
    if row.get(key) is not None:
        return _plain(row[key])
    extra = _plain(row.get("extra_info")) or {}
    return extra.get(key) if isinstance(extra, Mapping) else None


def _row_task(row: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    return parse_task(_row_value(row, key), key)


def _check_env_id(env_id: Any) -> str:
    register_envs()
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
        raise ConfigError(f"env_id: expected a registered env id such as {known} (the loop's env_id or the row's "
                          f"env_id), got {env_id!r}")
    return env_id


def _memory(memory: Any) -> Any:
    memory = _plain(memory)
    return MemoryConfig(**memory) if isinstance(memory, Mapping) else memory


@dataclass(frozen=True)
class EpisodeSettings:
    """How ``AgentGymAgentLoop`` runs a row's episode (its ``agent_loop_config_path`` keywords).

    Attributes:
        env_id: The agent_gym env id; None reads each row's ``env_id``.
        options: The ``collect`` settings of the episode (one at a time, no progress bar).
        reward_assignment: The reward of the segment handed to verl.
        task_key: The row column (or ``extra_info`` key) holding the task.
        seed: Base reset seed of rows without a task (``seed + row["index"]``).
    """

    env_id: str | None = None
    options: RolloutOptions = field(default_factory=lambda: RolloutOptions(n_parallel=1, progress=False))
    reward_assignment: RewardAssignment = RewardAssignment.EPISODE
    task_key: str = "task"
    seed: int = 0

    @classmethod
    def build(
        cls,
        *,
        env_id: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        memory: Any = None,
        episode_timeout: float | None = None,
        reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
        task_key: str = "task",
        seed: int = 0,
    ) -> EpisodeSettings:
        """Check and gather the loop's keywords (YAML values may be OmegaConf containers).

        Args:
            env_id: The agent_gym env id, or None.
            env_kwargs: ``gym.make`` keyword arguments.
            max_steps: The env's turn limit.
            memory: A ``MemoryConfig``, its fields as a mapping, or a memory factory.
            episode_timeout: Seconds before an episode ends with ``TIMEOUT``.
            reward_assignment: ``"episode"`` or ``"split"``.
            task_key: The row column holding the task.
            seed: Base reset seed.

        Raises:
            agent_gym.errors.ConfigError: An unknown ``env_id`` or a bad collect setting.
            ValueError: An unknown ``reward_assignment``.
        """
        try:
            assignment = RewardAssignment(reward_assignment)
        except ValueError:
            names = ", ".join(repr(a.value) for a in RewardAssignment)
            raise ValueError(f"reward_assignment: expected one of {names}, got {reward_assignment!r}") from None
        options = RolloutOptions(n_parallel=1, progress=False, env_kwargs=_plain(env_kwargs), max_steps=max_steps,
                                 memory=_memory(memory), episode_timeout=episode_timeout)
        return cls(_check_env_id(env_id) if env_id is not None else None, options, assignment, task_key, int(seed))


async def run_row(
    settings: EpisodeSettings,
    policy: Any,
    row: Mapping[str, Any],
    *,
    prompt_length: int,
    response_length: int,
    with_logprobs: bool = True,
    pad_token_id: int = 0,
    runner: EpisodeRunner | None = None,
) -> dict[str, Any]:
    """Run the episode of one verl dataset row and return its :func:`agent_loop_fields`.

    What ``AgentGymAgentLoop.run`` does, without verl: the env is ``settings.env_id`` or the
    row's ``env_id``; the task is the row's ``settings.task_key`` (column or ``extra_info``
    entry, a dict or its JSON text), or, without one, the env's draw from
    ``settings.seed + row["index"]``.

    Args:
        settings: The loop's settings.
        policy: The episode's policy (a :class:`VerlServerPolicy`).
        row: The dataset row (verl's ``run`` keyword arguments).
        prompt_length: verl's ``rollout.prompt_length``.
        response_length: verl's ``rollout.response_length``.
        with_logprobs: Fill ``response_logprobs``.
        pad_token_id: Stand-in id of an empty prompt or response.
        runner: The runner whose envs the episode uses (:func:`settings_runner`); None opens one
            for this row and closes it after.

    Raises:
        agent_gym.errors.ConfigError: Neither the settings nor the row name a registered env id.
        ValueError: The row's task is not a dict or valid JSON.
    """
    env_id = settings.env_id or _check_env_id(_row_value(row, "env_id"))
    task = _row_task(row, settings.task_key)
    try:
        index = int(row.get("index", 0))
    except (TypeError, ValueError):
        index = 0
    (spec,) = plan_episodes([task] if task is not None else None, None if task is not None else 1,
                            seed=settings.seed + index)
    spec = replace(spec, env=env_id)
    if runner is not None:
        trajectory = await runner.run_episode(spec, policy=policy)
    else:
        async with EpisodeRunner(options=settings.options) as own:
            trajectory = await own.run_episode(spec, policy=policy)
    return agent_loop_fields(trajectory, prompt_length=prompt_length, response_length=response_length,
                             reward_assignment=settings.reward_assignment, with_logprobs=with_logprobs,
                             pad_token_id=pad_token_id)


_RUNNERS: dict[str, EpisodeRunner] = {}


def settings_runner(settings: EpisodeSettings) -> EpisodeRunner:
    """The process's runner for ``settings``: one per distinct settings, held for the process's lifetime.

    verl builds an agent loop object per row; the rows' episodes share this runner's envs
    (reused through ``reset``) instead of building one per row.
    """
    key = repr(settings)
    runner = _RUNNERS.get(key)
    if runner is None or runner.closed:
        runner = _RUNNERS[key] = EpisodeRunner(options=settings.options)
    return runner


def _loop_class() -> type:
    """Build ``AgentGymAgentLoop`` on verl's ``AgentLoopBase`` and register it as :data:`AGENT_NAME`."""
    try:
        from verl.experimental.agent_loop.agent_loop import (
            AgentLoopBase,
            AgentLoopMetrics,
            AgentLoopOutput,
            register,
        )
    except ImportError as exc:
        raise MissingExtraError("verl", "verl") from exc

    class AgentGymAgentLoop(AgentLoopBase):
        """verl agent loop running one agent_gym episode per dataset row.

        Built by verl with its own arguments (``trainer_config``, ``server_manager``,
        ``tokenizer``, ...) plus, from an ``agent_loop_config_path`` entry, the keywords below.
        A row gives the task (its ``task`` column or ``extra_info["task"]``: a task dict or its
        JSON text; without one the env draws a task from ``seed + row["index"]``, the same for
        the ``rollout.n`` samples of a row) and, when the loop has none, the ``env_id``.

        Args:
            *args: verl's ``AgentLoopBase`` arguments.
            env_id: The agent_gym env id (None: each row's ``env_id``).
            env_kwargs: ``gym.make`` keyword arguments.
            max_steps: The env's turn limit.
            memory: A ``MemoryConfig``, its fields as a mapping, or a memory factory.
            episode_timeout: Seconds before an episode ends with ``TIMEOUT``.
            reward_assignment: ``"episode"`` or ``"split"`` (see the module docs).
            task_key: The row column (or ``extra_info`` key) holding the task.
            seed: Base reset seed for rows without a task.
            **kwargs: verl's keyword arguments.
        """

        def __init__(
            self,
            *args: Any,
            env_id: str | None = None,
            env_kwargs: Mapping[str, Any] | None = None,
            max_steps: int | None = None,
            memory: Any = None,
            episode_timeout: float | None = None,
            reward_assignment: str = "episode",
            task_key: str = "task",
            seed: int = 0,
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            self.settings = EpisodeSettings.build(
                env_id=env_id, env_kwargs=env_kwargs, max_steps=max_steps, memory=memory,
                episode_timeout=episode_timeout, reward_assignment=reward_assignment, task_key=task_key, seed=seed)

        def policy(self, sampling_params: Mapping[str, Any]) -> VerlServerPolicy:
            """The policy of one episode: this loop's server manager, tokenizer and lengths."""
            rollout = self.rollout_config
            return VerlServerPolicy(
                self.server_manager,
                self.tokenizer,
                sampling_params,
                max_response_length=int(rollout.response_length),
                max_model_len=int(rollout.prompt_length) + int(rollout.response_length),
                chat_template_kwargs=_plain(self.apply_chat_template_kwargs),
                logprobs_mode=str(rollout.get("logprobs_mode", None) or "processed_logprobs"),
            )

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            """Run one episode for the row ``kwargs``; return it as an ``AgentLoopOutput``.

            Raises:
                agent_gym.errors.ConfigError: Neither the loop nor the row names a registered env id.
                ValueError: The row's task is not a dict or valid JSON.
            """
            pad = filler_token_id(self.tokenizer)
            fields = await run_row(
                self.settings,
                self.policy(sampling_params),
                kwargs,
                prompt_length=int(self.rollout_config.prompt_length),
                response_length=int(self.rollout_config.response_length),
                with_logprobs=bool(sampling_params.get("logprobs")),
                pad_token_id=int(pad),
                runner=settings_runner(self.settings),
            )
            return AgentLoopOutput(**fields["output"], metrics=AgentLoopMetrics(**fields["metrics"]))

    AgentGymAgentLoop.__module__ = __name__
    AgentGymAgentLoop.__qualname__ = "AgentGymAgentLoop"
    register_advantage_estimator()
    return register(AGENT_NAME)(AgentGymAgentLoop)


_built: dict[str, type] = {}
_LAZY: dict[str, Callable[[], type]] = {"AgentGymAgentLoop": _loop_class}


def __getattr__(name: str) -> Any:
    build = _LAZY.get(name)
    if build is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        _built[name] = build()
    return _built[name]
