"""Exception hierarchy of agent_gym, and the kinds of error observations.

Every error class the package raises is defined here and derives from
:class:`AgentGymError`; modules that raised them before re-export them under the
same names. Programmer errors (bad arguments) raise :class:`ConfigError` (a
``ValueError``) or the built-in ``TypeError``, through the checks in
:mod:`agent_gym.checks`; the other classes signal failures of components around
an episode: a policy server that cannot be reached, a summary call that timed out,
a sandbox that is gone, a missing optional dependency, a client request a server
cannot serve.

Model output is never a reason to raise: a malformed tool call, an unknown tool or
bad arguments become an error observation whose kind is a :class:`ToolErrorKind`
(recorded by the env in ``info``; see :class:`ToolErrorKind`).
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "ERROR_KINDS",
    "AgentGymError",
    "ArgumentError",
    "CallTimeoutError",
    "ConfigError",
    "CorpusError",
    "EnvCheckError",
    "EnvServerError",
    "JudgeError",
    "MissingExtraError",
    "PolicyError",
    "PromptTooLong",
    "ReportInputError",
    "RequestError",
    "RetrieverError",
    "SandboxError",
    "SandboxUnavailableError",
    "ServerError",
    "StreamErrorEvent",
    "StreamInterrupted",
    "SummaryTimeoutError",
    "TestOutputError",
    "ToolErrorKind",
    "TrajectoryError",
    "TransportFailure",
    "TransportTimeout",
]


class ToolErrorKind(str, enum.Enum):
    """Kind of one error observation of a step (what the model got wrong, or what failed for it).

    The tool layer gives the kind with every failed call's
    :class:`~agent_gym.tools.ToolResult`; ``AgentEnv`` records it as
    ``info["tool_calls"][i]["kind"]`` and lists the kind of every error joined into
    ``info["error"]``, in the same order, as ``info["error_kinds"]``. Values are plain
    strings in ``info`` (``kind.value``), so recorded files stay JSON.
    """

    MALFORMED_CALL = "malformed_call"
    """A ``<tool_call>`` block that could not be parsed (no call record)."""
    UNKNOWN_TOOL = "unknown_tool"
    """A call to a tool the episode does not offer."""
    BAD_ARGUMENTS = "bad_arguments"
    """Arguments that failed validation against the tool's signature or schema."""
    TOOL_ERROR = "tool_error"
    """The tool raised, or returned output that cannot be shown."""
    TIMEOUT = "timeout"
    """The call ran past its time limit."""
    OUTPUT_LIMIT = "output_limit"
    """The output was over its size limit (truncated or dropped)."""
    TOO_MANY_CALLS = "too_many_calls"
    """A call past the per-message limit, not run."""
    NO_ACTION = "no_action"
    """A message with neither a tool call nor an answer (no call record)."""


ERROR_KINDS: tuple[str, ...] = tuple(kind.value for kind in ToolErrorKind)
"""The values of :class:`ToolErrorKind`, in display order."""


class AgentGymError(Exception):
    """Base class of every error raised by agent_gym itself."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is invalid (also a ``ValueError``)."""


class ArgumentError(AgentGymError, ValueError):
    """A tool call's arguments failed validation against the tool's signature.

    Raised inside the tool layer and turned into an error observation there: model
    output never makes an env raise.
    """


class TrajectoryError(AgentGymError, ValueError):
    """A trajectory record is inconsistent (bad tensor, wrong metric keys, ...)."""


class ReportInputError(AgentGymError, ValueError):
    """A file cannot be reported on (unreadable, not trajectories, a newer format); the message names it."""


class CorpusError(ConfigError):
    """A corpus or task file cannot be read: a broken line, a missing key, a duplicate id."""


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


class CallTimeoutError(AgentGymError, TimeoutError):
    """A blocking call did not return within its time limit and was abandoned.

    Raised by :func:`~agent_gym.utils.runtime.call_with_timeout`; the call runs on to its end on
    a daemon worker thread, its result dropped.
    """


class SummaryTimeoutError(CallTimeoutError):
    """A memory summary call did not return within the memory's ``summary_timeout``."""


# --------------------------------------------------------------------------- policies and their servers


class EnvServerError(AgentGymError, ConnectionError):
    """A remote environment server (OpenEnv) failed or went away; the episode ends ``ENV_ERROR``.

    Attributes:
        url: The server's address.
    """

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


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


class StreamInterrupted(ServerError):
    """A streamed answer broke after its first chunk was handed on (it is not retried)."""


class StreamErrorEvent(AgentGymError):
    """A streamed answer reported an error before its first chunk (retried like an HTTP 5xx)."""


class PromptTooLong(AgentGymError):
    """The prompt does not fit the server's context (vLLM's "maximum context length" 400)."""


class TransportTimeout(AgentGymError):
    """No complete HTTP answer arrived within the timeout (connect or read)."""


class TransportFailure(AgentGymError):
    """The connection could not be made or broke before a complete HTTP answer arrived."""


class JudgeError(AgentGymError):
    """A judge could not give a verdict: its server was down or timed out, or its answer broke the verdict schema.

    Never a score: the episode it was to grade ends ``JUDGE_ERROR`` and is masked.

    Attributes:
        kind: What failed: ``"down"`` (no answer: connection refused, HTTP 5xx after retries),
            ``"timeout"``, ``"truncated"`` (the verdict was cut at ``max_tokens``), ``"prompt_too_long"``,
            ``"unparseable"`` (no verdict object), ``"ambiguous"`` (several), ``"schema"`` (wrong keys or
            types), ``"out_of_range"`` or ``"wrong_count"`` (not one score per item).
    """

    KINDS = ("down", "timeout", "truncated", "prompt_too_long", "unparseable", "ambiguous", "schema",
             "out_of_range", "wrong_count")

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"JudgeError.kind: expected one of {self.KINDS}, got {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind


# --------------------------------------------------------------------------- env services


class RetrieverError(AgentGymError):
    """A retrieval server could not be reached or gave an unusable answer.

    Raised out of ``env.step`` (the rollout records the episode as ENV_ERROR with this
    message): a failing server is not the model's fault.

    Attributes:
        server: The server's URL.
    """

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class SandboxError(AgentGymError):
    """The sandbox cannot serve a request (it was closed, or its processes are gone)."""


class SandboxUnavailableError(SandboxError, RuntimeError):
    """The isolation tool a backend needs is missing or does not work on this machine.

    The message says what to install. No backend ever falls back to an unconfined shell.
    """


class TestOutputError(AgentGymError, ValueError):
    """A test parser found no results it can read in a test run's output (the run is not graded)."""

    __test__ = False  # not a pytest test class


# --------------------------------------------------------------------------- servers of the package


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    409: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error"}


class RequestError(AgentGymError):
    """A client request a server of the package cannot serve (answered with an HTTP error).

    The reference server and the gateway raise it; their apps turn it into the error
    body of the client's dialect.

    Args:
        message: Human-readable explanation (the body's ``message``).
        status: HTTP status code.
        kind: Error type of the body (``BadRequestError``, ``NotFoundError``, ``ConflictError``, ...).
        param: The offending request field, when known.
    """

    def __init__(self, message: str, *, status: int = 400, kind: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param

    @property
    def message(self) -> str:
        """The explanation given to the client."""
        return str(self)

    def openai_body(self) -> dict[str, Any]:
        """The error body in vLLM's (OpenAI's) format."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}}

    def anthropic_body(self) -> dict[str, Any]:
        """The error body in Anthropic's format."""
        kind = _ANTHROPIC_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": str(self)}}


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
