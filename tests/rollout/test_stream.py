"""RolloutStream: groups as they finish, weight updates while episodes run, bounded staleness, clean close."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import httpx
import pytest

from agent_gym.errors import AgentGymError, ConfigError
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout.stream import RolloutStream, collect_stream

ENV_ID = "agent_gym/ToolUse-v0"
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=16, logprobs=0)


@pytest.fixture(scope="module")
def fake_server(start_server, qwen_tokenizer):
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SERVER_DEV_MODE", "1")
    try:
        yield str(start_server(fake_tokens=12, fake_token_latency_ms=10))
    finally:
        mp.undo()


def _tasks(n):
    from agent_gym.envs.tool_use.tasks import generate_tasks

    return generate_tasks(per_family=3, seed=1)[:n]


def test_groups_come_back_through_weight_updates_within_the_staleness_bound(fake_server, qwen_tokenizer):
    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    tasks = _tasks(8)
    handed = []
    with RolloutStream(ENV_ID, policy, tasks, samples_per_task=2, concurrency=6, max_staleness=1,
                       groups_per_update=2, max_steps=2) as stream:
        while (groups := stream.take(2)):
            handed += groups
            for mode in ("abort", "keep"):
                stream.update_weights("checkpoint", mode=mode, check_checkpoint=False)  # the fake backend records it
    # every task came back, as a group or among the dropped ones
    back = [g.task["id"] for g in handed] + [g.task["id"] for g in stream.dropped]
    assert sorted(back) == sorted(t["id"] for t in tasks)
    assert stream.stats.dropped == len(stream.dropped)
    for group in handed:
        assert len(group.trajectories) == 2 and group.staleness <= 1 and not group.stale
        for trajectory in group.trajectories:
            assert trajectory.weight_version_start >= 0  # the server's versions were recorded
    assert stream.version == stream.stats.updates and stream.stats.updates >= 4
    assert httpx.get(f"http://{fake_server}/weight_info").json()["weight_version"] == str(stream.version)
    assert not stream.alive


def test_close_in_the_middle_cancels_the_running_episodes(fake_server, qwen_tokenizer):
    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    before = threading.active_count()
    stream = RolloutStream(ENV_ID, policy, _tasks(20), samples_per_task=2, concurrency=8, max_steps=3)
    first = stream.get(timeout=300)
    assert first is not None and len(first.trajectories) == 2
    stream.close()
    assert not stream.alive
    assert threading.active_count() <= before + 2  # the stream's loop is gone (pool threads may idle)
    assert next(iter(collect_stream(ENV_ID, policy, _tasks(1), max_steps=1))).task["id"] == _tasks(1)[0]["id"]


def test_options_are_checked(qwen_tokenizer):
    with pytest.raises(ConfigError, match="stale"):
        RolloutStream(ENV_ID, None, [], stale="keep")
    with pytest.raises(ConfigError, match="backend='ray' is not supported"):  # a stream runs on its local runner
        RolloutStream(ENV_ID, None, [], backend="ray")


class _SlowResetFor(gym.Wrapper):
    """ToolUse-v0 whose reset is slow for some tasks: the long tail the staleness check drops."""

    def __init__(self, env: gym.Env, slow_ids: set[str], delay_s: float) -> None:
        super().__init__(env)
        self.slow_ids, self.delay_s = slow_ids, delay_s

    def reset(self, *, seed=None, options=None):
        task = (options or {}).get("task") or {}
        if task.get("id") in self.slow_ids:
            time.sleep(self.delay_s)
        return self.env.reset(seed=seed, options=options)


def test_dropped_long_tail_groups_give_their_place_back(fake_server, qwen_tokenizer):
    # max_staleness=1, one update per group taken: the window admits two groups beyond those
    # handed out, so two dropped groups that kept their places would stop the stream for ever
    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    tasks = _tasks(9)
    slow = {tasks[0]["id"], tasks[1]["id"], tasks[2]["id"]}

    def make_env():
        return _SlowResetFor(gym.make(ENV_ID, max_steps=1), slow, delay_s=4.0)

    handed = []
    with RolloutStream(make_env, policy, tasks, concurrency=4, max_staleness=1, groups_per_update=1) as stream:
        while (group := stream.get(timeout=240)) is not None:
            handed.append(group)
            stream.update_weights(None, mode="abort")
    back = sorted([g.task["id"] for g in handed] + [g.task["id"] for g in stream.dropped])
    assert back == sorted(t["id"] for t in tasks)
    assert all(g.staleness <= 1 for g in handed)
    assert stream.stats.dropped == len(stream.dropped)


def test_long_tail_episodes_park_and_resume_once_no_new_group_can_start(fake_server, qwen_tokenizer):
    from agent_gym.rollout.long_tail import LongTail

    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    tasks = _tasks(4)
    # the fake server's text never answers: every episode runs its 3 steps and goes over a
    # one-turn budget, parks, and frees its slot for the next task; once the tasks are out,
    # the parked episodes resume where they stopped
    with RolloutStream(ENV_ID, policy, tasks, concurrency=2, max_steps=3,
                       long_tail=LongTail(max_turns=1, action="park")) as stream:
        groups = list(stream)
        assert stream.parked == []
    assert sorted(g.task["id"] for g in groups) == sorted(t["id"] for t in tasks)
    assert stream.stats.parked == len(tasks)
    for group in groups:
        (trajectory,) = group.trajectories
        assert len(trajectory.steps) == 3
        assert trajectory.steps[1].info["long_tail"]["resumed"] is True
        # the resumed turns continue the same token sequence: one segment over the three steps
        (segment,) = trajectory.segments
        assert (segment.first_step, segment.last_step) == (0, 2) and sum(segment.response_masks) > 0


def test_a_server_that_cannot_be_paused_leaves_no_other_server_paused(fake_server, qwen_tokenizer):
    import socket

    with socket.socket() as sock:  # a port nobody listens on: the second server is down
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    with RolloutStream(ENV_ID, policy, _tasks(2), servers=[fake_server, dead], max_steps=1) as stream:
        with pytest.raises(AgentGymError, match="ConnectError"):
            stream.update_weights(None, mode="keep")
        assert httpx.get(f"http://{fake_server}/is_paused").json()["is_paused"] is False
        assert stream.version == 0  # nothing was applied
        groups = list(stream)  # the episodes on the live server went on
    assert len(groups) == 2


def test_a_task_handed_in_twice_gets_its_own_episode_ids(fake_server, qwen_tokenizer):
    policy = VLLMPolicy([fake_server], qwen_tokenizer, SAMPLING)
    task = _tasks(1)[0]
    groups = list(collect_stream(ENV_ID, policy, [task, task], samples_per_task=2, concurrency=4, max_steps=1))
    ids = [t.rollout_id for g in groups for t in g.trajectories]
    assert len(ids) == 4 and len(set(ids)) == 4  # no two episodes share a policy session
