"""A policy-gradient loss for samples drawn by older weights: truncated importance sampling (TIS).

With asynchronous rollouts a sample's ids were drawn by the weights of some earlier version
(the *behaviour* policy ``mu``, whose logprobs the rollout recorded) while the trainer computes
gradients for its current weights ``pi``. The per-id importance ratio
``rho = exp(logp_pi - logp_mu)`` corrects for the difference; it is truncated at ``clip`` (the
ratio is capped, never dropped) so that one id the current policy likes far more than the old
one cannot dominate the step:

    w = min(rho, clip)            (no gradient through w)
    loss = -sum(w * A * logp_pi * mask) / normalizer

The gradient is ``w * A * grad(logp_pi)``: for ``rho <= clip`` it is the importance-weighted
policy gradient ``A * grad(rho)``; above ``clip`` it is the policy gradient scaled by ``clip``
(the truncated weight of IMPALA's V-trace policy gradient, ``min(rho_bar, pi / mu)``, and the
cap of the "TIS" correction for rollout/trainer mismatch, where ``clip = 2`` is a common choice).
At ``rho = 1`` (on-policy) it is the plain REINFORCE gradient with advantages.

:class:`RatioStats` adds up the ratio statistics (mean, max, fraction truncated) over the
sampled ids of several calls (one call per sequence keeps the memory of one forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RatioStats", "tis_policy_gradient_loss", "truncated_importance_weights"]


@dataclass
class RatioStats:
    """Importance ratios ``exp(logp_current - logp_behaviour)`` over sampled ids (mask 1).

    Attributes:
        tokens: Number of sampled ids counted.
        ratio_sum: Sum of their ratios (before truncation).
        ratio_max: Largest ratio (0.0 when none was counted).
        clipped: How many ratios were above the clip (truncated).
    """

    tokens: int = 0
    ratio_sum: float = 0.0
    ratio_max: float = 0.0
    clipped: int = 0

    @property
    def ratio_mean(self) -> float:
        """Mean ratio (0.0 when no id was counted)."""
        return self.ratio_sum / self.tokens if self.tokens else 0.0

    @property
    def clipped_fraction(self) -> float:
        """Fraction of the ids whose ratio was truncated (0.0 when none was counted)."""
        return self.clipped / self.tokens if self.tokens else 0.0

    def add(self, other: RatioStats) -> RatioStats:
        """Add ``other``'s counts to these (in place); returns ``self``."""
        self.tokens += other.tokens
        self.ratio_sum += other.ratio_sum
        self.ratio_max = max(self.ratio_max, other.ratio_max)
        self.clipped += other.clipped
        return self

    def as_dict(self) -> dict[str, float]:
        """``{"ratio_mean", "ratio_max", "clipped_fraction", "tokens"}`` for logs."""
        return {"ratio_mean": self.ratio_mean, "ratio_max": self.ratio_max,
                "clipped_fraction": self.clipped_fraction, "tokens": float(self.tokens)}


def truncated_importance_weights(logp: Any, behaviour_logp: Any, mask: Any, clip: float) -> tuple[Any, RatioStats]:
    """Per-id truncated importance weights ``min(exp(logp - behaviour_logp), clip)``, detached.

    Args:
        logp: Current logprobs of the sampled ids (torch tensor, any shape).
        behaviour_logp: The logprobs the rollout recorded for the same ids (same shape).
        mask: 1 on sampled ids, 0 elsewhere (same shape); only mask-1 ids count in the stats.
        clip: The truncation ``C`` (> 0).

    Returns:
        The weights (no gradient; same shape) and the ratio statistics over mask-1 ids.

    Raises:
        ValueError: ``clip`` is not positive or the shapes differ.
    """
    import torch

    if not clip > 0:
        raise ValueError(f"clip: expected a positive number, got {clip!r}")
    logp = torch.as_tensor(logp)
    behaviour = torch.as_tensor(behaviour_logp, dtype=logp.dtype, device=logp.device)
    keep = torch.as_tensor(mask, device=logp.device) > 0
    if behaviour.shape != logp.shape or keep.shape != logp.shape:
        raise ValueError(f"logp, behaviour_logp, mask: expected one shape, got {tuple(logp.shape)}, "
                         f"{tuple(behaviour.shape)}, {tuple(keep.shape)}")
    with torch.no_grad():
        ratio = torch.exp(logp.detach() - behaviour)
        weights = torch.clamp(ratio, max=clip)
        counted = ratio[keep]
        stats = RatioStats(tokens=int(counted.numel()), ratio_sum=float(counted.sum()),
                           ratio_max=float(counted.max()) if counted.numel() else 0.0,
                           clipped=int((counted > clip).sum()))
    return weights, stats


def tis_policy_gradient_loss(
    logp: Any,
    behaviour_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip: float = 2.0,
    normalizer: float | None = None,
) -> tuple[Any, RatioStats]:
    """The truncated-importance-sampling policy-gradient loss of one sequence (or a batch).

    ``loss = -sum(min(rho, clip) * A * logp * mask) / normalizer`` with ``rho = exp(logp -
    behaviour_logp)`` and no gradient through the weight (see the module docstring).

    Args:
        logp: Current logprobs of the sampled ids (with gradient).
        behaviour_logp: The rollout's recorded logprobs of the same ids.
        advantages: A number (the sequence's advantage) or a tensor broadcastable to ``logp``.
        mask: 1 on the ids trained on.
        clip: The truncation ``C`` of the ratio.
        normalizer: What the sum is divided by (default: the number of mask-1 ids here; pass the
            batch's id count for a token mean over several calls).

    Returns:
        The scalar loss and the ratio statistics.
    """
    import torch

    weights, stats = truncated_importance_weights(logp, behaviour_logp, mask, clip)
    maskf = torch.as_tensor(mask, dtype=logp.dtype, device=logp.device)
    adv = torch.as_tensor(advantages, dtype=logp.dtype, device=logp.device)
    denominator = float(normalizer) if normalizer is not None else max(float(maskf.sum()), 1.0)
    loss = -(weights * adv * logp * maskf).sum() / denominator
    return loss, stats
