"""Run the gateway in process and hand sessions to agents.

Example:
    >>> from agent_gym.gateway import Gateway  # doctest: +SKIP
    >>> with Gateway(["127.0.0.1:8000"], tokenizer, output="runs/agent.jsonl") as gateway:  # doctest: +SKIP
    ...     with gateway.session(task={"id": "t1"}) as s:
    ...         client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
    ...         run_my_agent(client)
    ...         s.reward(1.0)
    ...     trajectory = s.trajectory

The agent gets ``s.api_key``, which samples in its session and nothing else; ending sessions over
HTTP (``POST /sessions/{id}/reward``) needs ``gateway.trainer_token`` (``gateway.trainer_headers``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from agent_gym.gateway.app import create_gateway_app
from agent_gym.gateway.session import GatewaySession
from agent_gym.gateway.store import DEFAULT_REWARD_RANGE, SessionStore
from agent_gym.parsers import env_parser_for, make_parser
from agent_gym.serving.auth import auth_headers
from agent_gym.serving.limits import RequestLimits
from agent_gym.types import StepTrajectory

__all__ = ["Gateway", "SessionHandle"]


class SessionHandle:
    """A session handed to an agent: base URLs, API key, and the trajectory once finished.

    Attributes:
        session_id: The id.
        api_key: The key the agent samples with (it can do nothing else).
        base_url: ``http://HOST:PORT/sessions/{id}`` (the Anthropic client's ``base_url``).
        openai_base_url: ``base_url + "/v1"`` (the OpenAI client's ``base_url``).
        trajectory: The :class:`~agent_gym.types.StepTrajectory`, set when the session ends.
    """

    def __init__(self, gateway: Gateway, session: GatewaySession) -> None:
        self._gateway = gateway
        self._session = session
        self.session_id = session.id
        self.api_key = session.api_key or session.id
        self.base_url = f"{gateway.url}/sessions/{session.id}"
        self.openai_base_url = f"{self.base_url}/v1"
        self.trajectory: StepTrajectory | None = None

    def reward(self, reward: float | None = None, *, rewards: Sequence[float] | None = None,
               status: str | None = None) -> StepTrajectory:
        """Attach rewards and end the episode (see :meth:`GatewaySession.finish`)."""
        self.trajectory = self._gateway.store.finish(self._session, self._gateway.policy, reward=reward,
                                                     rewards=rewards, status=status)
        return self.trajectory

    def current(self) -> StepTrajectory:
        """The trajectory recorded so far."""
        return self._session.trajectory()

    def __enter__(self) -> SessionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session.finished is None:
            self.reward(None)
        self.trajectory = self._session.finished


class Gateway:
    """The gateway server running in a background thread of this process.

    Args:
        server_addresses: vLLM-compatible servers (``"IP:PORT"``), or a ready ``VLLMPolicy``
            (token mode) as ``policy``.
        tokenizer: The model's tokenizer (or a path) for token-in requests.
        sampling: :class:`~agent_gym.policy.SamplingParams` (or a dict); the gateway's sampling
            applies to every turn (clients' sampling fields are not forwarded).
        policy: Use this policy instead of building one.
        host: Interface to bind.
        port: Port (0 picks a free one).
        output: A ``.jsonl`` / ``.parquet`` path receiving every finished session.
        parser: Tool-call parser or its vLLM name (default: the policy's model family, read from
            its chat template where unambiguous, else hermes ``<tool_call>`` tags).
        auto_create: Create sessions on first use of an unknown id.
        gamma: Discount of ``mc_return``.
        model: Model name reported to clients.
        strict_tool_calls: Answer a malformed tool call with a 422 error instead of its text.
        trainer_token: The token of the trainer's routes (create, list, read, reward sessions over
            HTTP); a random one by default (``trainer_token`` attribute).
        reward_range: ``(low, high)`` bounds of every reward (None: any finite number).
        limits: Request limits (:class:`~agent_gym.serving.limits.RequestLimits`).
        **policy_kwargs: More ``VLLMPolicy`` arguments (``client_options``, ``max_model_len``, ...).
    """

    def __init__(
        self,
        server_addresses: Sequence[str] | str | None = None,
        tokenizer: Any = None,
        *,
        sampling: Any = None,
        policy: Any = None,
        host: str = "127.0.0.1",
        port: int = 0,
        output: Any = None,
        parser: Any = None,
        auto_create: bool = False,
        gamma: float = 1.0,
        model: str | None = None,
        strict_tool_calls: bool = False,
        trainer_token: str | None = None,
        reward_range: tuple[float, float] | None = DEFAULT_REWARD_RANGE,
        limits: RequestLimits | None = None,
        **policy_kwargs: Any,
    ) -> None:
        if policy is None:
            if server_addresses is None:
                raise ValueError("server_addresses: expected 'IP:PORT' addresses (or policy=...), got None")
            from agent_gym.policy import VLLMPolicy

            policy = VLLMPolicy(server_addresses, tokenizer, sampling, **policy_kwargs)
        if getattr(policy, "mode", "tokens") != "tokens":
            raise ValueError(f"policy: expected a token-mode VLLMPolicy, got mode {policy.mode!r}")
        self.policy = policy
        writer = None
        if output is not None:
            from agent_gym.export import TrajectoryWriter

            writer = TrajectoryWriter(output)
        self.writer = writer
        if parser is None or isinstance(parser, str):  # a name, or the policy's model family
            parser = make_parser(parser) if isinstance(parser, str) else env_parser_for(policy, None)
        self.store = SessionStore(parser=parser, gamma=gamma, writer=writer, auto_create=auto_create,
                                  strict_tool_calls=strict_tool_calls, reward_range=reward_range)
        self.app = create_gateway_app(policy, self.store, model=model, trainer_token=trainer_token, limits=limits)
        self.trainer_token: str = self.app.state.trainer_token
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def trainer_headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer TRAINER_TOKEN"}`` for the trainer's HTTP routes."""
        return auth_headers(self.trainer_token)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running gateway."""
        if self._server is None:
            raise RuntimeError("Gateway.url: the gateway is not started; call start() first")
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Gateway:
        """Start serving in a daemon thread; returns when the port accepts connections."""
        if self._server is not None:
            return self
        import uvicorn

        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", access_log=False,
                                timeout_keep_alive=30, lifespan="on", timeout_graceful_shutdown=3)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="agent-gym-gateway", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        sockets = [s for srv in server.servers for s in srv.sockets]
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Stop serving, finish nothing, close the writer."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=10)
        if self.writer is not None:
            self.writer.close()

    def session(
        self, session_id: str | None = None, *, task: Any = None, group_id: str = "", env_id: str = "", idx: int = 0
    ) -> SessionHandle:
        """Open a session; use it as a context manager to get its trajectory at exit.

        ``task``, ``group_id``, ``env_id`` and ``idx`` label the trajectory (see :meth:`SessionStore.create`).
        """
        return SessionHandle(self, self.store.create(session_id, task=task, group_id=group_id, env_id=env_id,
                                                     idx=idx))

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
