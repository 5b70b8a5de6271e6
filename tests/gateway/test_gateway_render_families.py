"""An assistant message the gateway did not sample goes to the model in the session's own call format."""

from __future__ import annotations

import pytest

from agent_gym.gateway.convert import render_assistant
from agent_gym.gateway.session import GatewaySession
from agent_gym.parsers import TOOL_PARSERS, HermesToolCallParser, make_parser

CALLS = [("calculator", '{"expression": "6 * 7"}'), ("lookup", {"key": "b", "n": 2})]


@pytest.mark.parametrize("family", sorted(TOOL_PARSERS))
def test_rendered_calls_read_back_with_the_family_parser(family):
    parser = make_parser(family)
    text = render_assistant("Let me check.", CALLS, parser)
    parsed = parser.parse(text)
    assert [(c.name, dict(c.arguments)) for c in parsed.tool_calls] == [
        ("calculator", {"expression": "6 * 7"}), ("lookup", {"key": "b", "n": 2})]
    assert not parsed.errors
    if family != "hermes":  # the model never sees hermes JSON blocks in another format
        assert text != render_assistant("Let me check.", CALLS)


def test_a_session_renders_a_clients_own_assistant_message_in_its_format():
    history = [{"role": "user", "content": "What is 6 * 7?"},
               {"role": "assistant", "content": "", "calls": [CALLS[0]]},
               {"role": "tool", "content": "42"}]
    mistral = GatewaySession("s-1", parser=make_parser("mistral"))
    messages, rewritten = mistral.resolve(history)
    assert rewritten and messages[1]["content"].startswith("[TOOL_CALLS]")
    hermes = GatewaySession("s-2", parser=HermesToolCallParser())
    messages, _ = hermes.resolve(history)
    assert messages[1]["content"].startswith("<tool_call>")
