"""Print the top-level module names a patch may not shadow, as JSON: the standard library and installed ones.

Run inside the grading sandbox as ``python3 -I names.py REPO`` (isolated: neither the working
directory nor ``PYTHONPATH`` is on ``sys.path``, so the repository is not seen as installed unless an
installed distribution really maps to it).
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["main"]


def _top_level(directory: str) -> set[str]:
    """Names importable from one ``sys.path`` directory (modules, packages, extension modules)."""
    found: set[str] = set()
    try:
        entries = os.listdir(directory)
    except OSError:
        return found
    for entry in entries:
        path = os.path.join(directory, entry)
        stem = entry.split(".", 1)[0]
        if entry.endswith((".dist-info", ".egg-info", ".pth")) or not stem.isidentifier():
            continue
        if os.path.isdir(path):
            if "." not in entry:
                found.add(entry)
        elif entry.endswith((".py", ".pyc", ".so", ".pyd")):
            found.add(stem)
    return found


def main() -> None:
    """Print ``{"stdlib": [...], "installed": [...], "python": [cache tag, hexversion]}``."""
    repo = os.path.realpath(sys.argv[1]) if len(sys.argv) > 1 else ""
    stdlib = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    installed: set[str] = set()
    for entry in sys.path:
        real = os.path.realpath(entry or ".")
        if not entry or real == repo or real.startswith(repo + os.sep) or not os.path.isdir(real):
            continue
        installed |= _top_level(real)
    try:
        from importlib.metadata import packages_distributions  # 3.10+

        installed |= {name for name in packages_distributions() if name.isidentifier()}
    except Exception:  # pragma: no cover - older interpreters or broken metadata
        pass
    if not getattr(sys, "stdlib_module_names", None):  # pragma: no cover - before 3.10: the stdlib directory
        import sysconfig

        stdlib |= _top_level(sysconfig.get_paths()["stdlib"])
        installed -= stdlib
    print(json.dumps({"stdlib": sorted(stdlib), "installed": sorted(installed - stdlib),
                      "python": [sys.implementation.cache_tag, sys.hexversion]}))


if __name__ == "__main__":
    main()
