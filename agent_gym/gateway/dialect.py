"""What the gateway asks of an API dialect: parse a request, render a turn, encode a stream, render an error.

The gateway speaks three dialects, one module each: OpenAI chat completions
(:mod:`agent_gym.gateway.openai_chat`), OpenAI Responses (:mod:`agent_gym.gateway.responses`)
and Anthropic Messages (:mod:`agent_gym.gateway.anthropic`). Each is a :class:`Dialect`: the
app (:mod:`agent_gym.gateway.app`) registers one route per dialect under ``/v1`` and
``/sessions/{id}/v1`` and drives every request the same way:

1. :meth:`Dialect.parse_request` turns the JSON body into a :class:`TurnRequest` (the gateway's
   ``{"role", "content"}`` messages, ``calls`` on assistant messages, and the tools);
2. the session samples the turn (recorded token-exact, whatever the dialect);
3. :meth:`Dialect.render_turn` answers it as one JSON body, :meth:`Dialect.replay` as the
   server-sent events of the whole decided turn (a policy that cannot stream), or the
   :class:`StreamEncoder` of :meth:`Dialect.encoder` as events built piece by piece while the
   upstream samples;
4. :meth:`Dialect.render_error` shapes every :class:`~agent_gym.errors.RequestError`.

:func:`sse` writes one event; :func:`text_pieces` cuts a decided turn's text for replayed events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_gym.errors import RequestError

if TYPE_CHECKING:
    from agent_gym.gateway.session import TurnResult
    from agent_gym.gateway.stream import Piece

__all__ = ["Dialect", "Exchange", "StreamEncoder", "TurnRequest", "sse", "text_pieces"]


@dataclass
class TurnRequest:
    """A request in the gateway's terms.

    Attributes:
        messages: The conversation to sample from (``role``, text ``content``; assistant
            messages also ``calls`` as ``[(name, arguments), ...]``, resolved by the session).
        tools: Chat-completions function schemas (what chat templates render).
        state: What the dialect keeps for answering (e.g. the Responses conversation).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    state: Any = None


@dataclass
class Exchange:
    """One request being answered: its body, its parse, its session and the model name answered.

    Attributes:
        body: The request body (a JSON object).
        request: Its :class:`TurnRequest`.
        session_id: The session that samples it.
        model: The model name the answer reports.
    """

    body: Mapping[str, Any]
    request: TurnRequest
    session_id: str
    model: str


class StreamEncoder(Protocol):
    """The server-sent events of one streamed turn, built piece by piece as the upstream samples."""

    def start(self) -> list[bytes]:
        """The opening events, sent once the turn started."""
        ...

    def pieces(self, pieces: list[Piece]) -> list[bytes]:
        """Events of reasoning, content and tool-call pieces (see :class:`~agent_gym.gateway.stream.StreamSplitter`)."""
        ...

    def error(self, message: str) -> list[bytes]:
        """The events ending a stream that broke after it started."""
        ...

    def refuse(self, exc: RequestError) -> list[bytes]:
        """The events ending a stream whose turn is refused (a malformed call under ``strict_tool_calls``)."""
        ...

    def finish(self, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """The closing events of a decided turn; ``record`` (the ``agent_gym`` field) rides on the last one."""
        ...


class Dialect(Protocol):
    """One API format the gateway serves (see the module docstring).

    Attributes:
        api: The name recorded as the step's ``api`` (``openai``, ``anthropic``, ``responses``).
        path: The route under ``/v1`` (``chat/completions``, ``messages``, ``responses``).
        stateful: Parsing a request needs its session (Responses' ``previous_response_id``):
            the session is found first and :meth:`parse_request` gets its id.
    """

    api: str
    path: str
    stateful: bool

    def parse_request(self, body: Mapping[str, Any], session_id: str | None) -> TurnRequest:
        """The request in the gateway's terms.

        Args:
            body: The decoded JSON object.
            session_id: The request's session (None unless :attr:`stateful`).

        Raises:
            RequestError: The body is malformed (400), or names state it cannot have (404).
        """
        ...

    def render_turn(self, exchange: Exchange, result: TurnResult) -> dict[str, Any]:
        """The JSON body answering a decided turn."""
        ...

    def replay(self, exchange: Exchange, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """The server-sent events of a decided turn, for a stream the policy could not sample incrementally."""
        ...

    def encoder(self, exchange: Exchange) -> StreamEncoder:
        """The encoder of a turn streamed as it is sampled."""
        ...

    def render_error(self, exc: RequestError) -> dict[str, Any]:
        """The error body in this dialect's shape."""
        ...


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``data: [DONE]`` for the string ``"[DONE]"``)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def text_pieces(text: str, size: int = 24) -> Iterator[str]:
    """``text`` cut at whitespace into pieces of about ``size`` characters (a decided turn's deltas)."""
    pattern = r".{1,SIZE}(?:\s+|$)|\S+".replace("SIZE", str(size))
    for match in re.finditer(pattern, text, re.DOTALL):
        if match.group(0):
            yield match.group(0)
