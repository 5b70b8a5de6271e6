"""A verl advantage estimator that keeps masked rows out of their GRPO group.

verl's agent loop sees one row at a time, so ``AgentGymAgentLoop`` cannot give an episode that
failed for infrastructure reasons a reward that leaves its group's baseline alone; it gives such a
row an all-zero ``response_mask`` (and reward 0.0). verl's own ``grpo`` estimator still averages
that reward into the group. :func:`grpo_advantages` is verl's GRPO outcome advantage with every
row whose ``response_mask`` is all zero (nothing to train on) left out of its group's mean and
standard deviation and given advantage 0; on groups without such rows it equals verl's ``grpo``.
:func:`register_advantage_estimator` registers it with verl as :data:`ADVANTAGE_ESTIMATOR`
(``algorithm.adv_estimator=agent_gym_grpo``); it must run in the process that computes the
advantages (verl's ``TaskRunner``), see docs/trainers.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["ADVANTAGE_ESTIMATOR", "grpo_advantages", "register_advantage_estimator"]

ADVANTAGE_ESTIMATOR = "agent_gym_grpo"
"""The name :func:`grpo_advantages` registers under with verl (``algorithm.adv_estimator``)."""


def _setting(config: Any, name: str, default: Any) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        value = config.get(name, default)
    else:
        value = getattr(config, name, default)
    return default if value is None else value


def grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages as verl computes them, with rows that have nothing to train on out of their group.

    A row's score is the sum of its ``token_level_rewards``. Rows of one ``index`` (verl's
    ``uid``: one prompt's samples) whose ``response_mask`` has a 1 form the group: its mean and
    (unbiased) standard deviation are theirs alone. A prompt sampled once has mean 0 and std 1 (as
    in verl); the only row of a larger group that has something to train on has nothing to be
    compared with and gets advantage 0. A row whose mask is all zero (an agent_gym episode masked
    for an infrastructure failure) gets advantage 0 and moves no statistic.

    Args:
        token_level_rewards: ``(batch, response_length)`` rewards (verl puts the score on the
            last response id).
        response_mask: ``(batch, response_length)`` loss mask.
        index: The group id of each row.
        epsilon: Added to the standard deviation.
        norm_adv_by_std_in_grpo: Divide by the group's std (GRPO) or not (Dr. GRPO); None reads
            ``config["norm_adv_by_std_in_grpo"]`` (default True).
        config: verl's ``algorithm`` config (what verl passes to a registered estimator).
        **kwargs: Other keyword arguments verl passes (ignored).

    Returns:
        ``(advantages, returns)``, both ``(batch, response_length)`` and zero where the mask is 0.
    """
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(_setting(config, "norm_adv_by_std_in_grpo", True))
    scores = token_level_rewards.sum(dim=-1)
    trained = response_mask.sum(dim=-1) > 0
    sizes: dict[Any, int] = {}
    groups: dict[Any, list[int]] = {}
    for row, key in enumerate(index):
        sizes[key] = sizes.get(key, 0) + 1
        if bool(trained[row]):
            groups.setdefault(key, []).append(row)
    with torch.no_grad():
        advantages = torch.zeros_like(scores)
        for key, rows in groups.items():
            members = scores[rows]
            if sizes[key] == 1:  # a prompt sampled once: verl's rule (no baseline)
                mean, std = torch.tensor(0.0), torch.tensor(1.0)
            elif len(rows) == 1:  # the only one of its group that ran: nothing to compare it with
                continue
            else:
                mean, std = members.mean(), members.std()
            centred = members - mean
            advantages[rows] = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred
        out = advantages.unsqueeze(-1) * response_mask
    return out, out


def register_advantage_estimator() -> str:
    """Register :func:`grpo_advantages` with verl as :data:`ADVANTAGE_ESTIMATOR` (again: nothing happens).

    Returns:
        The estimator's name, for ``algorithm.adv_estimator``.

    Raises:
        agent_gym.errors.MissingExtraError: verl is not installed.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        from agent_gym.errors import MissingExtraError

        raise MissingExtraError("verl", "verl") from exc
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ADVANTAGE_ESTIMATOR) is not grpo_advantages:
        core_algos.register_adv_est(ADVANTAGE_ESTIMATOR)(grpo_advantages)
    return ADVANTAGE_ESTIMATOR
