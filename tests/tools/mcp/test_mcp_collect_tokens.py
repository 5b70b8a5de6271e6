"""Token-exact episodes with MCP tools under ``collect`` against the reference server (Qwen's template)."""

from __future__ import annotations

import pytest
from mcp_helpers import notes_env, word_tasks

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.tools.mcp import MCPTools, notes_server_command

pytestmark = pytest.mark.timeout(300)


def test_token_exact_episodes_with_the_mcp_tools_in_the_family_template(reference_server, qwen_tokenizer):
    tools = MCPTools(notes_server_command(), warm=2)
    tasks = word_tasks(2)
    sampling = SamplingParams(temperature=1.0, max_tokens=8, logprobs=0, seed=3)
    policy = VLLMPolicy([reference_server], qwen_tokenizer, sampling)
    try:
        result = collect(lambda: notes_env(tools, tasks, max_steps=2), policy, tasks=tasks, n_parallel=2,
                         progress=False)
        schemas = [t.schema for t in tools]
        for trajectory in result:
            assert trajectory.status is not None and len(trajectory.steps) >= 1
            assert not trajectory.retokenized and len(trajectory.segments) == 1  # one exact token sequence
            first = [m for m in trajectory.steps[0].chat_completions if m["role"] in ("system", "user")][:2]
            prompt = qwen_tokenizer.decode(trajectory.prompt_tokens.tolist())
            assert prompt == policy.builder.render_text(first, schemas)  # the tools as Qwen's template lists them
            assert "<tools>" in prompt and '"name": "put_note"' in prompt and '"name": "note_card"' in prompt
            masks = trajectory.response_masks.tolist()
            assert len(trajectory.response_tokens) == len(masks) == len(trajectory.response_logprobs)
        assert tools.pool.stats["acquired"] >= 2 + 1  # the listing, then a server per episode
    finally:
        policy.close()
        tools.pool.close()
