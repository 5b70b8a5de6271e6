"""Real agent frameworks, unchanged, through the gateway against the reference server and the embedded tiny agent.

The OpenAI Agents SDK (its default Responses model and its chat-completions model, streamed
and not), LangChain's ``create_agent`` (chat completions, and the Responses API streamed) and
smolagents' tool-calling agent each solve one ToolUse-v0 task with the env's own tools (the
tiny agent calls them reliably there). Every run goes through one gateway at once; the tests
then check that each completed, that its tool calls and results made the round trip, that the
trajectory holds exactly the ids and logprobs the server returned, and its segments.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.tool_use.builtin_tools import BUILTIN_TOOLS
from agent_gym.gateway import Gateway
from agent_gym.models import default_model_path
from agent_gym.policy import VLLMPolicy

agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install 'agent-gym[frameworks]')")
langchain_agents = pytest.importorskip("langchain.agents",
                                       reason="langchain is not installed (pip install 'agent-gym[frameworks]')")
langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
smolagents = pytest.importorskip("smolagents", reason="smolagents is not installed")

FUNCTIONS = {f.__name__: f for f in BUILTIN_TOOLS}


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    try:
        return str(FUNCTIONS[name](**{k: v for k, v in arguments.items() if v is not None}))
    except Exception as exc:  # noqa: BLE001 - the model sees the error, as in the env
        return f"Error: {exc}"


class Recorder:
    """Wraps the gateway's policy and keeps, per session, every turn the server returned."""

    def __init__(self, policy: VLLMPolicy) -> None:
        self.policy = policy
        self.turns: dict[str, list[Any]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    async def aact(self, messages, *, session_id, tools=None):
        out = await self.policy.aact(messages, session_id=session_id, tools=tools)
        self.turns[session_id].append(out)
        return out

    async def astream(self, messages, *, session_id, tools=None):
        async for event in self.policy.astream(messages, session_id=session_id, tools=tools):
            if event.output is not None:
                self.turns[session_id].append(event.output)
            yield event

    def records(self, session_id: str) -> list[tuple[list[int], list[int], list[float]]]:
        """The session's turns: its own lineage's, then each other lineage's (``<session>.agent-N``)."""
        ids = [sid for sid in self.turns if sid == session_id or sid.startswith(f"{session_id}.agent-")]
        return [(list(o.prompt_token_ids), list(o.token_ids), list(o.logprobs)) for sid in ids for o in self.turns[sid]]


# --------------------------------------------------------------------------- the agents
def agents_sdk(task: dict[str, Any], session: Any, *, responses: bool, stream: bool) -> list[tuple[str, Any]]:
    from agents import (
        Agent,
        FunctionTool,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    def tool(schema: dict[str, Any]) -> Any:
        async def invoke(_: Any, arguments: str) -> str:
            return run_tool(schema["name"], json.loads(arguments))

        return FunctionTool(name=schema["name"], description=schema["description"], on_invoke_tool=invoke,
                            params_json_schema=schema["parameters"], strict_json_schema=False)

    async def main() -> Any:
        client = AsyncOpenAI(base_url=session.openai_base_url, api_key=session.api_key)
        model = OpenAIResponsesModel("m", client) if responses else OpenAIChatCompletionsModel("m", client)
        agent = Agent(name="solver", instructions=task["system"], model=model,
                      tools=[tool(t["function"]) for t in task["tools"]])
        if stream:
            result = Runner.run_streamed(agent, task["question"], max_turns=6)
            async for _ in result.stream_events():
                pass
            return result
        return await Runner.run(agent, task["question"], max_turns=6)

    result = asyncio.run(main())
    events: list[tuple[str, Any]] = []
    for item in result.new_items:
        raw = item.raw_item
        if item.type == "tool_call_item":
            events.append(("call", (raw.name, json.loads(raw.arguments))))
        elif item.type == "tool_call_output_item":
            events.append(("result", raw["output"]))
    events.append(("final", result.final_output))
    return events


def langchain(task: dict[str, Any], session: Any, *, responses: bool, stream: bool) -> list[tuple[str, Any]]:
    from langchain.agents import create_agent
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    def tool(schema: dict[str, Any]) -> Any:
        def invoke(**arguments: Any) -> str:
            return run_tool(schema["name"], arguments)

        return StructuredTool.from_function(func=invoke, name=schema["name"], description=schema["description"],
                                            args_schema=schema["parameters"])

    llm = ChatOpenAI(model="m", base_url=session.openai_base_url, api_key=session.api_key,
                     use_responses_api=responses, streaming=stream)
    agent = create_agent(llm, tools=[tool(t["function"]) for t in task["tools"]], system_prompt=task["system"])
    out = agent.invoke({"messages": [{"role": "user", "content": task["question"]}]})
    events: list[tuple[str, Any]] = []
    for message in out["messages"][1:]:
        if message.type == "ai":
            events += [("call", (c["name"], c["args"])) for c in message.tool_calls]
        elif message.type == "tool":
            events.append(("result", message.content))
    events.append(("final", out["messages"][-1].text))
    return events


def smolagents_agent(task: dict[str, Any], session: Any, *, responses: bool, stream: bool) -> list[tuple[str, Any]]:
    from smolagents import OpenAIServerModel, Tool, ToolCallingAgent

    def tool(schema: dict[str, Any]) -> Tool:
        required = schema["parameters"].get("required", [])
        inputs = {name: {"type": spec.get("type", "string"), "description": spec.get("description", name),
                         **({} if name in required else {"nullable": True})}
                  for name, spec in schema["parameters"]["properties"].items()}

        class EnvTool(Tool):
            skip_forward_signature_validation = True

            def forward(self, **arguments: Any) -> str:
                return run_tool(schema["name"], arguments)

        EnvTool.name, EnvTool.description, EnvTool.inputs = schema["name"], schema["description"], inputs
        EnvTool.output_type = "string"
        return EnvTool()

    model = OpenAIServerModel(model_id="m", api_base=session.openai_base_url, api_key=session.api_key)
    agent = ToolCallingAgent(tools=[tool(t["function"]) for t in task["tools"]], model=model, max_steps=3,
                             stream_outputs=stream, verbosity_level=0)
    agent.prompt_templates["system_prompt"] = task["system"]
    final = agent.run(task["question"])
    events: list[tuple[str, Any]] = []
    for step in agent.memory.steps:
        for call in getattr(step, "tool_calls", None) or []:
            events.append(("call", (call.name, call.arguments)))
        if getattr(step, "tool_calls", None) and step.observations is not None:
            events.append(("result", step.observations))
    events.append(("final", final))
    return events


RUNS: dict[str, tuple[Callable[..., list[tuple[str, Any]]], dict[str, bool]]] = {
    "agents-responses": (agents_sdk, {"responses": True, "stream": False}),
    "agents-responses-stream": (agents_sdk, {"responses": True, "stream": True}),
    "agents-chat": (agents_sdk, {"responses": False, "stream": False}),
    "agents-chat-stream": (agents_sdk, {"responses": False, "stream": True}),
    "langchain-chat": (langchain, {"responses": False, "stream": False}),
    "langchain-responses-stream": (langchain, {"responses": True, "stream": True}),
    "smolagents": (smolagents_agent, {"responses": False, "stream": False}),
}


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    env = gym.make("agent_gym/ToolUse-v0")
    obs, info = env.reset(seed=0)
    return {"system": obs[0]["content"], "question": obs[1]["content"], "tools": info["tools"], "task": info["task"]}


@pytest.fixture(scope="module")
def runs(start_server, task) -> dict[str, Any]:
    from transformers import AutoTokenizer

    server = start_server(model=str(default_model_path()), max_model_len=4096)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    recorder = Recorder(VLLMPolicy([str(server)], tokenizer, {"max_tokens": 128, "temperature": 0.0}))
    results: dict[str, Any] = {}
    with Gateway(policy=recorder) as gateway:
        def one(name: str) -> None:
            agent, options = RUNS[name]
            with gateway.session(task=task["task"], env_id=name) as session:
                events = agent(task, session, **options)
            results[name] = (events, session.trajectory, recorder.records(session.session_id))

        with ThreadPoolExecutor(len(RUNS)) as pool:
            for future in [pool.submit(one, name) for name in RUNS]:
                future.result()
    return results


@pytest.mark.parametrize("name", [n for n in RUNS if n != "smolagents"])
def test_framework_run_completes_token_exact_in_one_segment(runs, name, exact):
    events, trajectory, records = runs[name]
    calls = [value for kind, value in events if kind == "call"]
    results = [value for kind, value in events if kind == "result"]
    # Tool calls and results made the round trip (the tiny agent, greedy, looks the item up and multiplies).
    assert calls and calls[0][0] == "lookup_item" and len(results) == len(calls)
    assert results == [run_tool(tool, arguments) for tool, arguments in calls]
    assert [m["content"] for m in trajectory.steps[-1].chat_completions if m["role"] == "tool"] == results
    assert [c["name"] for step in trajectory.steps for c in step.info["tool_calls"]] == [n for n, _ in calls]
    assert events[-1][0] == "final" and "<answer>" in str(events[-1][1])
    # The framework re-sent its history faithfully: one segment, exactly the server's ids and logprobs.
    assert len(trajectory.steps) == len(records) >= 2
    assert len(trajectory.segments) == 1
    assert not any(step.info["history_rewritten"] for step in trajectory.steps)
    exact(trajectory, records)
    api = "responses" if "responses" in name else "openai"
    assert {step.info["api"] for step in trajectory.steps} == {api}
    assert {step.info["stream"] for step in trajectory.steps} == {name.endswith("stream")}


def test_smolagents_text_rendered_calls_stay_in_the_segment(runs, task, exact):
    events, trajectory, records = runs["smolagents"]
    calls = [value for kind, value in events if kind == "call"]
    # a call of one of the task's tools (which one the tiny agent picks from smolagents' "New task:" prompt is
    # the model's choice)
    assert calls and calls[0][0] in {"lookup_item", "calculator"}
    assert [value for kind, value in events if kind == "result"]
    # smolagents re-sends calls as "Calling tools:" text and results as user "Observation:" messages.
    resent = trajectory.steps[1].chat_completions
    assert resent[2]["role"] == "assistant" and resent[2]["content"] == trajectory.steps[0].model_response
    # (an "Error:" message when smolagents could not use the call the tiny agent wrote)
    assert resent[3]["role"] == "user" and resent[3]["content"].startswith(("Observation:", "Error:"))
    assert not any(step.info["history_rewritten"] for step in trajectory.steps)
    exact(trajectory, records)
    # Its three agent steps are one segment; its max-steps fallback, a new system prompt, is another agent's
    # lineage (its own segment, no fork of the first).
    assert len(trajectory.steps) == 4 and len(trajectory.segments) == 2
    assert trajectory.steps[3].chat_completions[0]["content"] != task["system"]
    assert [step.info["new_segment"] for step in trajectory.steps] == [False, False, False, False]
    assert [s.role for s in trajectory.segments] == ["", "agent-1"] and trajectory.steps[3].info["lineage"] == "agent-1"
