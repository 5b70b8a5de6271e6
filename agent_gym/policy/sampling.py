"""Sampling parameters shared by every policy.

:class:`SamplingParams` carries the fields and value ranges of the seed API's
``v1/completions`` parameters (``n``, ``top_k``, ``logprobs``, ``min_p``,
``detokenize``, ``frequency_penalty``, ``max_tokens``, ``min_tokens``,
``presence_penalty``, ``seed``, ``temperature``, ``top_p``) plus the vLLM extras
``stop``, ``stop_token_ids`` and ``repetition_penalty``. Out-of-range values raise
a ``pydantic.ValidationError`` (a ``ValueError``) whose message names the field
and its allowed range.

:meth:`SamplingParams.record` gives what a trajectory stores about how its ids were
sampled (with the logprobs mode, see :data:`LOGPROBS_MODES`, defined with the token draws in
:mod:`agent_gym.inference.logits` and re-exported here), and
:attr:`SamplingParams.truncates` says whether top-k / top-p / min-p cut the
distribution, which makes the samples off-policy for a trainer that scores the full
distribution.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from agent_gym.inference.logits import LOGPROBS_MODES, check_logprobs_mode

__all__ = ["DISTRIBUTION_FIELDS", "LOGPROBS_MODES", "SAMPLING_RANGES", "SamplingParams", "check_logprobs_mode"]

#: The sampling fields that change the distribution the ids are drawn from (recorded with
#: every trajectory by :meth:`SamplingParams.record`).
DISTRIBUTION_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "min_tokens",
)


#: Allowed closed ranges of the numeric fields, ``None`` meaning unbounded on that side.
SAMPLING_RANGES: dict[str, tuple[float | None, float | None]] = {
    "n": (1, None),
    "logprobs": (0, None),
    "min_p": (0.0, 1.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
    "max_tokens": (1, 64000),
    "min_tokens": (0, 64000),
    "seed": (-65535, 65535),
    "temperature": (0.0, 2.0),
    "top_p": (1e-8, 1.0),
}


def _range_text(lo: float | None, hi: float | None) -> str:
    if hi is None:
        return f">= {lo}"
    return f"in [{lo}, {hi}]"


class SamplingParams(BaseModel):
    """How a policy samples one assistant turn.

    Defaults follow the seed API (``top_k=50``, ``logprobs=1``, ``max_tokens=128``,
    ``temperature=0.2``). A policy always records the sampled tokens' own logprobs;
    ``logprobs`` is the number of extra top alternatives requested per position (vLLM
    semantics, 0 = only the sampled token).

    Attributes:
        n: Number of samples per request (>= 1). Policies produce one turn per call
            and request a single sample; ``n`` is used by the raw ``completions`` API.
        top_k: Keep the ``k`` most likely tokens; 0 or -1 turns it off.
        logprobs: Number of top alternatives to return per position (>= 0).
        min_p: Drop tokens less likely than ``min_p`` times the most likely one, in [0, 1].
        detokenize: Whether the server should detokenize (the policy always decodes
            the sampled ids itself).
        frequency_penalty: Penalty proportional to a token's count so far, in [-2, 2].
        max_tokens: Most tokens to sample per turn, in [1, 64000]; a policy may send
            fewer (the remaining context or response budget).
        min_tokens: Fewest tokens before a stop token may end the turn, in [0, 64000].
        presence_penalty: Penalty for tokens already present, in [-2, 2].
        seed: Random seed in [-65535, 65535], or None for a random stream. The policies
            (``VLLMPolicy``, ``TransformersPolicy``) do not send it as is: each request's
            seed is derived from ``(seed, session id, turn index)`` by :meth:`request_seed`,
            so siblings of a task (same prompt, different session ids) draw different
            samples, and a session id replayed with the same seed reproduces its samples.
            Session ids from ``TrajectoryWrapper`` (``info["episode_id"]``) are random
            uuids, so a ``collect`` run is reproducible per episode only when the caller
            passes deterministic session ids.
        temperature: Sampling temperature in [0, 2]; 0 is greedy.
        top_p: Nucleus mass in [1e-8, 1].
        stop: Stop strings (kept in the output).
        stop_token_ids: Extra ids that end a turn (kept in the output).
        repetition_penalty: Multiplicative penalty (> 0; 1 is off).
        truncation_ok: Set True to say that truncated sampling (``top_k`` > 0, ``top_p`` < 1
            or ``min_p`` > 0) is intended: ``collect`` then does not warn that the samples are
            off-policy for a trainer scoring the full distribution. Never sent to a server.

    The seed API's defaults truncate (``top_k=50``). For on-policy training samples pass
    ``top_k=-1`` (``top_p`` 1 and ``min_p`` 0 are the defaults), as ``agent-gym rollout``
    does unless told otherwise.

    Example:
        >>> SamplingParams(temperature=1.0, max_tokens=256).to_request()["max_tokens"]
        256
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    n: int = 1
    top_k: int = 50
    logprobs: int = 1
    min_p: float = 0.0
    detokenize: bool = False
    frequency_penalty: float = 0.0
    max_tokens: int = 128
    min_tokens: int = 0
    presence_penalty: float = 0.0
    seed: int | None = None
    temperature: float = 0.2
    top_p: float = 1.0
    stop: list[str] = []
    stop_token_ids: list[int] = []
    repetition_penalty: float = 1.0
    truncation_ok: bool = False

    @field_validator(*SAMPLING_RANGES, mode="after")
    @classmethod
    def _in_range(cls, value: Any, info: Any) -> Any:
        if value is None:
            return value
        lo, hi = SAMPLING_RANGES[info.field_name]
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"{info.field_name}: expected a value {_range_text(lo, hi)}, got {value!r}")
        return value

    @field_validator("top_k", mode="after")
    @classmethod
    def _top_k(cls, value: int) -> int:
        if value < -1:
            raise ValueError(f"top_k: expected -1 (off) or a value >= 0, got {value!r}")
        return value

    @field_validator("repetition_penalty", mode="after")
    @classmethod
    def _repetition(cls, value: float) -> float:
        if not value > 0.0:
            raise ValueError(f"repetition_penalty: expected a value > 0, got {value!r}")
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        return value

    @field_validator("stop_token_ids", mode="before")
    @classmethod
    def _stop_ids(cls, value: Any) -> Any:
        if value is None:
            return []
        return value

    @field_validator("stop_token_ids", mode="after")
    @classmethod
    def _stop_ids_range(cls, value: list[int]) -> list[int]:
        bad = [v for v in value if v < 0]
        if bad:
            raise ValueError(f"stop_token_ids: expected ids >= 0, got {bad}")
        return value

    @model_validator(mode="after")
    def _min_le_max(self) -> SamplingParams:
        if self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens: expected a value <= max_tokens ({self.max_tokens}), got {self.min_tokens}"
            )
        return self

    @classmethod
    def coerce(cls, value: SamplingParams | dict[str, Any] | None) -> SamplingParams:
        """Return ``value`` as ``SamplingParams`` (a dict is validated, None gives the defaults).

        Raises:
            TypeError: If ``value`` is neither a ``SamplingParams``, a dict nor None.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls(**value)
        raise TypeError(f"sampling: expected SamplingParams, dict or None, got {type(value).__name__}")

    @property
    def truncates(self) -> bool:
        """Whether top-k, top-p or min-p cut the distribution (off-policy for a full-distribution trainer)."""
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def truncation_text(self) -> str:
        """``"full distribution"``, or the truncation used (e.g. ``"truncated (top_k=50)"``)."""
        if not self.truncates:
            return "full distribution"
        parts = [f"top_k={self.top_k}" if self.top_k > 0 else "", f"top_p={self.top_p:g}" if self.top_p < 1.0 else "",
                 f"min_p={self.min_p:g}" if self.min_p > 0.0 else ""]
        return f"truncated ({', '.join(p for p in parts if p)})"

    def record(self, logprobs_mode: str) -> dict[str, Any]:
        """What a trajectory records about its sampling: ``logprobs_mode`` and :data:`DISTRIBUTION_FIELDS`.

        Args:
            logprobs_mode: One of :data:`LOGPROBS_MODES`, the mode of the logprobs the
                policy returns (for ``VLLMPolicy``, the server's ``--logprobs-mode``).

        Example:
            >>> SamplingParams(top_k=-1).record("raw_logprobs")["top_k"]
            -1
        """
        out: dict[str, Any] = {"logprobs_mode": check_logprobs_mode(logprobs_mode)}
        for name in DISTRIBUTION_FIELDS:
            out[name] = getattr(self, name)
        return out

    def request_seed(self, session_id: str, turn: int) -> int | None:
        """The seed of turn ``turn`` of session ``session_id``; None when ``seed`` is None.

        A stable hash (not Python's salted ``hash``) of ``(seed, session_id, turn)``, in
        [0, 2**31): the same inputs give the same seed in every process.
        """
        if self.seed is None:
            return None
        key = f"{self.seed}\x00{session_id}\x00{turn}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % 2**31

    def to_request(self, *, max_tokens: int | None = None, n: int | None = None) -> dict[str, Any]:
        """Return the vLLM ``/v1/completions`` (and chat) sampling fields.

        Args:
            max_tokens: Overrides ``self.max_tokens`` (e.g. the remaining budget). Always sent,
                because the completions API defaults to 16. ``min_tokens`` is clamped to it.
            n: Overrides ``self.n``.

        Returns:
            A JSON-ready dict: ``n``, ``max_tokens``, ``min_tokens``, ``temperature``,
            ``top_p``, ``top_k``, ``min_p``, the three penalties, ``seed`` (when set),
            ``stop`` and ``stop_token_ids`` (when non-empty).
        """
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        body: dict[str, Any] = {
            "n": self.n if n is None else n,
            "max_tokens": max_tokens,
            # vLLM rejects min_tokens > max_tokens (HTTP 400), e.g. when little budget is left
            "min_tokens": min(self.min_tokens, max_tokens),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "repetition_penalty": self.repetition_penalty,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if self.stop:
            body["stop"] = list(self.stop)
        if self.stop_token_ids:
            body["stop_token_ids"] = list(self.stop_token_ids)
        return body
