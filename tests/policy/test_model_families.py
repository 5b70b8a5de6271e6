"""Every model family end to end: ToolUse episodes whose tool calls the model writes in its own format.

A scripted model behind the reference server's HTTP app (the vLLM ``/v1/completions``
protocol) answers in the family's format: two ``calculator`` calls, then the answer. The
policy reads the family from the chat template (templates in ``family_templates``, with the
family's role markers as special tokens on the real Qwen BPE), ``collect`` hands the env the
same parser, and every trajectory must be token-exact, in one segment, with both calls run.
"""

from __future__ import annotations

from typing import Any

import pytest
from family_server import start_script_server
from family_templates import family_tokenizer

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect

TASK = {"id": "fam-1", "question": "What is 6 * 7 + 1?", "ground_truth": "43", "answer_type": "number"}

SCRIPTS: dict[str, list[str]] = {
    "llama3_json": [
        '{"name": "calculator", "parameters": {"expression": "6 * 7"}}<|eom_id|>',
        '<|python_tag|>{"name": "calculator", "parameters": {"expression": "42 + 1"}}<|eom_id|>',
        "<answer>43</answer><|eot_id|>",
    ],
    "pythonic": [
        '[calculator(expression="6 * 7")]<|eot_id|>',
        "[calculator(expression='42 + 1')]<|eot_id|>",
        "The result is <answer>43</answer><|eot_id|>",
    ],
    "mistral": [
        '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "6 * 7"}}]</s>',
        '[TOOL_CALLS]calculator[ARGS]{"expression": "42 + 1"}</s>',
        "<answer>43</answer></s>",
    ],
    "openai": [
        "<|channel|>analysis<|message|>I need 6 * 7 first.<|end|><|start|>assistant to=functions.calculator"
        '<|channel|>commentary json<|message|>{"expression": "6 * 7"}<|call|>',
        ' to=functions.calculator<|channel|>commentary <|constrain|>json<|message|>{"expression": "42 + 1"}<|call|>',
        "<|channel|>analysis<|message|>42 + 1 = 43.<|end|><|start|>assistant<|channel|>final<|message|>"
        "<answer>43</answer><|return|>",
    ],
    "deepseek_v3": [
        "<think>Compute.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>calculator\n"
        '```json\n{"expression": "6 * 7"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>calculator<｜tool▁sep｜>"
        '{"expression": "42 + 1"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        "<answer>43</answer><｜end▁of▁sentence｜>",
    ],
    "qwen3_coder": [
        "<tool_call>\n<function=calculator>\n<parameter=expression>\n6 * 7\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>",
        "<tool_call>\n<function=calculator>\n<parameter=expression>\n42 + 1\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>",
        "<answer>43</answer><|im_end|>",
    ],
}


def check_exact(trajectory: Any, records: list[tuple[list[int], list[int], list[float]]]) -> None:
    """The single segment holds every prompt and sampled id the server saw and sampled, masked right."""
    (segment,) = trajectory.segments
    prompt = segment.prompt_tokens.tolist()
    response = segment.response_tokens.tolist()
    masks = segment.response_masks.tolist()
    full = prompt + response
    assert records[0][0] == prompt
    for server_prompt, sampled, _ in records:
        start = len(server_prompt)
        assert full[:start] == server_prompt  # each prompt extends the last one exactly
        assert full[start : start + len(sampled)] == sampled
        assert masks[start - len(prompt) : start - len(prompt) + len(sampled)] == [1] * len(sampled)
    last_prompt, last_sampled, _ = records[-1]
    assert len(full) == len(last_prompt) + len(last_sampled)
    assert sum(masks) == sum(len(r[1]) for r in records)


@pytest.fixture(scope="module")
def servers():
    started: dict[str, Any] = {}
    yield started
    for server, _ in started.values():
        server.stop()


def _server(servers: dict[str, Any], family: str) -> tuple[Any, Any]:
    if family not in servers:
        servers[family] = start_script_server(family_tokenizer(family), SCRIPTS[family])
    server, engine = servers[family]
    engine.reset(SCRIPTS[family])
    return server, engine


@pytest.mark.parametrize("family", list(SCRIPTS))
def test_family_episode_is_token_exact_in_one_segment(servers, family):
    tokenizer = family_tokenizer(family)
    server, engine = _server(servers, family)
    with VLLMPolicy([server.address], tokenizer, SamplingParams(max_tokens=256), max_model_len=8192) as policy:
        assert policy.builder.tool_parser == family and policy.builder.parsers_detected
        (trajectory,) = collect("agent_gym/ToolUse-v0", policy, tasks=[TASK], n_parallel=1)
    assert trajectory.status == "ENV_DONE", trajectory.steps[-1].info
    calls = [c for step in trajectory.steps for c in step.info.get("tool_calls", [])]
    assert [(c["name"], c["output"], c["ok"]) for c in calls] == [("calculator", "42", True),
                                                                  ("calculator", "43", True)]
    assert trajectory.trajectory_reward > 1.0  # the answer scored (plus the shaping of two useful calls)
    assert len(engine.records) == 3
    check_exact(trajectory, engine.records)
    # the tool results reached the model in the family's shape
    last_prompt = tokenizer.decode(engine.records[-1][0], skip_special_tokens=False)
    shape = {
        "llama3_json": '<|start_header_id|>ipython<|end_header_id|>\n\n"43"<|eot_id|>',
        "pythonic": "<|start_header_id|>ipython<|end_header_id|>\n\n43<|eot_id|>",
        "mistral": '[TOOL_RESULTS] {"content": "43", "call_id": "',
        "openai": '<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>"43"<|end|>'
                  "<|start|>assistant",
        "deepseek_v3": "<｜tool▁output▁begin｜>43<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
        "qwen3_coder": "<tool_response>\n43\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n",
    }[family]
    assert shape in last_prompt
    assert last_prompt.endswith(tokenizer.decode(engine.records[-1][0][-3:], skip_special_tokens=False))


def test_harmony_episode_channels_calls_and_stitch(servers):
    tokenizer = family_tokenizer("openai")
    server, engine = _server(servers, "openai")
    with VLLMPolicy([server.address], tokenizer, SamplingParams(max_tokens=256), max_model_len=8192) as policy:
        (trajectory,) = collect("agent_gym/ToolUse-v0", policy, tasks=[TASK], n_parallel=1)
        rendered = policy.builder.render_text([*trajectory.steps[-1].chat_completions,
                                               {"role": "assistant", "content": trajectory.steps[-1].model_response}],
                                              add_generation_prompt=False)
    assert trajectory.status == "ENV_DONE"
    first = trajectory.steps[0]
    assert first.thought == "I need 6 * 7 first."
    sent = [tokenizer.decode(p, skip_special_tokens=False) for p, _, _ in engine.records]
    # turn 2 follows the sampled <|call|> with harmony's tool message and a new assistant header
    assert sent[1].endswith('<|call|><|start|>functions.calculator to=assistant<|channel|>commentary<|message|>"42"'
                            "<|end|><|start|>assistant")
    # the sampled analysis stays in the prompt (the template would drop it on a re-render)
    assert "I need 6 * 7 first." in sent[2]
    # a re-render of the whole conversation with the real rules does not fail and ends as harmony does
    assert "<|channel|>final<|message|><answer>43</answer><|return|>" in rendered
    assert "<|channel|>analysis" not in rendered.split("<|start|>developer")[0]


def test_family_turn_without_channel_header_stays_one_segment(servers):
    """A harmony model that answers without a channel header still extends its segment."""
    tokenizer = family_tokenizer("openai")
    server, engine = _server(servers, "openai")
    script = [' to=functions.calculator<|channel|>commentary json<|message|>{"expression": "6 * 7"}<|call|>',
              ' to=functions.calculator<|channel|>commentary json<|message|>{"expression": "42 + 1"}<|call|>',
              "<answer>43</answer><|return|>"]
    engine.reset(script)
    with VLLMPolicy([server.address], tokenizer, SamplingParams(max_tokens=256), max_model_len=8192) as policy:
        (trajectory,) = collect("agent_gym/ToolUse-v0", policy, tasks=[TASK], n_parallel=1)
    assert trajectory.status == "ENV_DONE" and len(trajectory.segments) == 1
    check_exact(trajectory, engine.records)
