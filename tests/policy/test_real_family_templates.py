"""Families with the models' own chat templates (as the ``trl`` package ships them), not the tests' written ones.

``trl`` carries the original templates of gpt-oss (harmony), Llama 3.1 and DeepSeek-V3 (its
``chat_templates`` folder); each is put on the family's tokenizer (the real Qwen BPE with the
family's role markers as special tokens) and a ToolUse episode runs as in
``test_model_families``: the scripted model answers in the family's format, both calls run, the
answer scores, and the single segment holds exactly what the server saw and sampled.
Mistral's and Qwen3-Coder's own templates ship in no installed package (their tests use the
templates written from the documented formats).
"""

from __future__ import annotations

import pytest
from family_server import start_script_server
from family_templates import REAL_TEMPLATES, real_family_tokenizer
from test_model_families import SCRIPTS, TASK, check_exact

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect

pytest.importorskip("trl")

# What the real template writes around the second tool result.
SHAPES = {
    "openai": '<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>"43"<|end|><|start|>assistant',
    "llama3_json": '<|start_header_id|>ipython<|end_header_id|>\n\n"43"<|eot_id|>',
    "deepseek_v3": "<｜tool▁output▁begin｜>43<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
}


@pytest.mark.parametrize("family", ["openai", "llama3_json", "deepseek_v3"])
def test_real_template_episode_is_token_exact_in_one_segment(family):
    tokenizer = real_family_tokenizer(family)
    assert tokenizer.chat_template.startswith("{") and REAL_TEMPLATES[family]
    server, engine = start_script_server(tokenizer, SCRIPTS[family])
    try:
        with VLLMPolicy([server.address], tokenizer, SamplingParams(max_tokens=256), max_model_len=8192) as policy:
            assert policy.builder.tool_parser == family and policy.builder.parsers_detected
            (trajectory,) = collect("agent_gym/ToolUse-v0", policy, tasks=[TASK], n_parallel=1)
            rendered = policy.builder.render_text(
                [*trajectory.steps[-1].chat_completions,
                 {"role": "assistant", "content": trajectory.steps[-1].model_response}],
                add_generation_prompt=False)
    finally:
        server.stop()
    assert trajectory.status == "ENV_DONE", trajectory.steps[-1].info
    calls = [c for step in trajectory.steps for c in step.info.get("tool_calls", [])]
    assert [(c["name"], c["output"], c["ok"]) for c in calls] == [("calculator", "42", True),
                                                                  ("calculator", "43", True)]
    assert trajectory.trajectory_reward > 1.0 and len(engine.records) == 3
    check_exact(trajectory, engine.records)
    assert SHAPES[family] in tokenizer.decode(engine.records[-1][0], skip_special_tokens=False)
    assert "43" in rendered  # the whole conversation re-renders with the real template's rules
    if family == "deepseek_v3":  # no tools in this template: they are described in the system prompt, in its format
        first = tokenizer.decode(engine.records[0][0], skip_special_tokens=False)
        assert "To call a tool, write:" in first and "<tool_call>" not in first
    if family == "openai":
        assert trajectory.steps[0].thought == "I need 6 * 7 first."
        assert "<|channel|>final<|message|><answer>43</answer>" in rendered
