"""``agent_gym/Web-v0``: web tasks in a real headless Chromium, offline, with a browser pool that cannot leak.

See ``docs/web.md``. Needs ``pip install 'agent-gym[web]'`` and a Chromium binary
(Debian: ``apt-get install chromium-headless-shell``).
"""

from agent_gym.envs.web.browser import BrowserCrashed, BrowserError, BrowserHung, BrowserWorker
from agent_gym.envs.web.env import WebEnv
from agent_gym.envs.web.pool import BrowserPool, default_pool

__all__ = ["BrowserCrashed", "BrowserError", "BrowserHung", "BrowserPool", "BrowserWorker", "WebEnv",
           "default_pool"]
