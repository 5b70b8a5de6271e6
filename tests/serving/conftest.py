"""Fixtures of the server-safety tests: an ASGI app served by uvicorn in a thread of the test process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class ThreadServer:
    """A uvicorn server running an ASGI app on a free local port, in a daemon thread."""

    def __init__(self, app: Any, **config: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    access_log=False, **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def serve_app() -> Iterator[Callable[..., ThreadServer]]:
    """Factory: ``serve_app(app, **uvicorn_config)`` serves ``app`` until the module's tests are done."""
    servers: list[ThreadServer] = []

    def start(app: Any, **config: Any) -> ThreadServer:
        server = ThreadServer(app, **config)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
