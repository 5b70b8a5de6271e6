"""VLLMPolicy's handling of server answers: /v1/models discovery, finish reasons, request budgets."""

from __future__ import annotations

import json
import time

import pytest

from agent_gym.policy import ClientOptions, SamplingParams, VLLMChatPolicy, VLLMPolicy
from agent_gym.policy.http_transport import HttpReply, HttpTransport

FAST = ClientOptions(backoff=0.01, max_backoff=0.05)
POLICIES = {"tokens": VLLMPolicy, "chat": VLLMChatPolicy}
MESSAGES = [{"role": "user", "content": "What is 17*3?"}]


def _spy_requests(monkeypatch, *, models_failures: int = 0, models_status: int = 503):
    """Record POST bodies and /v1/models lookups; the first ``models_failures`` lookups answer
    ``models_status`` (a server still loading) instead of reaching the server."""
    posts: list[dict] = []
    lookups: list[int] = []
    get, post = HttpTransport.get, HttpTransport.post_json

    async def spy_get(self, url, **kwargs):
        if url.endswith("/v1/models"):
            lookups.append(len(lookups))
            if len(lookups) <= models_failures:
                return HttpReply(models_status, json.dumps({"error": "loading"}).encode())
        return await get(self, url, **kwargs)

    async def spy_post(self, url, body, **kwargs):
        posts.append(body)
        return await post(self, url, body, **kwargs)

    monkeypatch.setattr(HttpTransport, "get", spy_get)
    monkeypatch.setattr(HttpTransport, "post_json", spy_post)
    return posts, lookups


def test_failed_models_lookup_is_retried_not_cached(reference_server, qwen_tokenizer, monkeypatch):
    posts, lookups = _spy_requests(monkeypatch, models_failures=1)
    with VLLMPolicy([reference_server], qwen_tokenizer, SamplingParams(max_tokens=4), client_options=FAST) as policy:
        policy.act(MESSAGES, session_id="a")  # /v1/models answers 503: model and context unknown
        assert "model" not in posts[-1]
        time.sleep(0.05)  # past the lookup backoff
        policy.act(MESSAGES, session_id="b")
        assert posts[-1]["model"]  # discovered on the retry
        assert policy.client._info_failures == {}
        policy.act(MESSAGES, session_id="c")
    assert len(lookups) == 2  # a successful answer is cached


def test_failed_models_lookup_backs_off(reference_server, qwen_tokenizer, monkeypatch):
    posts, lookups = _spy_requests(monkeypatch, models_failures=100, models_status=500)
    sampling = SamplingParams(max_tokens=4)
    with VLLMPolicy([reference_server], qwen_tokenizer, sampling,
                    client_options={"backoff": 30.0, "max_backoff": 60.0}) as policy:
        for k in range(4):
            policy.act(MESSAGES, session_id=f"s{k}")
    assert len(lookups) == 1  # not asked again within the backoff
    assert all("model" not in body for body in posts)


def _rewrite_finish_reason(monkeypatch, value, *, drop_ids=False):
    """Make every completion answer carry ``finish_reason=value`` (and no ids with ``drop_ids``)."""
    post = HttpTransport.post_json

    async def rewrite(self, url, body, **kwargs):
        resp = await post(self, url, body, **kwargs)
        if resp.status != 200:
            return resp
        data = resp.json()
        for choice in data["choices"]:
            choice["finish_reason"] = value
            if drop_ids:
                choice.pop("token_ids", None)
        return HttpReply(200, json.dumps(data).encode(), resp.headers)

    monkeypatch.setattr(HttpTransport, "post_json", rewrite)


@pytest.mark.parametrize("mode", ["tokens", "chat"])
@pytest.mark.parametrize(
    ("value", "expected", "message"),
    [
        ("abort", "error", "aborted"),
        ("something_new", "error", "unknown finish_reason 'something_new'"),
        ("stop", "stop", None),
        ("length", "length", None),
    ],
)
def test_finish_reason_mapping(reference_server, qwen_tokenizer, monkeypatch, mode, value, expected, message):
    if value == "abort":  # both policies continue an aborted turn (see turn_resume): here until the budget is spent
        expected, message = "length", None
    _rewrite_finish_reason(monkeypatch, value)
    with POLICIES[mode]([reference_server], qwen_tokenizer, SamplingParams(max_tokens=4)) as policy:
        out = policy.act(MESSAGES, session_id="fin")
    assert out.finish_reason == expected
    assert out.sampling == SamplingParams(max_tokens=4).record("raw_logprobs")  # error turns record it too
    if message is None:
        assert out.error is None
    else:
        assert message in out.error and reference_server in out.error


def test_aborted_turn_ends_the_episode_with_policy_error(reference_server, qwen_tokenizer, monkeypatch):
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the env ids)
    from agent_gym.types import EpisodeStatus
    from agent_gym.wrappers import TrajectoryWrapper

    _rewrite_finish_reason(monkeypatch, "abort", drop_ids=True)
    env = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0", max_steps=3))
    obs, info = env.reset(seed=0)
    # a chat policy without a tokenizer, served no ids, cannot count what an aborted answer kept: the turn fails
    with POLICIES["chat"]([reference_server], None, SamplingParams(max_tokens=4)) as policy:
        out = policy.act(obs, session_id=info["episode_id"], tools=info["policy_tools"])
    _, _, terminated, truncated, info = env.step(out)
    env.close()
    assert truncated and not terminated
    assert info["status"] == EpisodeStatus.POLICY_ERROR


@pytest.mark.parametrize("mode", ["tokens", "chat"])
def test_min_tokens_is_clamped_to_the_turn_budget(reference_server, qwen_tokenizer, monkeypatch, mode):
    posts, _ = _spy_requests(monkeypatch)
    sampling = SamplingParams(max_tokens=16, min_tokens=12, temperature=1.0, seed=1)
    with POLICIES[mode]([reference_server], qwen_tokenizer, sampling, max_response_length=5) as policy:
        out = policy.act(MESSAGES, session_id="clamp")  # budget 5 < min_tokens 12
    assert out.finish_reason in ("stop", "length") and out.error is None
    assert posts[-1]["max_tokens"] == 5 and posts[-1]["min_tokens"] == 5


def test_to_request_clamps_min_tokens():
    sampling = SamplingParams(max_tokens=16, min_tokens=12)
    assert sampling.to_request()["min_tokens"] == 12
    assert sampling.to_request(max_tokens=3)["min_tokens"] == 3


def _sample_pair(policy, first: str, second: str):
    a = policy.act(MESSAGES, session_id=first)
    policy.close_session(first)
    b = policy.act(MESSAGES, session_id=second)
    policy.close_session(second)
    return a.token_ids, b.token_ids


def test_fixed_seed_differs_across_sessions_and_replays_per_session(reference_server, qwen_tokenizer, monkeypatch):
    posts, _ = _spy_requests(monkeypatch)
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=12, min_tokens=12, seed=5)
    with VLLMPolicy([reference_server], qwen_tokenizer, sampling) as policy:
        a, b = _sample_pair(policy, "sibling-0", "sibling-1")  # same task prompt, same sampling seed
        assert a != b  # siblings must not draw identical samples (zero GRPO advantage)
        again, _ = _sample_pair(policy, "sibling-0", "x")
        assert again == a  # a session id replays its samples
    assert posts[0]["seed"] == sampling.request_seed("sibling-0", 0)
    assert posts[1]["seed"] == sampling.request_seed("sibling-1", 0)


def test_request_seed_is_stable_and_varies_by_session_and_turn():
    sampling = SamplingParams(seed=5)
    assert sampling.request_seed("s", 0) == SamplingParams(seed=5).request_seed("s", 0)
    seeds = {sampling.request_seed(s, t) for s in ("a", "b") for t in range(3)}
    assert len(seeds) == 6 and all(0 <= x < 2**31 for x in seeds)
    assert SamplingParams(seed=6).request_seed("a", 0) != sampling.request_seed("a", 0)
    assert SamplingParams().request_seed("a", 0) is None
