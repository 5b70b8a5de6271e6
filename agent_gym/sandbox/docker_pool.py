"""Docker containers started for sandboxes: removal at exit, and pools of pre-started ones.

Every container started here is remembered until removed, and removed (forced) at interpreter
exit. :class:`DockerPool` keeps pre-started containers of one configuration, refilled in the
background, so that an episode does not wait for a container to start; :func:`pool_for` gives
the process one pool per (client, options).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from agent_gym.checks import check_int
from agent_gym.utils.creation_limit import wait_for_creation

__all__ = ["DockerPool", "pool_for", "remove_container", "start_container"]

_LIVE: dict[str, Any] = {}  # container id -> container, for removal at exit
_LIVE_LOCK = threading.Lock()


def remove_container(container: Any) -> None:
    """Remove ``container`` (forced) and forget it; errors (already gone, no engine) are ignored."""
    container_id = getattr(container, "id", None)
    if container_id is not None:
        with _LIVE_LOCK:
            _LIVE.pop(container_id, None)
    try:
        container.remove(force=True)
    except Exception:  # already gone, or the engine went away
        pass


@atexit.register
def _remove_all() -> None:
    with _LIVE_LOCK:
        containers = list(_LIVE.values())
    for container in containers:
        remove_container(container)


def start_container(client: Any, options: Mapping[str, Any]) -> Any:
    """Start a container with ``options`` and remember it for removal at interpreter exit.

    The start waits for the host-wide creation-rate limit of sandboxes when one is set
    (:mod:`agent_gym.utils.creation_limit`).
    """
    wait_for_creation("sandbox")
    container = client.containers.run(**options)
    with _LIVE_LOCK:
        _LIVE[container.id] = container
    return container


class DockerPool:
    """Pre-started containers of one configuration, refilled in the background.

    Args:
        client: A Docker client (:func:`~agent_gym.sandbox.docker.docker_client`).
        options: :func:`~agent_gym.sandbox.docker.container_options` of the containers.
        size: Containers kept ready.
    """

    def __init__(self, client: Any, options: Mapping[str, Any], size: int = 2) -> None:
        self.client = client
        self.options = dict(options)
        self.size = check_int("size", size, low=0)
        self._ready: list[Any] = []
        self._lock = threading.Lock()
        self._filling = 0
        self._closed = False
        self._refill()

    def _refill(self) -> None:
        with self._lock:
            missing = self.size - len(self._ready) - self._filling
            self._filling += max(missing, 0)
        for _ in range(max(missing, 0)):
            threading.Thread(target=self._add, daemon=True).start()

    def _add(self) -> None:
        try:
            container = start_container(self.client, self.options)
        except Exception:  # the next acquire starts one itself and reports the error
            container = None
        with self._lock:
            self._filling -= 1
            if container is not None and not self._closed:
                self._ready.append(container)
                container = None
        if container is not None:
            remove_container(container)

    def acquire(self) -> Any:
        """A started container (a pre-started one if ready), then refill the pool."""
        with self._lock:
            container = self._ready.pop() if self._ready else None
        if container is None:
            container = start_container(self.client, self.options)
        self._refill()
        return container

    def close(self) -> None:
        """Remove the containers kept ready; safe to call twice."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        for container in ready:
            remove_container(container)


_POOLS: dict[tuple[Any, ...], DockerPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(client: Any, options: dict[str, Any], size: int) -> DockerPool:
    """The process's pool of ``client`` containers with ``options`` (made on first use)."""
    key = (id(client), repr(sorted(options.items(), key=lambda kv: kv[0])))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = DockerPool(client, options, size)
        return pool


@atexit.register
def _close_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
