"""Programs the SWE-v0 grader runs inside its grading sandbox (their text is written there; the host never runs them).

* :mod:`~agent_gym.envs.swe.scripts.prepare` (a bash program, as text): extracts the base, applies the
  agent's patch (three ways), lists what changed in the tree, applies the hidden tests.
* :mod:`~agent_gym.envs.swe.scripts.guarded_pytest`: runs pytest in a guarded child process and writes
  the verdict from its parent, authenticated with a per-run key.
* :mod:`~agent_gym.envs.swe.scripts.names`: the module names a patch may not shadow (the standard
  library and what is installed), as the sandbox's Python sees them.

Each needs only bash, git, tar and patch, or Python 3.8+ (``guarded_pytest`` also pytest), and imports
nothing from agent_gym.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["script_text"]

_HERE = Path(__file__).resolve().parent


_NAMES = ("prepare", "guarded_pytest", "names")


def script_text(name: str) -> str:
    """The source of the program ``name`` (``"prepare"``: bash; ``"guarded_pytest"``, ``"names"``: Python)."""
    if name not in _NAMES:
        raise ValueError(f"name: expected one of {_NAMES}, got {name!r}")
    if name == "prepare":
        from agent_gym.envs.swe.scripts.prepare import SCRIPT

        return SCRIPT
    return (_HERE / f"{name}.py").read_text(encoding="utf-8")
