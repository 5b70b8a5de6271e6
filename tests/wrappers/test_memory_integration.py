"""Memory end to end: a reference server as both policy and summarizer, through TrajectoryWrapper and collect.

The tiny random model almost never samples ``<|im_end|>``, and a turn cut at ``max_tokens`` ends a
ToolUse episode (TRUNCATION). So that episodes run long, a third of the ordinary ids are
``stop_token_ids``: turns stop after a few sampled ids, like a model that answers briefly. The
summary prompt is short, so that a small ``max_prompt_length`` leaves room for messages to summarize.
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import httpx
import openai
import pytest

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.memory import MemoryConfig
from agent_gym.memory.text import THINKING_OMITTED
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus, PolicyOutput
from agent_gym.wrappers import TrajectoryWrapper

ENV_ID = "agent_gym/ToolUse-v0"
SUMMARY_HEADER = "[Historical Information Summary]"
BUDGET = 250
SAMPLING = SamplingParams(temperature=1.0, max_tokens=24, logprobs=0, seed=3, stop_token_ids=list(range(0, 151643, 3)))


@dataclass
class Recorder:
    """Wraps a policy and keeps what it was given and what it returned, turn by turn."""

    policy: Any
    turns: list[tuple[list[dict[str, str]], PolicyOutput]] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)

    def act(self, messages, *, session_id, tools=None):
        out = self.policy.act(messages, session_id=session_id, tools=tools)
        self.turns.append(([dict(m) for m in messages], out))
        self.sessions.append(session_id)
        return out

    def close_session(self, session_id):
        self.policy.close_session(session_id)


def _config(server: str, **overrides: Any) -> MemoryConfig:
    options: dict[str, Any] = dict(
        use_summary=True,
        max_prompt_length=BUDGET,
        max_summary_length=12,
        before_raw_message=1,  # the system prompt (task rules) is never summarized
        end_raw_message=-1,  # the latest message stays raw
        summary_system_prompt="Summarize the conversation in at most {max_summary_length} tokens.",
        oai_client=openai.OpenAI(base_url=f"http://{server}/v1", api_key="EMPTY"),
        # the served model's name: a vLLM server (and the reference server) answers 404 to any other
        oai_model_name=httpx.get(f"http://{server}/v1/models", timeout=30).json()["data"][0]["id"],
    )
    options.update(overrides)
    return MemoryConfig(**options)


def _count(tokenizer, messages) -> int:
    """Token count of a view as the memory defines it: encoded content + 4 per message."""
    return sum(len(tokenizer.encode(m["content"], add_special_tokens=False)) + 4 for m in messages)


def _play(env, policy, *, seed: int, caplog) -> tuple[Any, list[bool]]:
    """Run one episode; return the trajectory and, per turn, whether its prompt was over budget."""
    obs, info = env.reset(seed=seed)
    session, tools = info["episode_id"], info["policy_tools"]
    seen_logs = 0
    over: list[bool] = []
    while True:
        logs = caplog.records[seen_logs:]
        seen_logs = len(caplog.records)
        too_long = _count(env.tokenizer, obs) > BUDGET if env.tokenizer is not None else False
        if too_long:  # the memory could not fit the budget: it said so
            assert any("PROMPT_TRUNCATION" in r.getMessage() for r in logs)
        over.append(too_long)
        out = policy.act(obs, session_id=session, tools=tools)
        obs, _, terminated, truncated, info = env.step(out)
        if terminated or truncated:
            policy.close_session(session)
            return info["trajectory"], over


def _check_segments(traj, outputs: list[PolicyOutput]) -> None:
    """Each segment is exact: its masked ids are the sampled ids, and every turn extends the previous."""
    assert len(outputs) == len(traj.steps)
    assert [s.first_step for s in traj.segments][0] == 0
    assert traj.segments[-1].last_step == len(traj.steps) - 1
    for k, seg in enumerate(traj.segments):
        if k:
            assert seg.first_step == traj.segments[k - 1].last_step + 1
            assert traj.steps[seg.first_step].info["new_segment"] is True
        turns = outputs[seg.first_step : seg.last_step + 1]
        assert all(not t.retokenized for t in turns)
        response = seg.response_tokens.tolist()
        masks = seg.response_masks.tolist()
        logprobs = seg.response_logprobs.tolist()
        assert seg.prompt_tokens.tolist() == turns[0].prompt_token_ids
        assert [t for t, m in zip(response, masks, strict=True) if m] == [i for t in turns for i in t.token_ids]
        assert [v for v, m in zip(logprobs, masks, strict=True) if m] == pytest.approx(
            [v for t in turns for v in t.logprobs]
        )
        assert all(v == 0.0 for v, m in zip(logprobs, masks, strict=True) if not m)
        for prev, cur in zip(turns, turns[1:], strict=False):
            head = prev.prompt_token_ids + prev.token_ids
            assert cur.prompt_token_ids[: len(head)] == head
        last = turns[-1]
        assert seg.prompt_tokens.tolist() + response == last.prompt_token_ids + last.token_ids


def _check_exports(traj, tmp_path) -> None:
    samples = to_slime_samples([traj])
    assert len(samples) == len(traj.segments)
    assert {s["rollout_id"] for s in samples} == {traj.rollout_id}
    for sample, seg in zip(samples, traj.segments, strict=True):
        assert sample["tokens"] == seg.prompt_tokens.tolist() + seg.response_tokens.tolist()
        assert sample["loss_mask"] == seg.response_masks.tolist()
        assert sample["response_length"] == len(seg.response_tokens)
    write_jsonl([traj], tmp_path / "t.jsonl")
    write_parquet([traj], tmp_path / "t.parquet")
    for back in (read_jsonl(tmp_path / "t.jsonl")[0], read_parquet(tmp_path / "t.parquet")[0]):
        assert back == traj
        assert len(back.segments) == len(traj.segments)
        assert [s.chat_completions for s in back.steps] == [s.chat_completions for s in traj.steps]


def test_summarized_episode_is_exact_per_segment(reference_server, qwen_tokenizer, caplog, tmp_path):
    config = _config(reference_server)
    env = TrajectoryWrapper(gym.make(ENV_ID, max_steps=6), memory=config, tokenizer=qwen_tokenizer)
    system = env.reset(seed=0)[0][0]
    with (
        caplog.at_level(logging.INFO, logger="agent_gym.memory"),
        VLLMPolicy([reference_server], qwen_tokenizer, sampling=SAMPLING) as policy,
    ):
        recorder = Recorder(policy)
        traj, over = _play(env, recorder, seed=0, caplog=caplog)
    env.close()
    outputs = [out for _, out in recorder.turns]

    assert traj.status == EpisodeStatus.MAX_STEPS.value and len(traj.steps) == 6
    # The conversation outgrew the budget and was summarized (the summarizer is the same server).
    assert _count(qwen_tokenizer, traj.chat_completions) > BUDGET
    assert any("triggering summarization" in r.getMessage() for r in caplog.records)
    summarized = [i for i, s in enumerate(traj.steps) if SUMMARY_HEADER in s.chat_completions[0]["content"]]
    assert summarized and not over[summarized[0]]
    # Each step records exactly what the policy was given; the system prompt always stays first.
    for step, (given, _) in zip(traj.steps, recorder.turns, strict=True):
        assert step.chat_completions == given
        assert given[0]["role"] == "system" and given[0]["content"].startswith(system["content"])
    assert SUMMARY_HEADER not in traj.chat_completions[0]["content"]  # the full conversation is unchanged
    # A rewritten view starts a segment; all segments are exact and share the rollout id.
    assert len(traj.segments) >= 2
    assert traj.segments[1].first_step == summarized[0]
    _check_segments(traj, outputs)
    assert traj.prompt_tokens.tolist() == traj.segments[0].prompt_tokens.tolist()
    _check_exports(traj, tmp_path)


def test_summary_that_cannot_fit_is_logged_and_the_episode_goes_on(reference_server, qwen_tokenizer, caplog):
    # The default summary prompt alone is longer than this budget: nothing can be summarized.
    config = _config(reference_server, summary_system_prompt=MemoryConfig().summary_system_prompt)
    env = TrajectoryWrapper(gym.make(ENV_ID, max_steps=5), memory=config, tokenizer=qwen_tokenizer)
    with (
        caplog.at_level(logging.INFO, logger="agent_gym.memory"),
        VLLMPolicy([reference_server], qwen_tokenizer, sampling=SAMPLING) as policy,
    ):
        recorder = Recorder(policy)
        traj, over = _play(env, recorder, seed=1, caplog=caplog)
    assert any(over)  # prompts went over budget (each time with a PROMPT_TRUNCATION warning, checked in _play)
    assert any("Cannot summarize" in r.getMessage() for r in caplog.records)
    assert traj.status == EpisodeStatus.MAX_STEPS.value and len(traj.steps) == 5
    assert len(traj.segments) == 1  # the view was never rewritten
    _check_segments(traj, [out for _, out in recorder.turns])


def test_collect_gives_each_episode_its_own_memory(reference_server, qwen_tokenizer, tiny_model_dir):
    config = _config(reference_server, train_model_tokenizer_path=str(tiny_model_dir))
    with VLLMPolicy([reference_server], qwen_tokenizer, sampling=SAMPLING) as policy:
        recorder = Recorder(policy)
        trajectories = collect(ENV_ID, recorder, num_episodes=2, n_parallel=2, max_steps=5, memory=config, seed=0)
    assert len({t.rollout_id for t in trajectories}) == 2
    for traj in trajectories:
        assert traj.status == EpisodeStatus.MAX_STEPS.value
        assert len(traj.segments) >= 2
        assert any(SUMMARY_HEADER in s.chat_completions[0]["content"] for s in traj.steps)
        # collect uses the rollout id as the policy session: this episode's turns, in order.
        mine = [turn for turn, sid in zip(recorder.turns, recorder.sessions, strict=True) if sid == traj.rollout_id]
        assert [s.chat_completions for s in traj.steps] == [given for given, _ in mine]
        outputs = [out for _, out in mine]
        _check_segments(traj, outputs)
    samples = to_slime_samples(trajectories)
    assert len(samples) == sum(len(t.segments) for t in trajectories)
    for traj in trajectories:
        assert sum(s["rollout_id"] == traj.rollout_id for s in samples) == len(traj.segments)


def test_memory_config_with_an_openai_client_pickles(reference_server):
    config = _config(reference_server)
    back = pickle.loads(pickle.dumps(config))
    assert isinstance(back.oai_client, openai.OpenAI) and back.oai_client is not config.oai_client
    assert str(back.oai_client.base_url) == str(config.oai_client.base_url)
    assert back.model_dump(exclude={"oai_client"}) == config.model_dump(exclude={"oai_client"})


class ThinkingPolicy:
    """A token-mode policy that thinks before each oracle action (exact ids from ChatTokenBuilder)."""

    def __init__(self, tokenizer, env) -> None:
        self.builder = ChatTokenBuilder(tokenizer)
        self.tokenizer = tokenizer
        self.env = env
        self.outputs: list[PolicyOutput] = []

    def act(self, messages, *, session_id, tools=None):
        plan = self.builder.prepare(session_id, messages, tools)
        thought = f"<think>Plan for turn {len(self.outputs)}: call the right tool.</think>"
        text = thought + self.env.unwrapped.oracle_action()
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.builder.eot_token_id]
        self.builder.commit(plan, ids, text)
        out = PolicyOutput(
            text=text,
            prompt_token_ids=plan.prompt_ids,
            token_ids=ids,
            logprobs=[-0.25] * len(ids),
            new_segment=plan.new_segment,
        )
        self.outputs.append(out)
        return out

    def close_session(self, session_id):
        self.builder.close(session_id)


def test_simplify_thinking_only(qwen_tokenizer, caplog, tmp_path):
    config = MemoryConfig(simplify_thinking=True, max_prompt_length=100_000)
    env = TrajectoryWrapper(gym.make(ENV_ID, max_steps=6), memory=config, tokenizer=qwen_tokenizer)
    policy = ThinkingPolicy(qwen_tokenizer, env)
    traj, _ = _play(env, policy, seed=2, caplog=caplog)
    assert traj.status == EpisodeStatus.ENV_DONE.value and traj.trajectory_reward > 0
    n = len(traj.steps)
    assert n >= 2
    for i, step in enumerate(traj.steps):
        thoughts = [m["content"] for m in step.chat_completions if m["role"] == "assistant"]
        assert len(thoughts) == i
        assert all(THINKING_OMITTED in t and "Plan for turn" not in t for t in thoughts)
    assert "Plan for turn 0" in traj.chat_completions[2]["content"]  # the conversation keeps the thought
    # Every view after the first rewrote an earlier thought: one exact segment per turn.
    assert [(s.first_step, s.last_step) for s in traj.segments] == [(i, i) for i in range(n)]
    _check_segments(traj, policy.outputs)
    _check_exports(traj, tmp_path)
