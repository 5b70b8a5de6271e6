"""Moved to :mod:`agent_gym.inference.logits` (this module keeps the old import path working)."""

from __future__ import annotations

from agent_gym.inference.logits import Penalties, PenaltyParams, draw_token, draw_tokens

__all__ = ["PenaltyParams", "Penalties", "draw_token", "draw_tokens"]
