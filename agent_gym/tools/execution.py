"""A tool's return value as the text of its observation.

Tools with a time limit run through :func:`~agent_gym.utils.runtime.call_with_timeout` (pooled
daemon worker threads; a call past its limit gives a timeout at once and is abandoned).
"""

from __future__ import annotations

import enum
import json
from typing import Any

__all__ = ["to_text"]


def to_text(value: Any) -> str:
    """A tool's return value as the text of its observation (JSON for containers, ``""`` for None)."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".12g")
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
