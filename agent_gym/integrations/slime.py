"""slime and vime: a custom generate function, a reward function and a GRPO reward post-process.

slime (``--custom-generate-function-path agent_gym.integrations.slime.generate``) and vime call
:func:`generate` once per sample. It runs one episode of an agent_gym env against the
rollout router named in ``args`` (on the process's :class:`~agent_gym.rollout.EpisodeRunner` for
that env and these settings: envs built once, reused through ``reset``) and fills the sample the
way their trainers read it:

* the router: ``args.sglang_router_ip``/``sglang_router_port`` (slime) -> SGLang's
  ``POST /generate``, or ``args.vllm_router_ip``/``vllm_router_port`` (vime) -> vLLM's
  ``POST /inference/v1/generate``; requests carry the sample's ``session_id`` in
  ``x-session-id`` and ``X-SMG-Routing-Key`` (both routers' consistent hashing);
* the env: ``args.agent_gym_env_id`` (required), ``args.agent_gym_env_kwargs`` (a dict or its
  JSON text), ``args.agent_gym_max_steps``, ``args.agent_gym_episode_timeout`` (seconds),
  ``args.agent_gym_memory`` (a ``MemoryConfig`` or a memory factory, as ``collect`` takes);
* the task: ``sample.metadata[args.agent_gym_task_key]`` (default key ``"task"``; a dict or its
  JSON text), else ``sample.label`` when it is a JSON object, else the env draws one from a
  seed (``sample.index``);
* the model: ``args.hf_checkpoint`` (tokenizer and model name), ``args.rollout_max_context_len``
  (the context length, else the server's ``/v1/models``);
* the sampling: slime's dict (``max_new_tokens``, ``stop``, ``stop_token_ids``, ``temperature``,
  ``top_p``, ``top_k``, ``min_new_tokens``, ``sampling_seed``/``seed``, penalties) becomes
  agent_gym's :class:`~agent_gym.policy.SamplingParams` (``max_new_tokens`` bounds each turn
  and each segment's response); ``skip_special_tokens``, ``no_stop_trim`` and
  ``spaces_between_special_tokens`` need no translation (the ids are recorded as sampled and
  decoded locally), and are recorded in ``metadata["sampling"]`` with the rest.

Each trainable segment of the episode becomes one sample, built by
:func:`~agent_gym.integrations.slime_samples.slime_fields` exactly as :func:`agent_gym.export.to_slime_samples`
builds its dicts: ``tokens`` (prompt + response ids), ``response_length``, ``loss_mask`` (1 on sampled
ids, 0 on tool and user ids), ``rollout_log_probs`` (the server's, 0 where masked), ``status``,
``reward``, ``remove_sample``, ``session_id``, ``rollout_id`` and ``metadata`` (the keys of
:data:`~agent_gym.integrations.slime_samples.SAMPLE_METADATA_KEYS`, ``env_id``, ``sampling``: the
episode's recorded sampling, ``slime_sampling_params``: the dict slime sent). An episode of one
segment fills and returns the given sample; a summarized episode returns a ``list`` of copies sharing
one ``rollout_id`` (the sample's, else its ``index``).

Statuses (slime's ``Sample.Status``): ``ENV_DONE``/``MAX_STEPS`` -> COMPLETED,
``TRUNCATION``/``PROMPT_TRUNCATION`` -> TRUNCATED, a request the server aborted -> ABORTED, other
infrastructure failures (server down, env error, timeout) -> FAILED. ABORTED and FAILED samples
have ``remove_sample=True`` (slime zeroes the loss of such a sample; the status alone is not
masked), an all-zero ``loss_mask``, a reward of 0.0 and ``metadata["masked"]``; an episode that
failed before sampling anything is one masked pad id after its prompt (never an empty response).
Bad configuration (an unknown env id, a missing ``args`` field) raises
:class:`~agent_gym.errors.ConfigError`.

Rewards per segment follow ``args.agent_gym_reward_assignment`` (``"episode"``, slime's
full reward on each segment, or ``"split"``, ``reward / K``; see
:class:`~agent_gym.integrations.contract.RewardAssignment`). :func:`reward_func`
(``--custom-rm-path``) returns the rewards :func:`generate` recorded, for one sample or a list;
:func:`reward_post_process` (``--custom-reward-post-process-path``) normalises GRPO
advantages within ``group_index`` groups, counting each rollout once.

slime is not on PyPI: the functions take any object with the attributes of slime's ``Sample``
(``slime/utils/types.py``); statuses are taken from ``type(sample).Status`` when it exists.
"""

from __future__ import annotations

import copy
import json
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agent_gym.envs import register_envs
from agent_gym.errors import ConfigError
from agent_gym.integrations.contract import RewardAssignment, filler_token_id, group_advantages
from agent_gym.integrations.slime_samples import slime_fields
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import EpisodeRunner, RolloutOptions, plan_episodes

__all__ = [
    "SLIME_SAMPLING_NAMES",
    "episode_samples",
    "generate",
    "reward_func",
    "reward_post_process",
    "router_target",
    "to_sampling_params",
]

SLIME_SAMPLING_NAMES: dict[str, str] = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "sampling_seed": "seed",
    "seed": "seed",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
}
"""slime's sampling name -> agent_gym ``SamplingParams`` field."""

# Names slime sends that need no translation: ids are recorded as sampled and decoded locally.
_RECORDED_ONLY = frozenset({"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens", "custom_params",
                            "return_logprob", "n"})
_POLICIES: dict[str, VLLMPolicy] = {}
_RUNNERS: dict[str, EpisodeRunner] = {}


# ---------------------------------------------------------------------------------------------- config
def _arg(args: Any, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def router_target(args: Any) -> tuple[str, str]:
    """``(api, "IP:PORT")`` of the router in ``args``: SGLang's (slime) or vLLM's (vime).

    Raises:
        ConfigError: Neither or both routers are set, or one lacks its port.
    """
    found = []
    for prefix, api in (("sglang", "sglang_generate"), ("vllm", "vllm_generate")):
        ip, port = _arg(args, f"{prefix}_router_ip"), _arg(args, f"{prefix}_router_port")
        if ip is None and port is None:
            continue
        if ip is None or port is None:
            raise ConfigError(f"args: expected both {prefix}_router_ip and {prefix}_router_port, got ip={ip!r}, "
                              f"port={port!r}")
        found.append((api, f"{ip}:{int(port)}"))
    if len(found) != 1:
        raise ConfigError("args: expected the router as sglang_router_ip/sglang_router_port (slime) or "
                          f"vllm_router_ip/vllm_router_port (vime), got {'both' if found else 'neither'}")
    return found[0]


def to_sampling_params(sampling_params: Mapping[str, Any] | None) -> SamplingParams:
    """agent_gym's :class:`SamplingParams` for slime's sampling dict.

    ``logprobs`` is 0 (the sampled id's logprob), ``top_k`` -1/0 is off. Names in
    :data:`SLIME_SAMPLING_NAMES` are translated; ``skip_special_tokens``, ``no_stop_trim``,
    ``spaces_between_special_tokens`` and ``custom_params`` need none; None values are left out.

    Raises:
        ConfigError: An unknown name or a value out of range.
    """
    fields: dict[str, Any] = {"logprobs": 0, "top_k": -1, "temperature": 1.0, "truncation_ok": True}
    for name, value in (sampling_params or {}).items():
        if value is None or name in _RECORDED_ONLY:
            continue
        if name not in SLIME_SAMPLING_NAMES:
            raise ConfigError(f"sampling_params: expected names among {sorted(SLIME_SAMPLING_NAMES)} or "
                              f"{sorted(_RECORDED_ONLY)}, got {name!r}")
        fields[SLIME_SAMPLING_NAMES[name]] = value
    try:
        return SamplingParams(**fields)
    except ValueError as exc:
        raise ConfigError(f"sampling_params: {exc}") from None


def _env_id(args: Any) -> str:
    env_id = _arg(args, "agent_gym_env_id")
    if env_id is None:
        raise ConfigError("args.agent_gym_env_id: expected the agent_gym env id to run (e.g. "
                          "'agent_gym/ToolUse-v0'), got none")
    register_envs()
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
        raise ConfigError(f"args.agent_gym_env_id: expected a registered env id such as {known}, got {env_id!r}")
    return env_id


def _json_object(value: Any, what: str) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise ConfigError(f"{what}: expected a dict or its JSON text, got {value!r:.80}")


def _task(args: Any, sample: Any) -> dict[str, Any] | None:
    key = _arg(args, "agent_gym_task_key") or "task"
    metadata = getattr(sample, "metadata", None) or {}
    if metadata.get(key) is not None:
        return _json_object(metadata[key], f"sample.metadata[{key!r}]")
    label = getattr(sample, "label", None)
    if isinstance(label, str) and label.lstrip().startswith("{"):
        return _json_object(label, "sample.label")
    return None


def _policy(args: Any, sampling: SamplingParams) -> VLLMPolicy:
    """The process's policy for this router, model and sampling (built once, shared by samples)."""
    api, address = router_target(args)
    checkpoint = _arg(args, "hf_checkpoint")
    if not checkpoint:
        raise ConfigError("args.hf_checkpoint: expected the model path (its tokenizer renders the prompts), got none")
    options = _arg(args, "agent_gym_client_options") or {}
    max_len = _arg(args, "rollout_max_context_len")
    key = json.dumps([api, address, str(checkpoint), sampling.model_dump(), options, max_len], sort_keys=True,
                     default=str)
    policy = _POLICIES.get(key)
    if policy is None:
        policy = VLLMPolicy([address], str(checkpoint), sampling, api=api, model=str(checkpoint),
                            max_model_len=max_len, max_response_length=sampling.max_tokens,
                            client_options=options)
        _POLICIES[key] = policy
    return policy


def _runner(env_id: str, options: dict[str, Any]) -> EpisodeRunner:
    """The process's runner for this env and these settings (built once, shared by samples, kept for the process)."""
    key = json.dumps([env_id, {k: repr(v) for k, v in options.items()}], sort_keys=True)
    runner = _RUNNERS.get(key)
    if runner is None or runner.closed:
        runner = _RUNNERS[key] = EpisodeRunner(env_id, options=RolloutOptions(**options))
    return runner


class _SessionPolicy:
    """A policy whose turns all run under one session id (the sample's, for the router's hashing)."""

    def __init__(self, policy: VLLMPolicy, session_id: str) -> None:
        self.policy = policy
        self.session_id = session_id
        self.tokenizer = policy.tokenizer
        self.sampling = policy.sampling

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> Any:
        return await self.policy.aact(messages, session_id=self.session_id, tools=tools)

    def close_session(self, session_id: str) -> None:
        self.policy.close_session(self.session_id)


# ---------------------------------------------------------------------------------------------- samples
def _status(sample: Any, name: str) -> Any:
    status_type = getattr(type(sample), "Status", None)
    return status_type[name.upper()] if status_type is not None else name


def _rollout_int(sample: Any, rollout_id: str) -> int:
    for value in (getattr(sample, "rollout_id", None), getattr(sample, "index", None)):
        if value is not None:
            return int(value)
    return zlib.crc32(rollout_id.encode())


def episode_samples(sample: Any, trajectory: Any, *, env_id: str, sampling: Mapping[str, Any] | None = None,
                    reward_assignment: RewardAssignment | str = RewardAssignment.EPISODE,
                    pad_token_id: int = 0) -> Any:
    """Fill ``sample`` (one segment) or copies of it (several) from one episode.

    The fields come from :func:`~agent_gym.integrations.slime_samples.slime_fields`, as those of
    :func:`agent_gym.export.to_slime_samples`: ``tokens``, ``response_length``, ``loss_mask``,
    ``rollout_log_probs``, ``status``, ``reward``, ``remove_sample``, ``weight_versions`` (when the
    sample has the field), ``rollout_id`` (the sample's, else its ``index``) and ``metadata``: the
    sample's own, the keys of :data:`~agent_gym.integrations.slime_samples.SAMPLE_METADATA_KEYS`,
    ``env_id``, ``sampling`` (the episode's recorded sampling) and ``slime_sampling_params`` (the
    dict slime sent). An episode that failed before sampling gets one masked ``pad_token_id``.

    Args:
        sample: A slime ``Sample`` (or any object with its attributes).
        trajectory: The episode (from ``collect``).
        env_id: The env id recorded in ``metadata`` (when the episode records none).
        sampling: The sampling dict slime sent (recorded in ``metadata["slime_sampling_params"]``).
        reward_assignment: ``"episode"`` or ``"split"``.
        pad_token_id: Stand-in id of an empty prompt or response (masked).

    Returns:
        ``sample`` itself for a one-segment episode, else a list of copies sharing ``rollout_id``.
    """
    fields = slime_fields(trajectory, reward_assignment=reward_assignment, pad_token_id=pad_token_id)
    rollout_id = _rollout_int(sample, trajectory.rollout_id)
    incoming = dict(getattr(sample, "metadata", None) or {})
    previously_masked = bool(incoming.get("masked"))  # a sample slime hands back after an abort: ours to reset
    out = []
    for row in fields:
        target = sample if len(fields) == 1 else copy.copy(sample)
        target.tokens = row["tokens"]
        target.response_length = row["response_length"]
        target.loss_mask = row["loss_mask"]
        target.rollout_log_probs = row["rollout_log_probs"]
        target.response = ""
        target.status = _status(sample, row["status"])
        target.reward = row["reward"]
        target.rollout_id = rollout_id
        if row["remove_sample"] or previously_masked:
            target.remove_sample = row["remove_sample"]
        if hasattr(target, "weight_versions"):
            target.weight_versions = row["weight_versions"]
        target.metadata = {
            **incoming,
            **row["metadata"],
            "env_id": getattr(trajectory, "env_id", "") or env_id,
            "sampling": dict(getattr(trajectory, "sampling", None) or {}),
            "slime_sampling_params": dict(sampling or {}),
        }
        out.append(target)
    return out[0] if len(out) == 1 else out


# ---------------------------------------------------------------------------------------------- slime API
async def generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool = False) -> Any:
    """Run one episode for ``sample`` and return it filled, or a list for a summarized episode.

    See the module docs for the ``args`` fields read and what is filled.

    Args:
        args: slime's (or vime's) arguments namespace.
        sample: The sample to fill (a slime ``Sample`` or an object with its attributes).
        sampling_params: slime's sampling dict for this sample.
        evaluation: Whether slime runs an evaluation (recorded in ``metadata``).

    Returns:
        ``sample`` (one segment) or a list of samples sharing one ``rollout_id``.

    Raises:
        ConfigError: An unknown env id, a missing or malformed ``args`` field, a task that is
            not a dict, unknown sampling names.
    """
    env_id = _env_id(args)
    env_kwargs = _json_object(_arg(args, "agent_gym_env_kwargs"), "args.agent_gym_env_kwargs") or {}
    task = _task(args, sample)
    sampling = to_sampling_params(sampling_params)
    policy = _policy(args, sampling)
    assignment = _arg(args, "agent_gym_reward_assignment") or RewardAssignment.EPISODE
    try:
        RewardAssignment(assignment)
    except ValueError:
        raise ConfigError(f"args.agent_gym_reward_assignment: expected 'episode' or 'split', got {assignment!r}") \
            from None
    if not getattr(sample, "session_id", None):
        sample.session_id = str(uuid.uuid4())
    memory = _arg(args, "agent_gym_memory")
    options: dict[str, Any] = {"progress": False, "env_kwargs": env_kwargs}
    if memory is not None:
        options["memory"] = memory
    for name in ("max_steps", "episode_timeout"):
        value = _arg(args, f"agent_gym_{name}")
        if value is not None:
            options[name] = value
    # siblings of one prompt (one group_index) draw the same task when the sample names none
    seed = next((v for v in (getattr(sample, "group_index", None), getattr(sample, "index", None)) if v is not None), 0)
    (spec,) = plan_episodes([task] if task is not None else None, None if task is not None else 1, seed=int(seed))
    trajectory = await _runner(env_id, options).run_episode(spec, policy=_SessionPolicy(policy, sample.session_id))
    recorded = {**dict(sampling_params or {}), "evaluation": bool(evaluation)}
    return episode_samples(sample, trajectory, env_id=env_id, sampling=recorded, reward_assignment=assignment,
                           pad_token_id=filler_token_id(policy.tokenizer))


def _recorded_reward(sample: Any) -> float:
    metadata = getattr(sample, "metadata", None) or {}
    if "reward" in metadata and metadata["reward"] is not None:
        return float(metadata["reward"])
    if getattr(sample, "reward", None) is not None:
        return float(sample.reward)
    raise ValueError(f"sample {getattr(sample, 'index', None)!r}: expected a reward recorded by "
                     "agent_gym.integrations.slime.generate (metadata['reward']), got none")


async def reward_func(args: Any, sample_or_list: Any, **kwargs: Any) -> float | list[float]:
    """The custom reward for slime (``--custom-rm-path``): the reward :func:`generate` recorded.

    slime calls it with one sample, or with a list (``--group-rm``, and for list-returning
    generate functions, possibly empty).

    Returns:
        A float for a sample, a list of floats for a list.

    Raises:
        ValueError: A sample without a recorded reward.
    """
    if isinstance(sample_or_list, Sequence) and not isinstance(sample_or_list, (str, bytes)):
        return [_recorded_reward(s) for s in sample_or_list]
    return _recorded_reward(sample_or_list)


def _reward_value(args: Any, sample: Any) -> float:
    getter: Callable[[Any], Any] | None = getattr(sample, "get_reward_value", None)
    value = getter(args) if getter is not None else sample.reward
    if isinstance(value, Mapping):
        value = value[_arg(args, "reward_key")]
    return float(value)


def reward_post_process(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """GRPO advantages by ``group_index``, each rollout counted once (``--custom-reward-post-process-path``).

    Samples of one rollout (same ``rollout_id``, else their own ``index``) share one reward and
    count once in their group's mean and standard deviation, however many samples the rollout
    produced; masked samples (``remove_sample`` or ``metadata["masked"]``) take no part and get
    0. Normalisation follows slime's flags: none when ``args.rewards_normalization`` is False,
    no division by the std when ``args.grpo_std_normalization`` is False.

    Returns:
        ``(raw_rewards, rewards)``, one entry per sample, in order.

    Raises:
        ValueError: Samples of one rollout in different groups or with different rewards.
    """
    raw = [_reward_value(args, s) for s in samples]
    if not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    keys = []
    for i, s in enumerate(samples):
        rollout = getattr(s, "rollout_id", None)
        rollout_key = f"r{rollout}" if rollout is not None else f"i{getattr(s, 'index', None) or i}"
        metadata = getattr(s, "metadata", None) or {}
        masked = bool(getattr(s, "remove_sample", False) or metadata.get("masked"))
        role = metadata.get("role") or ""
        group = f"/{role}" if role else ""  # groups by (task, role); each agent of a rollout counted once
        agent = f"{group}#{metadata.get('agent_index', 0)}" if role else ""
        keys.append((str(getattr(s, "group_index", None)) + group, rollout_key + agent, raw[i], masked))
    advantages = group_advantages(keys, normalize_std=getattr(args, "grpo_std_normalization", True))
    return raw, [advantages[key[1]] for key in keys]
