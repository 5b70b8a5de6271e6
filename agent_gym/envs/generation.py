"""Former home of :class:`~agent_gym.generation.DeterministicRandom`, now :mod:`agent_gym.generation`.

This module keeps the old import path working.
"""

from __future__ import annotations

from agent_gym.generation import DeterministicRandom

__all__ = ["DeterministicRandom"]
