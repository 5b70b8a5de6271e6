"""Records exchanged between environments, policies, wrappers and trainers.

``Trajectory``, ``Step`` and ``StepTrajectory`` follow the seed API exactly (field
names, defaults and the seven metric keys); extra fields carry defaults so code
written against the seed keeps working. Every record validates itself on
construction and round-trips through plain JSON with ``to_dict``/``from_dict``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypedDict

from agent_gym.checks import check_gamma
from agent_gym.errors import TrajectoryError
from agent_gym.messages import without_images
from agent_gym.record_fields import as_floats, as_ids, check_messages, is_tensor, json_copy

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self

__all__ = [
    "FINISH_REASON_STATUS",
    "METRIC_KEYS",
    "Action",
    "EpisodeStatus",
    "FinishReason",
    "Message",
    "Observation",
    "PolicyOutput",
    "Segment",
    "Step",
    "StepTrajectory",
    "Trajectory",
    "compute_mc_return",
    "default_metrics",
]

METRIC_KEYS: tuple[str, ...] = (
    "steps",
    "toolcall_reward",
    "res_reward",
    "reward_time",
    "env_time",
    "llm_time",
    "total_time",
)
"""The exact keys of ``Trajectory.metrics``."""


# The functional form: this module's annotations are strings, which a class body's NotRequired would not survive.
Message = TypedDict(  # noqa: UP013
    "Message", {"role": str, "content": str, "images": NotRequired[list[dict[str, Any]]]}
)
Message.__doc__ = """One chat message: ``role`` in system/user/assistant/tool, ``content`` a string.

``images`` (optional): image content parts an env attached beside the text (OpenAI ``image_url``
parts, see :mod:`agent_gym.messages`); only a policy that sends images to a vision model reads them.
"""


class EpisodeStatus(str, Enum):
    """Why an episode ended. Every episode handed to a rollout ends with one.

    ``TIMEOUT``, ``ENV_ERROR``, ``POLICY_ERROR`` and ``JUDGE_ERROR`` are infrastructure failures
    (:data:`~agent_gym.integrations.contract.INFRA_FAILURE_STATUSES`): every trainer adapter and
    exporter masks them. ``JUDGE_ERROR``: the episode ran, but a judge that scores it (an LLM judge
    of a :class:`~agent_gym.judges.Rubric`) was down, timed out or answered unparseably, so it has
    no reward (never a zero); a re-grade of the stored episode retries the judge.
    """

    ENV_DONE = "ENV_DONE"
    MAX_STEPS = "MAX_STEPS"
    TRUNCATION = "TRUNCATION"
    PROMPT_TRUNCATION = "PROMPT_TRUNCATION"
    TIMEOUT = "TIMEOUT"
    ENV_ERROR = "ENV_ERROR"
    POLICY_ERROR = "POLICY_ERROR"
    JUDGE_ERROR = "JUDGE_ERROR"

    def __str__(self) -> str:
        return self.value


class FinishReason:
    """Values of ``PolicyOutput.finish_reason``."""

    STOP = "stop"
    LENGTH = "length"
    PROMPT_TRUNCATION = "prompt_truncation"
    ERROR = "error"
    ALL = (STOP, LENGTH, PROMPT_TRUNCATION, ERROR)


def default_metrics() -> dict[str, Any]:
    """Return a fresh metrics dict with the seed's seven keys and zero values."""
    return {
        "steps": 0,
        "toolcall_reward": 0.0,
        "res_reward": 0.0,
        "reward_time": 0.0,
        "env_time": 0.0,
        "llm_time": 0.0,
        "total_time": 0.0,
    }


@dataclass
class PolicyOutput:
    """One assistant turn produced by a policy, with the exact tokens behind it.

    Attributes:
        text: The assistant message content (the decoded sampled tokens).
        prompt_token_ids: The full prompt ids sent for this turn.
        token_ids: The raw sampled ids, including the final EOS/stop token.
        logprobs: One log-probability per sampled id.
        finish_reason: ``"stop"``, ``"length"``, ``"prompt_truncation"`` or ``"error"``.
        llm_time: Seconds the policy spent on this turn.
        retokenized: True when ``token_ids`` are not the ids the model sampled.
        new_segment: Informational: the policy's own note that ``prompt_token_ids`` do
            not extend its previous turn's prompt and sampled ids (the history was
            rewritten, e.g. by memory). Segment boundaries are decided by the
            ``TrajectoryWrapper``'s token assembly from the ids themselves; it does
            not read this flag.
        server: Address of the server that answered, if any.
        error: A message when ``finish_reason == "error"``.
        sampling: What shaped the sampled ids' distribution and their logprobs: the
            ``logprobs_mode`` (``"raw_logprobs"`` or ``"processed_logprobs"``, as vLLM's
            ``--logprobs-mode``) and the sampling parameters that change the distribution
            (``temperature``, ``top_k``, ``top_p``, ``min_p``, the penalties, ``min_tokens``);
            see ``SamplingParams.record``. None when the policy does not say.
        weight_versions: The weight version each id of ``token_ids`` was sampled under
            (one per id): the server's version when it reports one, else the counter the
            trainer sets on the policy. A turn that spans a weight update (paused and
            resumed) has several. None when the policy does not say.
    """

    text: str
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = FinishReason.STOP
    llm_time: float = 0.0
    retokenized: bool = False
    new_segment: bool = False
    server: str | None = None
    error: str | None = None
    sampling: dict[str, Any] | None = None
    weight_versions: list[int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"PolicyOutput.text: expected str, got {type(self.text).__name__}")
        if self.finish_reason not in FinishReason.ALL:
            raise ValueError(
                f"PolicyOutput.finish_reason: expected one of {FinishReason.ALL}, got {self.finish_reason!r}"
            )
        if self.logprobs is not None and self.token_ids is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"PolicyOutput.logprobs: expected {len(self.token_ids)} values (one per token id), "
                f"got {len(self.logprobs)}"
            )
        if (
            self.weight_versions is not None
            and self.token_ids is not None
            and len(self.weight_versions) != len(self.token_ids)
        ):
            raise ValueError(
                f"PolicyOutput.weight_versions: expected {len(self.token_ids)} values (one per token id), "
                f"got {len(self.weight_versions)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyOutput:
        """Build from ``to_dict`` output."""
        return cls(**data)


@dataclass
class Segment:
    """One trainable (prompt, response, mask) sequence of an episode.

    An episode whose prompt was never rewritten has one segment. When memory
    rewrites the history, a new segment starts; all segments of an episode share
    the trajectory's ``rollout_id``.

    Attributes:
        prompt_tokens: Prompt ids of the segment's first turn.
        response_tokens: Everything after the prompt: sampled ids and the ids of
            environment messages between turns.
        response_masks: 1 on sampled ids, 0 elsewhere.
        response_logprobs: The server's logprob on sampled ids, 0 elsewhere.
        first_step: Index of the segment's first step.
        last_step: Index of the segment's last step (inclusive).
        weight_versions: Per response id, the weight version it was sampled under;
            -1 on environment ids (observations, template glue) and on sampled ids
            whose policy reported no version. Defaults to all -1.
        role: The name of the agent whose turns these are ("" for the episode's own
            agent; e.g. ``"investigator"`` for a subagent, ``"judge"`` in a
            multi-agent episode).
        parent_segment: Index, in the episode's ``segments``, of the segment whose
            agent spawned this one's (a subagent's lineage); -1 for the episode's own
            agent and for roles that take turns rather than being spawned.
        spawn_step: The parent's step during which this segment's agent was spawned;
            -1 when ``parent_segment`` is.
        role_reward: The reward the env gave this segment's role, None when it gave
            none (the training contract then falls back to the episode's reward).
        agent_index: Which agent of the episode the segment belongs to: 0 for the
            episode's own, ``k`` for the k-th other agent (two solvers of one role differ).
    """

    prompt_tokens: torch.Tensor
    response_tokens: torch.Tensor
    response_masks: torch.Tensor
    response_logprobs: torch.Tensor
    first_step: int = 0
    last_step: int = 0
    weight_versions: torch.Tensor = None  # type: ignore[assignment]  # None -> all -1 (``__post_init__``)
    role: str = ""
    parent_segment: int = -1
    spawn_step: int = -1
    role_reward: float | None = None
    agent_index: int = 0

    if TYPE_CHECKING:
        # What the generated __init__ accepts: lists too (``__post_init__`` makes them tensors).
        def __init__(
            self,
            prompt_tokens: torch.Tensor | Sequence[int],
            response_tokens: torch.Tensor | Sequence[int],
            response_masks: torch.Tensor | Sequence[int],
            response_logprobs: torch.Tensor | Sequence[float],
            first_step: int = 0,
            last_step: int = 0,
            weight_versions: torch.Tensor | Sequence[int] | None = None,
            role: str = "",
            parent_segment: int = -1,
            spawn_step: int = -1,
            role_reward: float | None = None,
            agent_index: int = 0,
        ) -> None: ...

    def __post_init__(self) -> None:
        self.prompt_tokens = as_ids("Segment.prompt_tokens", self.prompt_tokens)
        self.response_tokens = as_ids("Segment.response_tokens", self.response_tokens)
        self.response_masks = as_ids("Segment.response_masks", self.response_masks, allow_bool=True)
        self.response_logprobs = as_floats("Segment.response_logprobs", self.response_logprobs)
        lengths = {len(self.response_tokens), len(self.response_masks), len(self.response_logprobs)}
        if len(lengths) != 1:
            raise TrajectoryError(
                "Segment: expected response_tokens, response_masks and response_logprobs of equal length, got "
                f"{len(self.response_tokens)}, {len(self.response_masks)}, {len(self.response_logprobs)}"
            )
        if self.weight_versions is None:
            self.weight_versions = [-1] * len(self.response_tokens)
        self.weight_versions = as_ids("Segment.weight_versions", self.weight_versions)
        if len(self.weight_versions) != len(self.response_tokens):
            raise TrajectoryError(
                f"Segment.weight_versions: expected {len(self.response_tokens)} values (one per response id), "
                f"got {len(self.weight_versions)}"
            )
        if not isinstance(self.role, str):
            raise TrajectoryError(f"Segment.role: expected str, got {type(self.role).__name__}")
        for name in ("parent_segment", "spawn_step", "agent_index"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise TrajectoryError(f"Segment.{name}: expected an int >= -1, got {value!r}")
        if self.role_reward is not None:
            if isinstance(self.role_reward, bool) or not isinstance(self.role_reward, (int, float)) or not (
                math.isfinite(self.role_reward)
            ):
                raise TrajectoryError(
                    f"Segment.role_reward: expected a finite number or None, got {self.role_reward!r}"
                )
            self.role_reward = float(self.role_reward)

    def version_runs(self) -> list[int]:
        """The version of each run of sampled ids under one version, in order (slime's ``weight_versions``).

        A run ends at an environment id (a new turn starts a run) or where the version
        changes inside a turn (a turn resumed on new weights); ids of unknown version
        (-1) start no run.
        """
        runs: list[int] = []
        previous_mask = 0
        for mask, version in zip(self.response_masks.tolist(), self.weight_versions.tolist(), strict=True):
            if mask and version >= 0 and (not previous_mask or not runs or runs[-1] != version):
                runs.append(version)
            previous_mask = mask
        return runs

    def version_span(self) -> tuple[int, int]:
        """The oldest and newest weight version of the segment's sampled ids, (-1, -1) when none is known."""
        known = [v for v in self.weight_versions.tolist() if v >= 0]
        return (min(known), max(known)) if known else (-1, -1)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (tensors become lists)."""
        return {
            "prompt_tokens": self.prompt_tokens.tolist(),
            "response_tokens": self.response_tokens.tolist(),
            "response_masks": self.response_masks.tolist(),
            "response_logprobs": self.response_logprobs.tolist(),
            "first_step": self.first_step,
            "last_step": self.last_step,
            "weight_versions": self.weight_versions.tolist(),
            "role": self.role,
            "parent_segment": self.parent_segment,
            "spawn_step": self.spawn_step,
            "role_reward": self.role_reward,
            "agent_index": self.agent_index,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        """Build from ``to_dict`` output."""
        return cls(**data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Segment) and self.to_dict() == other.to_dict()


@dataclass(eq=False)
class Trajectory:
    """A whole agent run as token tensors, the reward and timing metrics (seed API).

    Attributes:
        prompt_tokens: Token ids of the input prompt.
        response_tokens: Token ids of the response (sampled and environment tokens).
        response_masks: 1 on tokens the model sampled, 0 elsewhere.
        idx: Trajectory index, an int >= 0.
        trajectory_reward: Sum of the step rewards.
        chat_completions: The conversation, a list of str -> str dicts (a message's ``images``,
            see :mod:`agent_gym.messages`, is dropped: records hold text).
        metrics: Exactly the keys of ``METRIC_KEYS``.
        response_logprobs: Sampled-token logprobs aligned with ``response_tokens``
            (0 on masked positions), or None when unknown.
        rollout_id: Shared by every segment and record of one episode.
        group_id: Shared by the ``samples_per_task`` siblings of one task.
        status: An ``EpisodeStatus`` value, or "" while unknown.
        retokenized: True when the tokens come from re-tokenizing text rather
            than from the sampled ids.
        env_id: Id of the env that produced the episode (e.g. ``"agent_gym/ToolUse-v0"``),
            or "" when unknown.
        sampling: How the sampled ids were drawn and what their logprobs are: the
            ``logprobs_mode`` and the sampling parameters of the policy's turns
            (``PolicyOutput.sampling``), {} when unknown. A trainer re-scoring the ids
            compares raw logprobs with the plain log-softmax of the model, processed
            ones with the distribution after the same temperature and truncation.
    """

    prompt_tokens: torch.Tensor
    response_tokens: torch.Tensor
    response_masks: torch.Tensor
    idx: int = 0
    trajectory_reward: float | int = 0.0
    chat_completions: list[dict[str, str]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=default_metrics)
    response_logprobs: torch.Tensor | None = None
    rollout_id: str = ""
    group_id: str = ""
    status: str = ""
    retokenized: bool = False
    env_id: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cls_name = type(self).__name__
        self.prompt_tokens = as_ids(f"{cls_name}.prompt_tokens", self.prompt_tokens)
        self.response_tokens = as_ids(f"{cls_name}.response_tokens", self.response_tokens)
        self.response_masks = as_ids(f"{cls_name}.response_masks", self.response_masks, allow_bool=True)
        if self.response_logprobs is not None:
            self.response_logprobs = as_floats(f"{cls_name}.response_logprobs", self.response_logprobs)
        if isinstance(self.idx, bool) or not isinstance(self.idx, int) or self.idx < 0:
            raise TrajectoryError(f"Trajectory.idx: expected an int >= 0, got {self.idx!r}")
        if isinstance(self.trajectory_reward, bool) or not isinstance(self.trajectory_reward, (int, float)):
            raise TrajectoryError(
                f"Trajectory.trajectory_reward: expected float or int, got {type(self.trajectory_reward).__name__}"
            )
        if not math.isfinite(self.trajectory_reward):
            raise TrajectoryError(
                f"Trajectory.trajectory_reward: expected a finite number, got {self.trajectory_reward}"
            )
        self.chat_completions = without_images(self.chat_completions)
        check_messages("Trajectory.chat_completions", self.chat_completions)
        if not isinstance(self.sampling, dict):
            raise TrajectoryError(f"Trajectory.sampling: expected dict, got {type(self.sampling).__name__}")
        if not isinstance(self.metrics, dict):
            raise TrajectoryError(f"Trajectory.metrics: expected dict, got {type(self.metrics).__name__}")
        if set(self.metrics) != set(METRIC_KEYS):
            # The seed's own example omits the reward keys: fill missing keys, reject unknown ones.
            unknown = sorted(set(self.metrics) - set(METRIC_KEYS))
            if unknown:
                raise TrajectoryError(
                    f"Trajectory.metrics: expected only the keys {list(METRIC_KEYS)}, got unknown keys {unknown}"
                )
            self.metrics = {**default_metrics(), **self.metrics}
        for key, value in self.metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TrajectoryError(f"Trajectory.metrics[{key!r}]: expected a finite number, got {value!r}")
        if len(self.response_tokens) != len(self.response_masks):
            raise TrajectoryError(
                f"Trajectory.response_masks: expected length {len(self.response_tokens)} "
                f"(same as response_tokens), got {len(self.response_masks)}"
            )
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_tokens):
            raise TrajectoryError(
                f"Trajectory.response_logprobs: expected length {len(self.response_tokens)}, "
                f"got {len(self.response_logprobs)}"
            )
        if self.status and self.status not in EpisodeStatus._value2member_map_:
            raise TrajectoryError(
                f"Trajectory.status: expected one of {[s.value for s in EpisodeStatus]}, got {self.status!r}"
            )
        self.status = str(self.status)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict: tensors become lists, nested records dicts."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if is_tensor(value):
                value = value.tolist()
            elif f.name == "steps":
                value = [s.to_dict() for s in value]
            elif f.name == "segments":
                value = [s.to_dict() for s in value]
            elif f.name in ("chat_completions", "metrics"):
                value = json_copy(value)
            elif f.name in ("task", "sampling"):
                value = json_copy(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Build from ``to_dict`` output; unknown keys raise ``TrajectoryError``."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise TrajectoryError(f"{cls.__name__}.from_dict: unknown keys {unknown}")
        kwargs = dict(data)
        if "steps" in kwargs:
            kwargs["steps"] = [Step.from_dict(s) for s in kwargs["steps"]]
        if "segments" in kwargs:
            kwargs["segments"] = [Segment.from_dict(s) for s in kwargs["segments"]]
        return cls(**kwargs)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()


@dataclass
class Step:
    """One turn of an episode (seed API).

    Attributes:
        chat_completions: The full context the model saw at this turn (history included), as
            str -> str dicts (a message's ``images`` is dropped).
        thought: Text inside ``<think>`` of the model response.
        action: Text inside ``<tool_call>`` of the model response (None if no call).
        observation: What this step received: the user question at turn 0, else the
            result of the previous action.
        model_response: The whole assistant message.
        info: Extra data (tool calls, per-step token ids, timings, errors).
        reward: Immediate reward, ``toolcall_reward + res_reward``.
        done: Whether the episode ended at this step.
        mc_return: Monte Carlo return from this step onward.
    """

    chat_completions: list[dict[str, str]] = field(default_factory=list)
    thought: str = ""
    action: Any = None
    observation: Any = None
    model_response: str = ""
    info: dict = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False
    mc_return: float = 0.0

    def __post_init__(self) -> None:
        self.chat_completions = without_images(self.chat_completions)
        check_messages("Step.chat_completions", self.chat_completions)
        if not isinstance(self.info, dict):
            raise TrajectoryError(f"Step.info: expected dict, got {type(self.info).__name__}")
        for name in ("reward", "mc_return"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TrajectoryError(f"Step.{name}: expected a finite number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {f.name: json_copy(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        """Build from ``to_dict`` output."""
        return cls(**data)


@dataclass(eq=False)
class StepTrajectory(Trajectory):
    """A trajectory with its per-turn steps (seed API) and its trainable segments.

    The top-level token tensors are those of the first segment; ``segments`` holds
    every segment (one unless memory rewrote the prompt).

    Attributes:
        task: The task dict the episode ran on.
        steps: The episode's steps, non-empty.
        segments: Trainable (prompt, response, mask) sequences sharing ``rollout_id``.
        weight_version_start: The oldest weight version any sampled id of the episode
            was sampled under (its first turn's, as versions only grow), -1 when unknown.
            A trainer's staleness of the episode is its current version minus this.
        weight_version_end: The newest such version (its last sampled id's), -1 when unknown.
    """

    task: Any = None
    steps: list[Step] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    weight_version_start: int = -1
    weight_version_end: int = -1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.steps, list) or not self.steps:
            raise TrajectoryError("StepTrajectory.steps: expected a non-empty list of Step, got an empty list")
        for i, step in enumerate(self.steps):
            if not isinstance(step, Step):
                raise TrajectoryError(f"StepTrajectory.steps[{i}]: expected Step, got {type(step).__name__}")
        for i, segment in enumerate(self.segments):
            if not isinstance(segment, Segment):
                raise TrajectoryError(f"StepTrajectory.segments[{i}]: expected Segment, got {type(segment).__name__}")
        for name in ("weight_version_start", "weight_version_end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise TrajectoryError(f"StepTrajectory.{name}: expected an int >= -1, got {value!r}")


def compute_mc_return(steps: Sequence[Step], gamma: float = 1.0) -> list[float]:
    """Fill ``step.mc_return`` with the discounted return from each step onward.

    ``G = 0; for s in reversed(steps): G = s.reward + gamma * G; s.mc_return = G``.

    Args:
        steps: The episode's steps, in order. Modified in place.
        gamma: Discount factor in [0, 1].

    Returns:
        The returns, in step order.

    Raises:
        TypeError: If gamma is not a number.
        ConfigError: If gamma is outside [0, 1] (a ``ValueError``).
    """
    gamma = check_gamma(gamma)
    g = 0.0
    for step in reversed(steps):
        g = float(step.reward) + gamma * g
        step.mc_return = g
    return [s.mc_return for s in steps]


Observation = tuple[Message, ...]
"""What an env's ``reset`` and ``step`` return as the observation: the whole conversation so far."""
Action = str | PolicyOutput
"""What an env's ``step`` takes: the next assistant message."""

FINISH_REASON_STATUS: dict[str, EpisodeStatus] = {
    FinishReason.LENGTH: EpisodeStatus.TRUNCATION,
    FinishReason.PROMPT_TRUNCATION: EpisodeStatus.PROMPT_TRUNCATION,
    FinishReason.ERROR: EpisodeStatus.POLICY_ERROR,
}
"""The status that ends an episode whose assistant turn finished for this reason (``stop`` ends none)."""


# ---------------------------------------------------------------- checks of the records' fields
# Token ids, logprobs and masks become 1-D tensors (torch is imported only when a record holds one);
# messages are checked to be ``list[dict[str, str]]``; metadata is deep-copied as plain JSON. Each
# failure raises TrajectoryError naming the field.
