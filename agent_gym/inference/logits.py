"""Next-token selection shared by every in-process sampler.

``TransformersPolicy`` and the reference server pick tokens with exactly this code
(:func:`draw_tokens`, called by :class:`~agent_gym.inference.batch_engine.BatchEngine`), so the
logprobs a policy records match what the server reports and what a trainer re-scoring the same
model at the same temperature computes: penalties, then temperature, then top-k / top-p /
min-p, then a draw from the resulting ("processed") distribution.

:func:`draw_tokens` works on a whole batch of rows in a few tensor operations (one call per
decode step and sampling setting instead of one per sequence); each row still draws from its own
generator, so a row's id does not depend on the other rows of the batch. :func:`draw_token` is
the same distribution for one row, drawn with ``torch.multinomial`` (other ids for a seed).
:func:`sample_next` (and :func:`sample_with_penalties`, with running penalty state) is the
batched draw for one sequence: the id ``TransformersPolicy`` draws for it.

The logprob modes (:data:`LOGPROBS_MODES`, named as vLLM's ``--logprobs-mode`` values) say which
distribution a recorded logprob comes from; they are defined here, below every policy and server.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = [
    "LOGPROBS_MODES",
    "DrawParams",
    "PenaltyParams",
    "Penalties",
    "check_logprobs_mode",
    "draw_token",
    "draw_tokens",
    "sample_next",
    "sample_with_penalties",
]

#: The logprob modes, named as vLLM's ``--logprobs-mode`` values (the first is vLLM's default):
#: ``raw_logprobs`` is the log-softmax of the model's logits before penalties, temperature and
#: top-k/top-p/min-p; ``processed_logprobs`` is the log-softmax after them.
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


def check_logprobs_mode(value: str, name: str = "logprobs_mode") -> str:
    """Return ``value`` if it is one of :data:`LOGPROBS_MODES`.

    Raises:
        ValueError: Any other value.
    """
    if value not in LOGPROBS_MODES:
        raise ValueError(f"{name}: expected one of {', '.join(LOGPROBS_MODES)}, got {value!r}")
    return value


class PenaltyParams(Protocol):
    """The penalty settings a sampler needs (``SamplingParams`` and server requests have them)."""

    repetition_penalty: float
    frequency_penalty: float
    presence_penalty: float


class DrawParams(PenaltyParams, Protocol):
    """Every setting a draw reads (``SamplingParams`` and the reference server's requests have them)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float


class Penalties:
    """Running inputs of the repetition, frequency and presence penalties of one sequence.

    ``seen`` marks every id of the prompt and of the sampled ids (repetition
    penalty); ``counts`` counts the sampled ids (frequency and presence
    penalties). Each is None when its penalties are off. ``add`` is O(1), so a
    turn never re-reads its prompt per token.

    Args:
        params: The penalty settings.
        vocab: Size of the logits vector.
        context: Prompt ids (and any ids sampled before this state was made).
        generated: Ids already sampled in this turn.
    """

    __slots__ = ("counts", "has_context", "n_generated", "params", "seen")

    def __init__(self, params: PenaltyParams, vocab: int, context: Sequence[int], generated: Sequence[int]) -> None:
        import torch

        self.params = params
        self.seen = None
        self.counts = None
        self.has_context = bool(context)
        self.n_generated = len(generated)
        if params.repetition_penalty != 1.0:
            self.seen = torch.zeros(vocab, dtype=torch.bool)
            if context:
                self.seen[torch.tensor(sorted(set(context)), dtype=torch.long)] = True
        if params.frequency_penalty or params.presence_penalty:
            counts = torch.bincount(torch.tensor(list(generated), dtype=torch.long), minlength=vocab)
            self.counts = counts[:vocab].float()

    def add(self, token: int) -> None:
        """Count ``token`` as sampled (and as part of the context)."""
        self.has_context = True
        self.n_generated += 1
        if self.seen is not None:
            self.seen[token] = True
        if self.counts is not None and 0 <= token < self.counts.numel():
            self.counts[token] += 1.0

    def apply(self, logits: Any) -> Any:
        """Return ``logits`` (1-D float tensor) with the penalties applied."""
        import torch

        params = self.params
        if self.seen is not None and self.has_context:
            seen, penalty = self.seen, params.repetition_penalty
            logits = torch.where(seen & (logits > 0), logits / penalty, torch.where(seen, logits * penalty, logits))
        if self.counts is not None and self.n_generated:
            counts = self.counts
            logits = logits - (params.frequency_penalty * counts + params.presence_penalty * (counts > 0).float())
        return logits


def draw_token(
    logits: Any,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    generator: Any,
    banned: Iterable[int] = (),
) -> tuple[int, Any]:
    """Pick the next id from penalized float logits.

    Args:
        logits: 1-D float tensor (a copy the function may modify).
        temperature: Below 1e-5 the choice is greedy.
        top_k: Keep the k most likely ids (0 or -1: off).
        top_p: Keep the smallest set of ids whose mass reaches ``top_p``.
        min_p: Drop ids less likely than ``min_p`` times the most likely one.
        generator: A ``torch.Generator`` for reproducible draws.
        banned: Ids that may not be drawn (stop ids before ``min_tokens``).

    Returns:
        ``(token id, processed log-probabilities)``: the distribution the id was
        drawn from, after temperature and filters (greedy: of the raw logits).
    """
    import torch

    banned = sorted(set(banned))
    if banned:
        logits[torch.tensor(banned, dtype=torch.long)] = float("-inf")
    if temperature < 1e-5:
        return int(torch.argmax(logits)), torch.log_softmax(logits, dim=-1)
    logits = logits / temperature
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        drop = (probs.cumsum(-1) - probs) > top_p  # keep the smallest prefix whose mass reaches top_p
        drop[0] = False
        logits[order[drop]] = float("-inf")
    if min_p > 0.0:
        probs = torch.softmax(logits, dim=-1)
        logits[probs < min_p * probs.max()] = float("-inf")
    logp = torch.log_softmax(logits, dim=-1)
    return int(torch.multinomial(logp.exp(), 1, generator=generator)), logp


def draw_tokens(
    logits: Any,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    generators: Sequence[Any],
    banned: Iterable[int] = (),
    banned_rows: Sequence[bool] | None = None,
) -> tuple[list[int], Any]:
    """Pick the next id of every row of a batch of penalized float logits.

    The distribution of each row is the one :func:`draw_token` draws from (banned ids, then
    temperature, top-k, top-p, min-p). The draw itself is an inverse-CDF draw: one uniform
    number from the row's own generator, located in the row's cumulative probabilities (in
    float64). A row's id therefore depends only on its logits and its generator, never on the
    other rows; the ids differ from :func:`draw_token`'s (``torch.multinomial``) for the same
    generator state.

    Args:
        logits: 2-D float tensor ``[rows, vocab]`` (a copy the function may modify).
        temperature: Below 1e-5 the choice is greedy (no draw).
        top_k: Keep the k most likely ids (0 or -1: off).
        top_p: Keep the smallest set of ids whose mass reaches ``top_p``.
        min_p: Drop ids less likely than ``min_p`` times the most likely one.
        generators: One ``torch.Generator`` per row.
        banned: Ids that may not be drawn (stop ids before ``min_tokens``).
        banned_rows: Which rows ``banned`` applies to (None: every row).

    Returns:
        ``(token id per row, processed log-probabilities [rows, vocab])``.
    """
    import torch

    rows, vocab = logits.shape
    if len(generators) != rows:
        raise ValueError(f"generators: expected one per row ({rows}), got {len(generators)}")
    banned = sorted(set(banned))
    if banned:
        ids = torch.tensor(banned, dtype=torch.long)
        if banned_rows is None:
            logits[:, ids] = float("-inf")
        elif any(banned_rows):
            which = torch.tensor([i for i, b in enumerate(banned_rows) if b], dtype=torch.long)
            logits[which[:, None], ids[None, :]] = float("-inf")
    if temperature < 1e-5:
        return torch.argmax(logits, dim=-1).tolist(), torch.log_softmax(logits, dim=-1)
    logits = logits / temperature
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        drop = (probs.cumsum(-1) - probs) > top_p  # keep the smallest prefix whose mass reaches top_p
        drop[:, 0] = False
        logits = logits.scatter(1, order, ordered.masked_fill(drop, float("-inf")))
    if min_p > 0.0:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    uniform = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    cdf = probs.double().cumsum(-1)
    target = (uniform * cdf[:, -1])[:, None]
    token = torch.searchsorted(cdf, target, right=True).clamp_(max=vocab - 1)
    # rounding can land past the last id with mass; fall back to the most likely id there
    token = torch.where(probs.gather(1, token) > 0, token, probs.argmax(dim=-1, keepdim=True))
    return token[:, 0].tolist(), logp


def sample_next(
    logits: Any,
    sampling: DrawParams,
    generated: Sequence[int],
    context: Sequence[int],
    banned: Sequence[int],
    generator: Any,
) -> tuple[int, float]:
    """Pick the next id from raw logits; return ``(id, processed logprob)``.

    The same draw as ``TransformersPolicy`` makes for a sequence (:func:`draw_tokens`).

    Args:
        logits: 1-D float tensor of next-token logits.
        sampling: The sampling settings (e.g. a ``SamplingParams``).
        generated: Ids sampled so far in this turn (for frequency/presence penalties).
        context: Prompt and generated ids (for the repetition penalty).
        banned: Ids masked out (stop ids before ``min_tokens``).
        generator: A ``torch.Generator`` for reproducible draws.
    """
    penalties = Penalties(sampling, logits.numel(), context, generated)
    return sample_with_penalties(logits, sampling, penalties, banned, generator)


def sample_with_penalties(
    logits: Any, sampling: DrawParams, penalties: Penalties, banned: Sequence[int], generator: Any
) -> tuple[int, float]:
    """:func:`sample_next` with the penalty inputs given as running state (``penalties``).

    The caller records the drawn id with ``penalties.add(id)`` before the next draw.
    """
    shaped = logits.float()[None].clone()
    if penalties.seen is not None or penalties.counts is not None:
        shaped[0] = penalties.apply(shaped[0])
    tokens, logp = draw_tokens(shaped, temperature=sampling.temperature, top_k=sampling.top_k,
                               top_p=sampling.top_p, min_p=sampling.min_p, generators=[generator], banned=banned)
    return tokens[0], float(logp[0, tokens[0]])
