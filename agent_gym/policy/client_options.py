"""How the vLLM client talks to its servers: concurrency, timeouts, retries, failover, credentials.

:class:`ClientOptions` is the one place these settings are named, checked and documented.
:class:`~agent_gym.policy.vllm_client.VLLMClient` takes one, and so does
:class:`~agent_gym.policy.VLLMPolicy` (as ``client_options=``, or inside a client it is given).

Example:
    >>> ClientOptions(max_retries=1, timeout=30).connect_timeout
    10.0
    >>> ClientOptions.coerce({"timeout": 5}).connect_timeout  # never longer than the timeout
    5.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_gym.checks import check_float, check_int

__all__ = ["ClientOptions"]


@dataclass(frozen=True)
class ClientOptions:
    """Settings of the HTTP side of a vLLM policy (all optional).

    Attributes:
        concurrency: Most requests in flight at once (per event loop), >= 1.
        timeout: Seconds to wait for one response (> 0).
        connect_timeout: Seconds to wait for a connection (> 0); capped at ``timeout``.
        max_retries: Retries after the first attempt (connection errors, timeouts, HTTP 5xx
            and 429), >= 0. Other 4xx answers are not retried. A whole request (its attempts,
            the waits between them and the ``/v1/models`` lookup) takes at most
            ``timeout x (max_retries + 1)`` seconds (20 minutes with the defaults; the
            ``agent-gym rollout`` CLI also limits each episode to 15 minutes by default).
        backoff: First retry delay in seconds; doubles each retry (with jitter), >= 0.
        max_backoff: Cap of the retry delay in seconds, >= 0.
        unhealthy_seconds: How long a failed server is avoided by new picks, >= 0.
        api_key: Sent as a bearer token when given (left out of ``repr``).

    Raises:
        TypeError: A value of the wrong type.
        ConfigError: A value out of range (also a ``ValueError``).
    """

    concurrency: int = 64
    timeout: float = 300.0
    connect_timeout: float = 10.0
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    unhealthy_seconds: float = 10.0
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        timeout = check_float("timeout", self.timeout, low=0.0, low_open=True)
        connect = check_float("connect_timeout", self.connect_timeout, low=0.0, low_open=True)
        checked = {
            "concurrency": check_int("concurrency", self.concurrency, low=1),
            "timeout": timeout,
            "connect_timeout": min(connect, timeout),
            "max_retries": check_int("max_retries", self.max_retries, low=0),
            "backoff": check_float("backoff", self.backoff, low=0.0),
            "max_backoff": check_float("max_backoff", self.max_backoff, low=0.0),
            "unhealthy_seconds": check_float("unhealthy_seconds", self.unhealthy_seconds, low=0.0),
        }
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise TypeError(f"api_key: expected str or None, got {type(self.api_key).__name__}")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def coerce(cls, value: ClientOptions | Mapping[str, Any] | None) -> ClientOptions:
        """Return ``value`` as options: options as given, a mapping of fields, or the defaults for None.

        Raises:
            TypeError: Another type, or a mapping with a name that is not an option.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - names)
            if unknown:
                raise TypeError(f"client options: expected names among {', '.join(sorted(names))}, got {unknown}")
            return cls(**value)
        raise TypeError(f"client_options: expected ClientOptions, a dict or None, got {type(value).__name__}")

    def replace(self, **changes: Any) -> ClientOptions:
        """A copy with ``changes`` applied (checked like the constructor)."""
        return dataclasses.replace(self, **changes)
