"""Former home of the answer-grading helpers, now :mod:`agent_gym.grading`.

The helpers serve the base environment (:mod:`agent_gym.core`) as well as the envs, so
they live beside it; this module keeps the old import path working (every name of
:mod:`agent_gym.grading` is an attribute here too).
"""

from __future__ import annotations

from typing import Any

import agent_gym.grading as moved

__all__: list[str] = []
__all__ += moved.__all__


def __getattr__(name: str) -> Any:
    if name in moved.__all__:
        return getattr(moved, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
