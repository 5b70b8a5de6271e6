"""A host-wide creation-rate limit for sandboxes and browsers: a token bucket in a locked file.

Many processes on one machine (Ray shards, ``collect`` workers, several trainers) each create
sandboxes; started all at once they overload the container engine or the kernel (hundreds of
``bwrap``/``docker run`` calls in the same second). :class:`CreationLimiter` is a token bucket
whose state (tokens, last refill time) lives in one small file per *kind* on the host, read and
written under an exclusive ``fcntl`` lock, so every process of the host draws from the same
bucket: at most ``burst`` creations at once, then ``rate`` per second, whatever the number of
processes. The clock is ``CLOCK_MONOTONIC``, which all processes of a Linux host share.

The library's creation paths (:class:`~agent_gym.sandbox.LocalSandbox`, the Docker sandbox's
container start) call :func:`wait_for_creation` with kind ``"sandbox"``; an env that launches
browsers calls ``wait_for_creation("browser")`` before each launch. The limit is set per kind by
environment variables, so processes that Ray starts get it too (``RayShards(env_vars=...)``):

* ``AGENT_GYM_<KIND>_CREATION_RATE``: creations per second on this host (unset or 0: no limit);
* ``AGENT_GYM_<KIND>_CREATION_BURST``: creations allowed at once (default 1);
* ``AGENT_GYM_CREATION_LIMIT_DIR``: the directory of the bucket files (default: the system's
  temporary directory); processes share a bucket when they share the directory.

Example:
    >>> import os
    >>> os.environ["AGENT_GYM_BROWSER_CREATION_RATE"] = "5"  # doctest: +SKIP
    >>> waited = wait_for_creation("browser")  # at most 5 launches per second on this host  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
import time
from pathlib import Path

from agent_gym.checks import check_float
from agent_gym.errors import ConfigError

__all__ = ["CreationLimiter", "creation_limiter", "wait_for_creation"]

DIR_VARIABLE = "AGENT_GYM_CREATION_LIMIT_DIR"
"""Environment variable naming the directory of the bucket files."""

_STATE = struct.Struct("=dd")  # tokens, time of the last refill (CLOCK_MONOTONIC)
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class CreationLimiter:
    """A token bucket shared by every process of the host that uses the same file.

    Args:
        kind: What is created (``"sandbox"``, ``"browser"``): names the bucket file.
        rate: Creations per second (> 0).
        burst: Creations allowed at once (>= 1).
        directory: Where the bucket file lives (default ``AGENT_GYM_CREATION_LIMIT_DIR`` or the
            temporary directory).

    Raises:
        ConfigError: A kind that is not a short lowercase name, a rate <= 0 or a burst < 1.
    """

    def __init__(self, kind: str, rate: float, burst: float = 1.0, directory: str | os.PathLike[str] | None = None
                 ) -> None:
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise ConfigError(f"kind: expected a lowercase name like 'sandbox' or 'browser', got {kind!r}")
        self.kind = kind
        self.rate = check_float("rate", rate, low=0.0, low_open=True)
        self.burst = check_float("burst", burst, low=1.0)
        base = Path(directory or os.environ.get(DIR_VARIABLE) or tempfile.gettempdir())
        self.path = base / f"agent_gym-{kind}-creations-{os.getuid()}.bucket"

    def _draw(self) -> float:
        """Take a token if one is there; else the seconds until one will be (nothing taken)."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, _STATE.size, 0)
            now = time.monotonic()
            tokens, last = _STATE.unpack(raw) if len(raw) == _STATE.size else (self.burst, now)
            if not (0.0 <= last <= now):  # a file from before a reboot (another clock)
                tokens, last = self.burst, now
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            os.pwrite(fd, _STATE.pack(tokens, now), 0)
            return wait
        finally:
            os.close(fd)  # releases the lock

    def acquire(self, timeout: float | None = None) -> float:
        """Wait for a creation token of the host's bucket.

        Args:
            timeout: Most seconds to wait (None: as long as it takes).

        Returns:
            Seconds waited.

        Raises:
            TimeoutError: No token within ``timeout``.
        """
        started = time.monotonic()
        while True:
            wait = self._draw()
            waited = time.monotonic() - started
            if wait <= 0.0:
                return waited
            if timeout is not None and waited + wait > timeout:
                raise TimeoutError(f"no {self.kind} creation token within {timeout:g}s (limit {self.rate:g}/s "
                                   f"on this host)")
            time.sleep(wait)


def creation_limiter(kind: str = "sandbox") -> CreationLimiter | None:
    """The limiter the environment configures for ``kind`` (``AGENT_GYM_<KIND>_CREATION_RATE``), or None.

    Raises:
        ConfigError: The variables hold something other than numbers in range.
    """
    prefix = f"AGENT_GYM_{kind.upper()}_CREATION_"
    rate_text = os.environ.get(prefix + "RATE", "").strip()
    if not rate_text:
        return None
    try:
        rate = float(rate_text)
        burst = float(os.environ.get(prefix + "BURST", "").strip() or 1.0)
    except ValueError:
        raise ConfigError(f"{prefix}RATE / {prefix}BURST: expected numbers, got {rate_text!r}, "
                          f"{os.environ.get(prefix + 'BURST')!r}") from None
    if rate <= 0:
        return None
    return CreationLimiter(kind, rate, burst)


def wait_for_creation(kind: str = "sandbox", timeout: float | None = None) -> float:
    """Wait for the host's creation limit of ``kind`` when one is set; returns the seconds waited."""
    limiter = creation_limiter(kind)
    return limiter.acquire(timeout) if limiter is not None else 0.0
