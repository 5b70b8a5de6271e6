"""``python -m agent_gym`` runs the command line."""

import sys

from agent_gym.cli import main

sys.exit(main())
