"""The openai and anthropic clients, unchanged, against the gateway: tool loops, streaming, exact tokens."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from agent_gym.export import read_jsonl
from agent_gym.gateway import Gateway
from agent_gym.types import EpisodeStatus, StepTrajectory

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                         "required": ["expression"]}}}]
SYSTEM = "You are a careful assistant."
QUESTION = "What is 6 * 7?"


def run_tool(name: str, arguments: dict) -> str:
    assert name == "calculator"
    return f"RESULT={eval(arguments['expression'], {'__builtins__': {}})}"  # noqa: S307 - test arithmetic


def openai_agent(client: openai.OpenAI, stream: bool) -> list[dict]:
    """A plain tool loop written against the openai client (no agent_gym code)."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for _ in range(4):
        if stream:
            content, calls = "", {}
            for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True):
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                content += delta.content or ""
                for call in delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
                    entry["id"] = call.id or entry["id"]
                    if call.function is not None:
                        entry["function"]["name"] += call.function.name or ""
                        entry["function"]["arguments"] += call.function.arguments or ""
            message = {"role": "assistant", "content": content or None}
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
        else:
            reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            message = reply.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
        messages.append(message)
        if not message.get("tool_calls"):
            return messages
        for call in message["tool_calls"]:
            result = run_tool(call["function"]["name"], json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages


def anthropic_agent(client: anthropic.Anthropic, stream: bool) -> list[dict]:
    """The same loop against the anthropic client."""
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    for _ in range(4):
        kwargs = {"model": "m", "max_tokens": 256, "system": SYSTEM, "messages": messages, "tools": tools}
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        blocks = [b.model_dump(include={"type", "text", "id", "name", "input"}) for b in reply.content]
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            assert reply.stop_reason == "end_turn"
            return messages
        assert reply.stop_reason == "tool_use"
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input)} for b in uses]})
    return messages


@pytest.fixture(scope="module", params=["qwen", "deepseek"])
def setup(request, scripted_upstream, qwen_tokenizer, deepseek_tokenizer, tmp_path_factory):
    tokenizer = qwen_tokenizer if request.param == "qwen" else deepseek_tokenizer
    address, engine = scripted_upstream(tokenizer)
    out = tmp_path_factory.mktemp("gw") / "sessions.jsonl"
    gateway = Gateway([address], tokenizer, sampling={"max_tokens": 128}, output=out).start()
    yield gateway, engine, tokenizer, out
    gateway.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_tool_loop_is_token_exact(setup, stream, exact):
    gateway, engine, tokenizer, _ = setup
    engine.records.clear()
    with gateway.session(task={"id": "six-times-seven"}) as s:
        messages = openai_agent(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key), stream)
        fetched = httpx.get(f"{gateway.url}/sessions/{s.session_id}/trajectory", headers=gateway.trainer_headers).json()
        s.reward(1.0)
    trajectory = s.trajectory
    # The client saw a parsed tool call, then the final answer; the thought went to reasoning_content.
    assert messages[2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"expression": "6 * 7"}
    assert messages[3]["content"] == "RESULT=42"
    assert messages[4]["content"] == "The answer is <answer>42</answer>"
    # Recorded ids are the server's, including the non-canonical one-id-per-character answer.
    assert len(engine.records) == 2 and len(trajectory.steps) == 2 and len(trajectory.segments) == 1
    exact(trajectory, engine.records)
    assert tokenizer.encode(messages[4]["content"], add_special_tokens=False) != engine.records[1][1][:-1]
    assert trajectory.steps[0].thought == "I should compute."
    assert trajectory.steps[0].info["tool_calls"][0]["arguments"] == {"expression": "6 * 7"}
    assert trajectory.steps[1].observation == "RESULT=42"
    assert not any(step.info["history_rewritten"] for step in trajectory.steps)
    assert trajectory.trajectory_reward == 1.0 and trajectory.status == EpisodeStatus.ENV_DONE
    assert [st.mc_return for st in trajectory.steps] == [1.0, 1.0]
    # The policy's sampling record (logprobs mode and parameters), as env episodes record it.
    assert trajectory.sampling == gateway.policy.sampling.record("raw_logprobs")
    assert fetched["_kind"] == "StepTrajectory" and fetched["status"] == ""
    assert fetched["response_tokens"] == trajectory.response_tokens.tolist()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_anthropic_tool_loop_is_token_exact(setup, stream, exact):
    gateway, engine, _, _ = setup
    engine.records.clear()
    with gateway.session() as s:
        messages = anthropic_agent(anthropic.Anthropic(base_url=s.base_url, api_key=s.api_key), stream)
    trajectory = s.trajectory
    assert messages[1]["content"][-1]["type"] == "tool_use"
    assert messages[1]["content"][-1]["input"] == {"expression": "6 * 7"}
    assert messages[-1]["content"][0]["text"] == "The answer is <answer>42</answer>"
    assert len(trajectory.steps) == 2 and len(trajectory.segments) == 1
    exact(trajectory, engine.records)


def test_openai_and_anthropic_record_the_same_tokens(setup):
    gateway, engine, _, _ = setup
    trajectories = []
    for agent in ("openai", "anthropic"):
        with gateway.session() as s:
            if agent == "openai":
                openai_agent(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key), False)
            else:
                anthropic_agent(anthropic.Anthropic(base_url=s.base_url, api_key=s.api_key), True)
        trajectories.append(s.trajectory)
    a, b = trajectories
    assert a.prompt_tokens.tolist() == b.prompt_tokens.tolist()
    assert a.response_tokens.tolist() == b.response_tokens.tolist()
    assert a.response_masks.tolist() == b.response_masks.tolist()


def test_finished_sessions_stream_to_the_writer(setup):
    gateway, _, _, out = setup
    with gateway.session(task={"id": "w"}) as s:
        openai_agent(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key), False)
    gateway.writer.flush()
    written = {t.rollout_id: t for t in read_jsonl(out)}
    assert written[s.session_id] == s.trajectory
    assert isinstance(written[s.session_id], StepTrajectory)


def test_session_from_header_and_api_key(setup):
    gateway, _, _, _ = setup
    trainer = gateway.trainer_headers
    first = httpx.post(f"{gateway.url}/sessions", json={"session_id": "by-key"}, headers=trainer).json()
    assert first["api_key"].startswith("sk-agw-") and first["base_url"].endswith("/sessions/by-key")
    header = httpx.post(f"{gateway.url}/sessions", json={"session_id": "by-header"}, headers=trainer).json()
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=first["api_key"])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=header["api_key"],
                           default_headers={"x-session-id": "by-header"})
    reply = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.headers["x-agent-gym-session"] == "by-header"
    listed = {s["session_id"]: s for s in httpx.get(f"{gateway.url}/sessions", headers=trainer).json()["sessions"]}
    assert listed["by-key"]["steps"] == 1 and listed["by-header"]["steps"] == 1
    models = client.models.list()
    assert models.data[0].id == "scripted"
