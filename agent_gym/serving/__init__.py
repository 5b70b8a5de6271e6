"""What the package's HTTP servers share to be safe to expose: tokens, limits, off-loop work, clean stops.

The four servers (``agent-gym serve``, ``gateway``, ``serve-env``, ``serve-retriever``) use:

* :mod:`~agent_gym.serving.auth` - tokens from a flag, an environment variable or generated;
  constant-time comparison; an ASGI guard answering 401;
* :mod:`~agent_gym.serving.limits` - :class:`RequestLimits` and the body-size cap (413);
* :func:`~agent_gym.utils.runtime.run_blocking` and :class:`~agent_gym.utils.runtime.LoopThread`
  (the package's concurrency plumbing) - heavy work on daemon threads or a loop of its own, so
  ``/health`` always answers;
* :mod:`~agent_gym.serving.templates` - client chat templates refused by default, rendered in a
  bounded sandbox on opt-in;
* :mod:`~agent_gym.serving.env_server` - ``serve-env``'s app, resetting only to its own tasks;
* :mod:`~agent_gym.serving.runner` - the start line (address, who can reach it, auth) and a stop
  within seconds of SIGINT/SIGTERM.
"""

from __future__ import annotations

from agent_gym.serving.auth import ResolvedToken, TokenGuard, auth_headers, new_token, resolve_token, tokens_equal
from agent_gym.serving.limits import BodyLimit, RequestLimits, add_limit_arguments, limits_from_args
from agent_gym.serving.runner import bind_note, is_loopback, run_server

__all__ = [
    "BodyLimit",
    "RequestLimits",
    "ResolvedToken",
    "TokenGuard",
    "add_limit_arguments",
    "auth_headers",
    "bind_note",
    "is_loopback",
    "limits_from_args",
    "new_token",
    "resolve_token",
    "run_server",
    "tokens_equal",
]
