"""Agent engine API of the seed: ``BaseEngineWrapper`` and the gym-backed ``GymEngineWrapper``.

An RL framework drives an *agent engine* through one small interface: build it
with a tokenizer, sampling parameters and limits, point it at inference servers
(``server_addresses``), call ``initialize()`` once, then
``generate_agent_trajectories_async(tasks)`` for every batch of tasks
``[{"id", "question", "ground_truth"}]``. ``GymEngineWrapper`` implements it by
running an agent_gym environment over the tasks with a ``VLLMPolicy``; its records
follow the training contract (:func:`training_records`).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import torch

from agent_gym.checks import check_float, check_gamma, check_int, check_timeout
from agent_gym.errors import ConfigError
from agent_gym.integrations.contract import filler_token_id, neutral_rewards, training_segments
from agent_gym.policy.client_options import ClientOptions
from agent_gym.policy.completions import CompletionsFn, ServerCompletions
from agent_gym.policy.routing import normalize_address
from agent_gym.policy.vllm_client import VLLMClient
from agent_gym.segments import split_segments, trajectory_segments
from agent_gym.types import Trajectory

__all__ = [
    "MAX_N_PARALLEL_AGENTS",
    "MAX_PROMPT_LENGTH",
    "MAX_RESPONSE_LENGTH",
    "MAX_STEPS",
    "BaseEngineWrapper",
    "GymEngineWrapper",
    "training_records",
    "validate_server_address",
]

MAX_PROMPT_LENGTH = 128 * 1024
"""Upper bound of ``max_prompt_length`` (128K tokens)."""
MAX_RESPONSE_LENGTH = 8 * 1024
"""Upper bound of ``max_response_length`` (8K tokens)."""
MAX_N_PARALLEL_AGENTS = 64
"""Upper bound of ``n_parallel_agents``."""
MAX_STEPS = 10
"""Upper bound of ``max_steps``."""

_AGENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate_server_address(address: Any) -> str:
    """Check an inference server address of the form ``IP:PORT`` (or ``HOST:PORT``).

    The address is parsed by the same function as ``VLLMPolicy``'s
    (:func:`agent_gym.policy.routing.normalize_address`); the engine API
    additionally requires an explicit port and no path.

    Args:
        address: e.g. ``"127.0.0.1:8000"``; ``http://`` prefixes are accepted and removed.

    Returns:
        The address without scheme or trailing slash (``"HOST:PORT"``).

    Raises:
        TypeError: If ``address`` is not a string.
        ConfigError: If it is not ``IP:PORT`` with a port in [0, 65535].
    """
    if not isinstance(address, str):
        raise TypeError(f"server address: expected str 'IP:PORT', got {type(address).__name__}")
    try:
        name, base = normalize_address(address)
    except ValueError:
        name, base = "", ""
    host, sep, port = name.rpartition(":")
    # No user info, no path: exactly HOST:PORT after the scheme.
    if not sep or not host or not port.isdigit() or int(port) > 65535 or "@" in name or not base.endswith("://" + name):
        raise ConfigError(f"server address: expected 'IP:PORT' with a port in [0, 65535], got {address!r}")
    return name


def training_records(episodes: Sequence[Trajectory], *, pad_token_id: int = 0) -> list[Trajectory]:
    """The records an engine hands a trainer: one per trainable segment, under the training contract.

    Each record is one segment of an episode (:func:`~agent_gym.segments.split_segments`; the
    segments of an episode share ``rollout_id``). A record of an episode that failed for
    infrastructure reasons (``ENV_ERROR``, ``POLICY_ERROR``, ``TIMEOUT``) has all-zero
    ``response_masks`` and ``response_logprobs`` (its segment too), and as ``trajectory_reward``
    the mean reward of the episodes of its task (the contract's advantage group) that did run
    (:func:`~agent_gym.integrations.contract.neutral_rewards`; 0.0 when none did): a trainer that
    averages a group's rewards into its baseline gets the same mean as without it, and the
    record gives no gradient. Its ``status`` says why; its own rewards stay in ``metrics``. A
    record without prompt or response ids (an episode that failed before sampling) gets one
    masked ``pad_token_id`` in their place. The episodes given are not changed.

    Args:
        episodes: Episodes from ``collect``.
        pad_token_id: Stand-in id of an empty prompt or response.

    Returns:
        The records, in episode then segment order.
    """
    per_episode = [training_segments(episode) for episode in episodes]
    rewards = neutral_rewards((s.group_key, s.advantage_id, s.reward, s.masked) for segs in per_episode for s in segs)
    out: list[Trajectory] = []
    for episode, segments in zip(episodes, per_episode, strict=True):
        records = split_segments([episode])  # type: ignore[list-item]
        for record, contract in zip(records, segments, strict=True):
            if not contract.masked and contract.prompt_ids and contract.response_ids:
                out.append(record)
                continue
            segment = trajectory_segments(record)[0]
            prompt = segment.prompt_tokens if contract.prompt_ids else torch.tensor([pad_token_id])
            response, versions = segment.response_tokens, segment.weight_versions
            if not contract.response_ids:
                response, versions = torch.tensor([pad_token_id]), torch.tensor([-1])
            mask = segment.response_masks if not contract.masked else torch.zeros_like(segment.response_masks)
            logprobs = segment.response_logprobs if not contract.masked else torch.zeros_like(segment.response_logprobs)
            if not contract.response_ids:
                mask, logprobs = torch.zeros(1, dtype=mask.dtype), torch.zeros(1, dtype=logprobs.dtype)
            changed = dataclasses.replace(segment, prompt_tokens=prompt, response_tokens=response,
                                          response_masks=mask, response_logprobs=logprobs, weight_versions=versions)
            fields: dict[str, Any] = {"prompt_tokens": prompt, "response_tokens": response, "response_masks": mask,
                                      "response_logprobs": logprobs}
            if hasattr(record, "segments"):
                fields["segments"] = [changed]
            if contract.masked:
                fields["trajectory_reward"] = rewards[contract.advantage_id]
            out.append(dataclasses.replace(record, **fields))
    return out


class BaseEngineWrapper(abc.ABC):
    """Abstract agent engine (seed API) that an RL framework drives.

    Args:
        agent_name: Name of the agent scenario: letters, digits and ``_``, not
            starting with a digit, non-empty.
        tokenizer: A ``transformers`` ``PreTrainedTokenizer`` or ``PreTrainedTokenizerFast``.
        sampling_params: Sampling parameters for inference (default empty).
        max_prompt_length: Prompt limit in tokens, in [1, 128K].
        max_response_length: Response limit in tokens, in [1, 8K].
        n_parallel_agents: Agents run concurrently, in [1, 64].
        max_steps: Steps per episode, in [1, 10].
        server_addresses: ``"IP:PORT"`` of each OpenAI-compatible (vLLM) server.
        request_timeout: Seconds before a completions request fails.

    Raises:
        TypeError: If an argument has the wrong type.
        ConfigError: If a value is out of range (also a ``ValueError``).

    Example:
        >>> class MyEngine(BaseEngineWrapper):
        ...     def initialize(self): ...
        ...     async def generate_agent_trajectories_async(self, tasks): return []
        >>> engine = MyEngine("my_agent", tokenizer, server_addresses=["127.0.0.1:8000"])  # doctest: +SKIP
    """

    def __init__(
        self,
        agent_name: str,
        tokenizer: Any,
        sampling_params: dict[str, Any] | None = None,
        max_prompt_length: int = MAX_PROMPT_LENGTH,
        max_response_length: int = MAX_RESPONSE_LENGTH,
        n_parallel_agents: int = 8,
        max_steps: int = 5,
        *,
        server_addresses: Sequence[str] | None = None,
        request_timeout: float = 600.0,
    ) -> None:
        if not isinstance(agent_name, str):
            raise TypeError(f"agent_name: expected str, got {type(agent_name).__name__}")
        if not _AGENT_NAME.match(agent_name):
            raise ConfigError(
                "agent_name: expected letters, digits and '_' only, not starting with a digit and non-empty, "
                f"got {agent_name!r}"
            )
        from transformers import PreTrainedTokenizer, PreTrainedTokenizerFast

        if tokenizer is None:
            raise TypeError("tokenizer: expected PreTrainedTokenizer or PreTrainedTokenizerFast, got None")
        if not isinstance(tokenizer, (PreTrainedTokenizer, PreTrainedTokenizerFast)):
            raise TypeError(
                f"tokenizer: expected PreTrainedTokenizer or PreTrainedTokenizerFast, got {type(tokenizer).__name__}"
            )
        if sampling_params is None:
            sampling_params = {}
        if not isinstance(sampling_params, dict):
            raise TypeError(f"sampling_params: expected dict, got {type(sampling_params).__name__}")
        request_timeout = check_float("request_timeout", request_timeout, low=0.0, low_open=True)
        self.agent_name = agent_name
        self.tokenizer = tokenizer
        self.sampling_params = dict(sampling_params)
        self.max_prompt_length = check_int("max_prompt_length", max_prompt_length, low=1, high=MAX_PROMPT_LENGTH)
        self.max_response_length = check_int(
            "max_response_length", max_response_length, low=1, high=MAX_RESPONSE_LENGTH
        )
        self.n_parallel_agents = check_int("n_parallel_agents", n_parallel_agents, low=1, high=MAX_N_PARALLEL_AGENTS)
        self.max_steps = check_int("max_steps", max_steps, low=1, high=MAX_STEPS)
        self.request_timeout = float(request_timeout)
        self._server_addresses: list[str] = []
        self._completions: list[CompletionsFn] = []
        self.server_addresses = server_addresses if server_addresses is not None else []

    # ------------------------------------------------------------------ servers
    @property
    def server_addresses(self) -> list[str]:
        """The ``"IP:PORT"`` address of each inference server (validated on assignment)."""
        return list(self._server_addresses)

    @server_addresses.setter
    def server_addresses(self, addresses: Sequence[str]) -> None:
        if isinstance(addresses, str) or not isinstance(addresses, Sequence):
            raise TypeError(f"server_addresses: expected list[str], got {type(addresses).__name__}")
        self._server_addresses = [validate_server_address(a) for a in addresses]
        self._completions = []
        if self._server_addresses:
            client = VLLMClient(self._server_addresses, ClientOptions(timeout=self.request_timeout))
            self._completions = [
                ServerCompletions(client, a, default_max_tokens=self.max_response_length)
                for a in self._server_addresses
            ]

    @property
    def completions(self) -> list[CompletionsFn]:
        """One async ``/v1/completions`` function per server, in ``server_addresses`` order.

        ``await engine.completions[0](request)`` posts ``request`` (``max_tokens``
        defaults to ``max_response_length``) and returns the response JSON;
        a failure raises :class:`~agent_gym.errors.ServerError`. Each is a
        :class:`~agent_gym.policy.completions.ServerCompletions` (pooled connections,
        transient failures retried on the same server).
        """
        return list(self._completions)

    # ------------------------------------------------------------------ engine API
    @abc.abstractmethod
    def initialize(self) -> None:
        """Prepare the engine (clients, environments); called once before generating."""

    @abc.abstractmethod
    def generate_agent_trajectories_async(self, tasks: list[dict[str, Any]]) -> Any:
        """Run the agent over ``tasks`` and return (or resolve to) ``list[Trajectory]``.

        Args:
            tasks: Dicts with ``id``, ``question`` and ``ground_truth``.
        """

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(agent_name={self.agent_name!r}, servers={self._server_addresses}, "
            f"n_parallel_agents={self.n_parallel_agents}, max_steps={self.max_steps})"
        )


class GymEngineWrapper(BaseEngineWrapper):
    """An engine that runs an agent_gym environment over tasks with a ``VLLMPolicy``.

    Args:
        agent_name: See :class:`BaseEngineWrapper`.
        tokenizer: See :class:`BaseEngineWrapper`; used to build token-exact prompts.
        sampling_params: ``SamplingParams`` fields (temperature, top_p, top_k, ...);
            ``max_tokens`` (per turn) defaults to ``min(max_response_length, 1024)``.
        max_prompt_length: See :class:`BaseEngineWrapper`.
        max_response_length: See :class:`BaseEngineWrapper`.
        n_parallel_agents: Episodes in flight at once.
        max_steps: Steps per episode (passed to the env).
        env_id: A registered env id, e.g. ``"agent_gym/ToolUse-v0"``.
        env_kwargs: Extra ``gym.make`` keyword arguments.
        server_addresses: ``"IP:PORT"`` of each server; episodes are spread over them.
        samples_per_task: Episodes per task (siblings share ``group_id``).
        gamma: Discount factor of ``mc_return``.
        memory: Memory configuration handed to ``TrajectoryWrapper``.
        episode_timeout: Seconds before an episode ends with status TIMEOUT.
        seed: Base seed of the episodes.
        policy_kwargs: Extra ``VLLMPolicy`` keyword arguments (``max_response_length``,
            the budget of ids after an episode's first prompt, defaults to the engine's;
            ``client_options`` to ``ClientOptions(timeout=request_timeout)``).
        request_timeout: Seconds before a request fails.

    Example:
        >>> engine = GymEngineWrapper("tool_use", tokenizer, {"temperature": 0.7},
        ...     env_id="agent_gym/ToolUse-v0", server_addresses=["127.0.0.1:8000"])  # doctest: +SKIP
        >>> engine.initialize()  # doctest: +SKIP
        >>> trajectories = await engine.generate_agent_trajectories_async(tasks)  # doctest: +SKIP
    """

    def __init__(
        self,
        agent_name: str,
        tokenizer: Any,
        sampling_params: dict[str, Any] | None = None,
        max_prompt_length: int = MAX_PROMPT_LENGTH,
        max_response_length: int = MAX_RESPONSE_LENGTH,
        n_parallel_agents: int = 8,
        max_steps: int = 5,
        *,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        server_addresses: Sequence[str] | None = None,
        samples_per_task: int = 1,
        gamma: float = 1.0,
        memory: Any = None,
        episode_timeout: float | None = None,
        seed: int = 0,
        policy_kwargs: dict[str, Any] | None = None,
        request_timeout: float = 600.0,
    ) -> None:
        super().__init__(
            agent_name,
            tokenizer,
            sampling_params,
            max_prompt_length,
            max_response_length,
            n_parallel_agents,
            max_steps,
            server_addresses=server_addresses,
            request_timeout=request_timeout,
        )
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id: expected a registered env id (str), got {env_id!r}")
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise TypeError(f"env_kwargs: expected dict or None, got {type(env_kwargs).__name__}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.samples_per_task = check_int("samples_per_task", samples_per_task, low=1)
        gamma = check_gamma(gamma)
        episode_timeout = check_timeout("episode_timeout", episode_timeout)
        check_int("seed", seed)
        self.gamma = gamma
        self.memory = memory
        self.episode_timeout = episode_timeout
        self.seed = seed
        self.policy_kwargs = dict(policy_kwargs or {})
        self.policy: Any = None
        self._batches = 0

    def _sampling(self) -> Any:
        from agent_gym.policy import SamplingParams

        params = {"max_tokens": min(self.max_response_length, 1024), **self.sampling_params}
        return SamplingParams.coerce(params)

    def initialize(self) -> None:
        """Build the ``VLLMPolicy`` on ``server_addresses``.

        Raises:
            ConfigError: If no server address is set.
        """
        if not self._server_addresses:
            raise ConfigError("GymEngineWrapper.server_addresses: expected at least one 'IP:PORT', got []")
        from agent_gym.policy import VLLMPolicy

        kwargs = {
            "client_options": ClientOptions(timeout=self.request_timeout),
            "max_response_length": self.max_response_length,
            # The prompt budget is enforced as the context limit: prompt + response.
            "max_model_len": self.max_prompt_length + self.max_response_length,
            **self.policy_kwargs,
        }
        self.policy = VLLMPolicy(self._server_addresses, self.tokenizer, self._sampling(), **kwargs)

    @property
    def completions(self) -> list[CompletionsFn]:
        """One async ``/v1/completions`` function per server.

        After ``initialize()`` these are the policy's (pooled connections,
        retries); before it, plain one-shot requests.
        """
        if self.policy is not None:
            return list(self.policy.completions)
        return super().completions

    async def generate_agent_trajectories_async(self, tasks: list[dict[str, Any]]) -> list[Trajectory]:
        """Run one episode per task (``samples_per_task`` each) and return the trajectories.

        Args:
            tasks: Dicts with ``id``, ``question`` and ``ground_truth``.

        Returns:
            One ``StepTrajectory`` per trainable segment, in task order
            (:func:`training_records`); the segments of an episode share
            ``rollout_id``, the samples of a task share ``group_id``. Every task
            comes back, failed episodes with their status (POLICY_ERROR, TIMEOUT,
            ENV_ERROR), masked and with a reward that leaves their task's mean as it is.
        """
        if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
            raise TypeError(f"tasks: expected list[dict], got {type(tasks).__name__}")
        for i, task in enumerate(tasks):
            missing = [k for k in ("id", "question", "ground_truth") if k not in task]
            if missing:
                raise ValueError(f"tasks[{i}]: expected keys id, question, ground_truth, missing {missing}")
        if not tasks:
            return []
        if self.policy is None:
            self.initialize()
        from agent_gym.rollout import collect_async

        seed = self.seed + self._batches * 1_000_003
        self._batches += 1
        episodes = await collect_async(
            self.env_id,
            self.policy,
            tasks=tasks,
            samples_per_task=self.samples_per_task,
            n_parallel=self.n_parallel_agents,
            gamma=self.gamma,
            memory=self.memory,
            max_steps=self.max_steps,
            episode_timeout=self.episode_timeout,
            env_kwargs=self.env_kwargs,
            progress=False,
            seed=seed,
        )
        return training_records(episodes, pad_token_id=filler_token_id(self.tokenizer))

    def generate_agent_trajectories(self, tasks: list[dict[str, Any]]) -> list[Trajectory]:
        """Blocking version of :meth:`generate_agent_trajectories_async` (works inside a running loop too)."""
        from agent_gym.utils.runtime import run_sync

        return run_sync(lambda: self.generate_agent_trajectories_async(tasks), release=[self.policy])

    def close(self) -> None:
        """Release the policy's connections."""
        close = getattr(self.policy, "close", None)
        if callable(close):
            result = close()
            if asyncio.iscoroutine(result):
                from agent_gym.utils.runtime import run_sync

                run_sync(lambda: result)
        self.policy = None
