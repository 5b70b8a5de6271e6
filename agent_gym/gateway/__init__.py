"""OpenAI- and Anthropic-compatible gateway recording token-exact sessions.

Point any agent written against the ``openai`` (chat completions or Responses) or ``anthropic``
client at the gateway - frameworks too (the OpenAI Agents SDK, LangChain, smolagents); each
session becomes one episode whose turns are sampled token-in from vLLM (through
:class:`~agent_gym.policy.VLLMPolicy`) and recorded as a
:class:`~agent_gym.types.StepTrajectory`, exactly as ``collect`` records env episodes.

* :class:`Gateway` - run it in process; ``gateway.session()`` hands out base URL + key.
* :func:`create_gateway_app` - the FastAPI app (``agent-gym gateway`` serves it).
* :class:`SessionStore` / :class:`GatewaySession` - sessions and their recording.
"""

from __future__ import annotations

from agent_gym.gateway.app import create_gateway_app
from agent_gym.gateway.server import Gateway, SessionHandle
from agent_gym.gateway.session import GatewaySession
from agent_gym.gateway.store import SessionStore

__all__ = [
    "Gateway",
    "GatewaySession",
    "SessionHandle",
    "SessionStore",
    "create_gateway_app",
]
