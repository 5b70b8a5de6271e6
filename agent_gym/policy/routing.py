"""Session-affine routing of requests over several inference servers.

One episode should stay on one server so the server's prefix cache holds its growing
prompt. :class:`SessionRouter` assigns a new session to the least-loaded healthy
server (ties broken by a consistent hash of the session id), keeps it there, and moves
it along the session's consistent-hash preference order when its server fails.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

__all__ = ["HashRing", "SessionRouter", "normalize_address"]


def normalize_address(address: str) -> tuple[str, str]:
    """Split a server address into ``("IP:PORT", base_url)``.

    Accepts ``"127.0.0.1:8000"``, ``"http://host:8000"`` and ``"https://host/prefix"``.

    Raises:
        ValueError: If ``address`` is empty or has no host.
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"server address: expected 'IP:PORT' or a URL, got {address!r}")
    address = address.strip()
    url = address if "://" in address else f"http://{address}"
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"server address: expected 'IP:PORT' or a URL, got {address!r}")
    name = parts.netloc
    base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    if base.endswith("/v1"):
        base = base[:-3]
    return name, base


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


class HashRing:
    """A consistent-hash ring with virtual nodes.

    Args:
        nodes: The node names.
        replicas: Virtual nodes per node.
    """

    def __init__(self, nodes: Sequence[str], replicas: int = 64) -> None:
        self.nodes = list(nodes)
        points = sorted((_hash(f"{node}#{i}"), node) for node in self.nodes for i in range(replicas))
        self._keys = [p for p, _ in points]
        self._owners = [n for _, n in points]

    def preference(self, key: str) -> list[str]:
        """Return every node once, in the order met walking the ring from ``key``'s hash."""
        if not self._keys:
            return []
        start = bisect.bisect(self._keys, _hash(key))
        order: list[str] = []
        seen: set[str] = set()
        total = len(self._keys)
        for i in range(total):
            node = self._owners[(start + i) % total]
            if node not in seen:
                seen.add(node)
                order.append(node)
                if len(order) == len(self.nodes):
                    break
        return order


class SessionRouter:
    """Sticky, load-aware assignment of sessions to servers.

    Args:
        servers: Server names (``"IP:PORT"``).
        unhealthy_seconds: How long a failed server is avoided.
        clock: Monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        servers: Sequence[str],
        *,
        unhealthy_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not servers:
            raise ValueError("servers: expected at least one server address, got none")
        self.servers = list(servers)
        self.unhealthy_seconds = unhealthy_seconds
        self._clock = clock
        self._ring = HashRing(self.servers)
        self._assigned: dict[str, str] = {}
        self._sessions: dict[str, int] = dict.fromkeys(self.servers, 0)
        self._in_flight: dict[str, int] = dict.fromkeys(self.servers, 0)
        self._down_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def healthy(self, server: str) -> bool:
        """Whether ``server`` is not currently marked unhealthy."""
        return self._down_until.get(server, 0.0) <= self._clock()

    def pick(self, session_id: str, exclude: Iterable[str] = ()) -> str:
        """Return the server for the next request of ``session_id``.

        A session keeps its server while it is healthy and not excluded. Otherwise the
        least-loaded healthy server is chosen (load: open sessions, then requests in
        flight; ties follow the session's consistent-hash order) and the session moves
        there. When every candidate is unhealthy, the one that recovers first is used.

        Args:
            session_id: The session.
            exclude: Servers to avoid if any other is available (e.g. ones that just failed).
        """
        excluded = set(exclude)
        with self._lock:
            current = self._assigned.get(session_id)
            if current is not None and current not in excluded and self.healthy(current):
                return current
            order = self._ring.preference(session_id)
            rank = {s: i for i, s in enumerate(order)}
            candidates = [s for s in order if s not in excluded] or order
            healthy = [s for s in candidates if self.healthy(s)]
            if healthy:
                choice = min(healthy, key=lambda s: (self._sessions[s], self._in_flight[s], rank[s]))
            else:
                choice = min(candidates, key=lambda s: (self._down_until.get(s, 0.0), rank[s]))
            if current != choice:
                if current is not None:
                    self._sessions[current] -= 1
                self._sessions[choice] += 1
                self._assigned[session_id] = choice
            return choice

    def assigned(self, session_id: str) -> str | None:
        """Return the server ``session_id`` is pinned to, if any."""
        return self._assigned.get(session_id)

    def begin(self, server: str) -> None:
        """Count a request to ``server`` as in flight."""
        with self._lock:
            self._in_flight[server] += 1

    def end(self, server: str) -> None:
        """Count a request to ``server`` as finished."""
        with self._lock:
            self._in_flight[server] = max(0, self._in_flight[server] - 1)

    def mark_unhealthy(self, server: str, seconds: float | None = None) -> None:
        """Avoid ``server`` for ``seconds`` (default ``unhealthy_seconds``)."""
        with self._lock:
            self._down_until[server] = self._clock() + (self.unhealthy_seconds if seconds is None else seconds)

    def mark_healthy(self, server: str) -> None:
        """Clear an unhealthy mark on ``server``."""
        with self._lock:
            self._down_until.pop(server, None)

    def release(self, session_id: str) -> None:
        """Forget the assignment of ``session_id``."""
        with self._lock:
            server = self._assigned.pop(session_id, None)
            if server is not None:
                self._sessions[server] -= 1

    def load(self) -> dict[str, tuple[int, int]]:
        """Return ``{server: (open sessions, requests in flight)}``."""
        with self._lock:
            return {s: (self._sessions[s], self._in_flight[s]) for s in self.servers}
