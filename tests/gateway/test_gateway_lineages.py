"""Two agents interleaved in one gateway session: two clean lineages, no false fork."""

from __future__ import annotations

import types

import httpx
import pytest

from agent_gym.gateway import Gateway


def _take_turn(url, messages, tool_result, key):
    """One agent request: append the reply (and a tool result per call) to ``messages``; the new-segment flag."""
    reply = httpx.post(url, json={"model": "m", "messages": messages}, timeout=60,
                       headers={"Authorization": f"Bearer {key}"})
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    messages.append(message)
    for call in message.get("tool_calls") or []:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_result})
    return reply.headers["x-agent-gym-new-segment"]

def test_interleaved_agents_form_two_lineages(scripted_upstream, qwen_tokenizer, exact):
    address, engine = scripted_upstream(qwen_tokenizer, max_model_len=1024)
    first = len(engine.records)
    agents = {
        "parent": [{"role": "system", "content": "You are the main agent."},
                   {"role": "user", "content": "What is 6 * 7?"}],
        "helper": [{"role": "system", "content": "You are a read-only investigator."},
                   {"role": "user", "content": "Check 6 * 7 for the main agent."}],
    }
    flags = []
    with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}) as gw:
        session = gw.session()
        url = f"{session.openai_base_url}/chat/completions"
        for _ in range(2):
            for messages in agents.values():  # the two agents take turns in the one session
                flags.append(_take_turn(url, messages, "RESULT=42", session.api_key))
        trajectory = session.current()
    assert flags == ["false"] * 4
    main, helper = trajectory.segments
    assert (main.role, helper.role) == ("", "agent-1")
    assert [s.info.get("lineage", "") for s in trajectory.steps] == ["", "agent-1", "", "agent-1"]
    records = engine.records[first:]
    # each lineage is one segment holding exactly its agent's prompts and sampled ids
    exact(types.SimpleNamespace(segments=[main]), records[0::2])
    exact(types.SimpleNamespace(segments=[helper]), records[1::2])


@pytest.mark.parametrize("task", ["What is 6 * 7?", "Check 6 * 7 for the main agent."])
def test_a_subagent_with_its_parents_system_prompt_is_its_own_lineage(scripted_upstream, qwen_tokenizer, exact,
                                                                      task):
    # the subagent has the parent's system prompt (and first user message, or another task); it starts while
    # the parent's tool call waits for its result, and its later turns do not extend the parent's history
    address, engine = scripted_upstream(qwen_tokenizer, max_model_len=1024)
    first = len(engine.records)
    opening = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "What is 6 * 7?"}]
    parent, helper = [dict(m) for m in opening], [opening[0], {"role": "user", "content": task}]
    order = [("parent", parent, "RESULT=42 from the helper"), ("helper", helper, "RESULT=42"),
             ("helper", helper, None), ("parent", parent, None)]
    flags = []
    with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}) as gw:
        session = gw.session()
        url = f"{session.openai_base_url}/chat/completions"
        for _, messages, result in order:
            flags.append(_take_turn(url, messages, result, session.api_key))
        trajectory = session.current()
    assert flags == ["false"] * 4
    assert [s.info.get("lineage", "") for s in trajectory.steps] == ["", "agent-1", "agent-1", ""]
    main, sub = trajectory.segments
    assert (main.role, sub.role) == ("", "agent-1")
    records = engine.records[first:]
    exact(types.SimpleNamespace(segments=[main]), [records[0], records[3]])
    exact(types.SimpleNamespace(segments=[sub]), [records[1], records[2]])
