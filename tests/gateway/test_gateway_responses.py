"""``POST /v1/responses`` with the openai client, dialect errors, the streamed segment record, re-sent histories."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from agent_gym.gateway import Gateway

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                         "required": ["expression"]}}}]
SYSTEM = "You are a careful assistant."
QUESTION = "What is 6 * 7?"

RESPONSES_TOOLS = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
                    "parameters": t["function"]["parameters"], "strict": False} for t in TOOLS]


def run_tool(name: str, arguments: dict) -> str:
    assert name == "calculator"
    return f"RESULT={eval(arguments['expression'], {'__builtins__': {}})}"  # noqa: S307 - test arithmetic


def chat_agent(client: openai.OpenAI) -> None:
    """The same loop on chat completions."""
    messages: list = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for _ in range(4):
        message = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        if not message.tool_calls:
            return
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": run_tool(call.function.name, json.loads(call.function.arguments))})


def responses_agent(client: openai.OpenAI, stream: bool, chain: bool = False) -> tuple[list, list]:
    """A tool loop on the Responses API: re-sends every output item (or chains with previous_response_id)."""
    items: list = [{"role": "user", "content": QUESTION}]
    replies = []
    previous = None
    new: list = list(items)
    for _ in range(4):
        kwargs = {"model": "m", "instructions": SYSTEM, "tools": RESPONSES_TOOLS}
        kwargs["input"] = new if chain else items
        if chain and previous is not None:
            kwargs["previous_response_id"] = previous
        if stream:
            events = list(client.responses.create(stream=True, **kwargs))
            assert events[0].type == "response.created"
            reply = events[-1].response
            replies.append((reply, events[-1].model_extra))
        else:
            reply = client.responses.create(**kwargs)
            replies.append((reply, None))
        previous = reply.id
        output = [item.model_dump(exclude_none=True) for item in reply.output]
        items += output
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            return items, replies
        new = [{"type": "function_call_output", "call_id": c["call_id"],
                "output": run_tool(c["name"], json.loads(c["arguments"]))} for c in calls]
        items += new
    return items, replies


@pytest.fixture(scope="module")
def gateway(scripted_upstream, qwen_tokenizer):
    address, engine = scripted_upstream(qwen_tokenizer)
    gateway = Gateway([address], qwen_tokenizer, sampling={"max_tokens": 128}).start()
    gateway.engine = engine
    yield gateway
    gateway.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("chain", [False, True], ids=["resend", "previous_response_id"])
def test_responses_tool_loop_is_token_exact_and_one_segment(gateway, stream, chain, exact):
    gateway.engine.records.clear()
    with gateway.session() as s:
        items, replies = responses_agent(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key), stream, chain)
    trajectory = s.trajectory
    kinds = [item.get("type", "message") for item in items]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "message"]
    assert items[1]["summary"][0]["text"] == "I should compute."
    assert json.loads(items[2]["arguments"]) == {"expression": "6 * 7"}
    assert items[-1]["content"][0]["text"] == "The answer is <answer>42</answer>"
    assert [r.status for r, _ in replies] == ["completed", "completed"]
    assert replies[0][0].usage.input_tokens == len(gateway.engine.records[0][0])
    assert len(trajectory.steps) == 2 and len(trajectory.segments) == 1
    assert not any(step.info["history_rewritten"] for step in trajectory.steps)
    assert trajectory.steps[0].info["api"] == "responses"
    assert trajectory.steps[1].observation == "RESULT=42"
    exact(trajectory, gateway.engine.records)
    if stream:  # the last event says which step it recorded and that it began no segment
        assert [extra["agent_gym"]["step"] for _, extra in replies] == [0, 1]
        assert [extra["agent_gym"]["new_segment"] for _, extra in replies] == [False, False]


def test_responses_and_chat_completions_record_the_same_tokens(gateway):
    trajectories = []
    for api in ("chat", "responses"):
        with gateway.session() as s:
            client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
            chat_agent(client) if api == "chat" else responses_agent(client, False)
        trajectories.append(s.trajectory)
    a, b = trajectories
    assert a.prompt_tokens.tolist() == b.prompt_tokens.tolist()
    assert a.response_tokens.tolist() == b.response_tokens.tolist()


def test_calls_item_order_and_reasoning_items_do_not_fork(gateway):
    def second_turn(instructions: str, history) -> str:
        with gateway.session() as s:
            client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
            first = client.responses.create(model="m", input=QUESTION, instructions=SYSTEM, tools=RESPONSES_TOOLS)
            output = [item.model_dump(exclude_none=True) for item in first.output]
            call = next(item for item in output if item["type"] == "function_call")
            raw = client.responses.with_raw_response.create(
                model="m", instructions=instructions, tools=RESPONSES_TOOLS,
                input=[{"role": "user", "content": QUESTION}, *history(output, call),
                       {"type": "function_call_output", "call_id": call["call_id"], "output": "RESULT=42"}])
        return raw.headers["x-agent-gym-new-segment"]

    # The call item before the reasoning item, or the reasoning dropped: the same recorded turn.
    assert second_turn(SYSTEM, lambda output, call: [call, output[0]]) == "false"
    assert second_turn(SYSTEM, lambda output, call: [call]) == "false"
    # Another system prompt is another agent: its own lineage (own segments), not a fork of this one.
    assert second_turn("Another prompt.", lambda output, call: [call]) == "false"
    # An honest fork: the assistant turn dropped.
    assert second_turn(SYSTEM, lambda output, call: []) == "true"


def test_text_rendered_tool_calls_match_the_recorded_turn(gateway):
    """smolagents' history shape: calls as a 'Calling tools:' Python repr, results as user 'Observation:'."""
    with gateway.session() as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        call = reply.choices[0].message.tool_calls[0]
        entry = {"id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": json.loads(call.function.arguments)}}
        rendered = "Calling tools:\n" + str([entry])
        for content in (rendered, rendered.replace("'6 * 7'", "'6 * 8'")):
            raw = client.chat.completions.with_raw_response.create(model="m", tools=TOOLS, messages=[
                *messages, {"role": "assistant", "content": content},
                {"role": "user", "content": f"Observation:\n{run_tool('calculator', {'expression': '6 * 7'})}"}])
            matched = content == rendered
            assert raw.headers["x-agent-gym-new-segment"] == ("false" if matched else "true")
    steps = s.trajectory.steps
    assert [step.info["history_rewritten"] for step in steps] == [False, False, True]
    assert len(s.trajectory.segments) == 2


def test_unknown_routes_answer_in_the_dialect(gateway):
    with gateway.session() as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key)
        key = {"Authorization": f"Bearer {s.api_key}"}
        with pytest.raises(openai.NotFoundError) as info:
            client.embeddings.create(model="m", input="hi")
        assert "/v1/chat/completions" in info.value.message and "/v1/responses" in info.value.message
        body = httpx.get(f"{gateway.url}/v1/chat/completions").json()
        assert body["error"]["type"] == "MethodNotAllowedError" and "use POST" in body["error"]["message"]
        reply = httpx.post(f"{s.base_url}/v1/complete", headers={"anthropic-version": "2023-06-01", **key}, json={})
        assert reply.status_code == 404 and reply.json()["type"] == "error"
        assert reply.json()["error"]["type"] == "not_found_error"
        with pytest.raises(anthropic.NotFoundError, match="/v1/messages"):
            anthropic.Anthropic(base_url=s.base_url, api_key=s.api_key, max_retries=0).messages.count_tokens(
                model="m", messages=[{"role": "user", "content": "hi"}])
        bad = httpx.post(f"{s.openai_base_url}/responses", json={"model": "m", "input": [{"type": "web_search"}]},
                         headers=key)
        assert bad.status_code == 400 and "unsupported item type" in bad.json()["error"]["message"]
        bad = httpx.post(f"{s.openai_base_url}/responses", headers=key,
                         json={"model": "m", "input": "hi", "tools": [{"type": "web_search_preview"}]})
        assert bad.status_code == 400 and "function tools only" in bad.json()["error"]["message"]
        bad = httpx.post(f"{s.openai_base_url}/responses", headers=key, json={"model": "m", "input": "hi",
                                                                              "previous_response_id": "resp_unknown"})
        assert bad.status_code == 404 and bad.json()["error"]["param"] == "previous_response_id"


def test_strict_tool_calls_turn_a_malformed_call_into_an_error(scripted_upstream, qwen_tokenizer):
    address, engine = scripted_upstream(qwen_tokenizer)
    broken = '<tool_call>\n{"name": "calculator", "arguments": {"expression": </tool_call>'
    engine._answer = lambda prompt: qwen_tokenizer.encode(broken, add_special_tokens=False)
    for strict in (False, True):
        with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}, strict_tool_calls=strict) as gw:
            with gw.session() as s:
                client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key, max_retries=0)
                if not strict:  # the text reaches the client, which would take it as a final answer
                    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                    assert "<tool_call>" in reply.choices[0].message.content
                    continue
                with pytest.raises(openai.UnprocessableEntityError) as info:
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                assert "tool call is malformed" in info.value.message
                with pytest.raises(openai.APIError, match="tool call is malformed"):
                    list(client.responses.create(model="m", input="x", stream=True))
                with pytest.raises(openai.APIError, match="tool call is malformed"):
                    list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                        stream=True))
            assert len(s.trajectory.steps) == 3  # recorded all the same
            assert all(step.info["parse_errors"] for step in s.trajectory.steps)


def test_previous_response_ids_live_as_long_as_their_session(gateway):
    with gateway.session() as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key, max_retries=0)
        first = client.responses.create(model="m", input=QUESTION, instructions=SYSTEM, tools=RESPONSES_TOOLS)
    other = httpx.post(f"{gateway.url}/sessions", json={}, headers=gateway.trainer_headers).json()
    reply = httpx.post(f"{other['base_url']}/v1/responses", json={"model": "m", "input": "hi",
                                                                  "previous_response_id": first.id},
                       headers={"Authorization": f"Bearer {other['api_key']}"})
    assert reply.status_code == 404  # another session's response
    # The session finished: its responses were dropped (a 404, before the 409 of a finished session).
    reply = httpx.post(f"{s.openai_base_url}/responses", json={"model": "m", "input": "more",
                                                               "previous_response_id": first.id},
                       headers={"Authorization": f"Bearer {s.api_key}"})
    assert reply.status_code == 404 and reply.json()["error"]["param"] == "previous_response_id"


class NoStreaming:
    """A policy without ``astream``: the gateway answers ``stream: true`` with the decided turn's events."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def __getattr__(self, name: str):
        if name == "astream":
            raise AttributeError(name)
        return getattr(self.policy, name)


def test_responses_stream_from_a_policy_that_cannot_stream(gateway, exact):
    from agent_gym.policy import VLLMPolicy

    policy = VLLMPolicy(gateway.policy.client.server_addresses, gateway.policy.tokenizer, {"max_tokens": 128})
    gateway.engine.records.clear()
    with Gateway(policy=NoStreaming(policy)) as plain, plain.session() as s:
        items, replies = responses_agent(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key), True)
    assert items[-1]["content"][0]["text"] == "The answer is <answer>42</answer>"
    assert [extra["agent_gym"]["step"] for _, extra in replies] == [0, 1]
    assert len(s.trajectory.segments) == 1
    exact(s.trajectory, gateway.engine.records)
