"""Exception hierarchy of agent_gym.

Programmer errors (bad arguments) raise :class:`ConfigError` (a ``ValueError``) or the
built-in ``TypeError``, through the checks in :mod:`agent_gym.checks`; the other classes
signal failures of components around an episode: a policy server that cannot be reached,
a summary call that timed out, a missing optional dependency. Model output is never a
reason to raise: a tool call whose arguments fail validation raises
:class:`ArgumentError` inside the tool layer, which turns it into an error observation.
"""

from __future__ import annotations

__all__ = [
    "AgentGymError",
    "ArgumentError",
    "ConfigError",
    "EnvCheckError",
    "MissingExtraError",
    "PolicyError",
    "ServerError",
    "SummaryTimeoutError",
    "TrajectoryError",
]


class AgentGymError(Exception):
    """Base class of every error raised by agent_gym itself."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is invalid (also a ``ValueError``)."""


class PolicyError(AgentGymError):
    """The policy could not produce an action (every server failed, model crashed, ...)."""


class ServerError(PolicyError):
    """A specific inference server answered with an error or an unreadable body.

    Attributes:
        server: The address of the server that failed.
        status: The HTTP status code, if one was received.
    """

    def __init__(self, message: str, *, server: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.status = status


class ArgumentError(AgentGymError, ValueError):
    """A tool call's arguments failed validation against the tool's signature.

    Raised inside the tool layer and turned into an error observation there: model
    output never makes an env raise.
    """


class SummaryTimeoutError(AgentGymError, TimeoutError):
    """A memory summary call did not return within the memory's ``summary_timeout``."""


class TrajectoryError(AgentGymError, ValueError):
    """A trajectory record is inconsistent (bad tensor, wrong metric keys, ...)."""


class MissingExtraError(AgentGymError, ImportError):
    """An optional dependency is not installed.

    The message names the pip extra that installs it, e.g. ``pip install 'agent-gym[ray]'``.
    """

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module!r} is required for this feature but is not installed; "
            f"install it with: pip install 'agent-gym[{extra}]'"
        )
        self.module = module
        self.extra = extra


class EnvCheckError(AgentGymError, AssertionError):
    """An environment failed :func:`~agent_gym.utils.env_checker.check_agent_env`.

    The message lists every failed check with what to change; ``report`` holds the
    whole :class:`~agent_gym.utils.env_checker.EnvCheckReport`. Also an
    ``AssertionError``, as the failures of Gymnasium's ``check_env`` are.

    Attributes:
        report: The checker's report (every check, passed or not).
    """

    def __init__(self, message: str, *, report: object = None) -> None:
        super().__init__(message)
        self.report = report
