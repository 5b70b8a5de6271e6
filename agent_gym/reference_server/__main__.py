"""``python -m agent_gym.reference_server``: run the reference server."""

from __future__ import annotations

import sys

from agent_gym.reference_server.main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
