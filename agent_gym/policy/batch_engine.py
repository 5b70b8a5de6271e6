"""Moved to :mod:`agent_gym.inference` (this module keeps the old import path working)."""

from __future__ import annotations

from agent_gym.inference import BatchEngine, Batcher

__all__ = ["BatchEngine", "Batcher"]
