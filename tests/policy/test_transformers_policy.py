"""TransformersPolicy's sampling loop: penalties kept incrementally (no pass over the prompt per id), seeds."""

from __future__ import annotations

import pytest

from agent_gym.policy import SamplingParams, TransformersPolicy

PENALTIES = [
    dict(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.3),
    dict(repetition_penalty=0.8),
    dict(frequency_penalty=-0.4),
    dict(),
]


class _CountingPrompt(list):
    """A prompt that counts how often it is concatenated or iterated."""

    passes = 0

    def __add__(self, other):
        type(self).passes += 1
        return list.__add__(self, other)

    def __iter__(self):
        type(self).passes += 1
        return list.__iter__(self)


@pytest.mark.parametrize("penalties", PENALTIES)
def test_generation_does_not_rescan_the_prompt_per_token(tiny_model_dir, penalties):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, min_tokens=24, seed=3, **penalties)
    policy = TransformersPolicy(str(tiny_model_dir), sampling=sampling)
    prompt = _CountingPrompt(list(range(100, 600)))
    _CountingPrompt.passes = 0
    ids, logprobs, _ = policy.generate_ids(prompt, 24)
    assert len(ids) == 24
    assert _CountingPrompt.passes <= 2  # O(1) passes over the prompt per turn, not one per token
    again = policy.generate_ids(list(range(100, 600)), 24)
    assert again == (ids, logprobs, "length")  # still reproducible under the seed


def test_fixed_seed_differs_across_sessions_and_replays_per_session(tiny_model_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=12, min_tokens=12, seed=5)
    policy = TransformersPolicy(str(tiny_model_dir), sampling=sampling)
    messages = [{"role": "user", "content": "What is 17*3?"}]
    outs = {}
    for session in ("sibling-0", "sibling-1"):
        outs[session] = policy.act(messages, session_id=session).token_ids
        policy.close_session(session)
    assert outs["sibling-0"] != outs["sibling-1"]
    assert policy.act(messages, session_id="sibling-0").token_ids == outs["sibling-0"]
