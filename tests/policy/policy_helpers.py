"""Helpers shared by the policy tests (imported, not a conftest).

A client that records the raw server responses (given to a vLLM policy), and an episode driver.
"""

from __future__ import annotations

from typing import Any

from agent_gym.policy import VLLMClient
from agent_gym.types import PolicyOutput

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


class RecordingClient(VLLMClient):
    """A VLLMClient that keeps every raw JSON response (to compare with what the policy reports)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses: list[tuple[str, dict[str, Any]]] = []

    async def post(self, session_id, path, make_body, *, server=None, **options):
        data, target = await super().post(session_id, path, make_body, server=server, **options)
        self.responses.append((target, data))
        return data, target


def recording(policy_class: type, servers: list[str], *args: Any, **kwargs: Any) -> Any:
    """A ``policy_class`` (VLLMPolicy or VLLMChatPolicy) on a :class:`RecordingClient` (``policy.client.responses``)."""
    return policy_class(RecordingClient(servers), *args, **kwargs)


def run_episode(
    policy: Any,
    session_id: str,
    turns: int,
    *,
    tools: list[dict] | None = None,
) -> list[tuple[list[dict[str, str]], PolicyOutput]]:
    """Drive ``turns`` turns of a scripted conversation; return ``[(messages sent, output), ...]``."""
    messages = [
        {"role": "system", "content": "You are a careful agent. Use the calculator."},
        {"role": "user", "content": "What is 17*3?"},
    ]
    record = []
    for k in range(turns):
        out = policy.act(list(messages), session_id=session_id, tools=tools)
        record.append((list(messages), out))
        if out.finish_reason == "prompt_truncation":
            break
        messages.append({"role": "assistant", "content": out.text})
        if k % 2 == 0:
            messages.append({"role": "tool", "content": f"result {k}: 51"})
        else:
            messages.append({"role": "user", "content": f"Follow-up question {k}?"})
    return record
