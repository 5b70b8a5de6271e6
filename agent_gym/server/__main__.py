"""``python -m agent_gym.server``: run the reference server (see :mod:`agent_gym.reference_server`)."""

from __future__ import annotations

import sys

from agent_gym.reference_server.main import main

if __name__ == "__main__":
    sys.exit(main())
