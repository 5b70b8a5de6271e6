"""A server killed (SIGKILL) during a weight-update pause or right after the resume: episodes fail over
to the other server or end with a status, nothing hangs, every task comes back."""

from __future__ import annotations

import time

import httpx
import pytest

from agent_gym.errors import AgentGymError
from agent_gym.policy import ClientOptions, SamplingParams, VLLMPolicy
from agent_gym.rollout.stream import RolloutStream

ENV_ID = "agent_gym/ToolUse-v0"
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=16, logprobs=0)
# 12 ids at 20 ms each: a pause almost always finds turns in the middle of their sampling
FAKE = {"fake_tokens": 12, "fake_token_latency_ms": 20}
OPTIONS = ClientOptions(max_retries=3, backoff=0.05, max_backoff=0.2, timeout=120, unhealthy_seconds=600)
ENDED = {"ENV_DONE", "MAX_STEPS", "TRUNCATION"}


@pytest.fixture(scope="module")
def dev_servers(start_servers):
    """Fake-mode servers in dev mode, started together: one that lives, three that the tests kill."""
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SERVER_DEV_MODE", "1")
    try:
        keep, *victims = start_servers(FAKE, FAKE, FAKE, FAKE)
    finally:
        mp.undo()
    yield keep, victims
    for server in victims:
        server.stop()


def _tasks(n):
    from agent_gym.envs.tool_use.tasks import generate_tasks

    return generate_tasks(per_family=3, seed=2)[:n]


def _continued_elsewhere(server, token: int) -> int:
    """Answers of ``server`` continuing a turn it did not abort itself (one aborted on another server).

    A fake answer is copies of ``token``: a prompt that ends with it continues an aborted turn.
    """
    records = httpx.get(f"http://{server}/debug/sample_answers", timeout=60).json()
    aborted = {(r["prompt_tokens"] + len(r["token_ids"]), tuple((r["prompt_tail"] + r["token_ids"])[-8:]))
               for r in records if r["finish_reason"] == "abort" and r["token_ids"]}
    return sum(1 for r in records if r["prompt_tail"][-1] == token
               and (r["prompt_tokens"], tuple(r["prompt_tail"][-8:])) not in aborted)


def _drain(stream, handed):
    while (group := stream.get(timeout=600)) is not None:
        handed.append(group)


@pytest.mark.parametrize("when", ["paused", "resumed"])
def test_a_server_killed_during_a_pause_or_after_the_resume_fails_over(dev_servers, qwen_tokenizer, when):
    a, victims = dev_servers
    b = victims[0 if when == "paused" else 1]
    policy = VLLMPolicy([a, b], qwen_tokenizer, SAMPLING, client_options=OPTIONS)
    tasks = _tasks(10)
    handed = []
    with RolloutStream(ENV_ID, policy, tasks, samples_per_task=2, concurrency=8, max_steps=3) as stream:
        handed.append(stream.get(timeout=600))
        if when == "paused":  # the trainer's weight loader runs while both servers are paused: b dies then
            with pytest.raises(AgentGymError, match="could not be resumed"):
                stream.update_weights(lambda: (time.sleep(0.3), b.kill()), mode="abort")
        else:
            stream.update_weights(None, mode="keep")
            b.kill()  # frozen turns resumed on b a moment ago lose their server
        stream.servers.remove(b)  # the trainer stops pausing the dead server; the updates go on
        handed += stream.take(2)
        stream.update_weights(None, mode="abort")
        _drain(stream, handed)
    assert not stream.alive
    assert sorted(g.task["id"] for g in handed) == sorted(t["id"] for t in tasks)  # every task came back
    statuses = [t.status for g in handed for t in g.trajectories]
    assert len(statuses) == 20 and set(statuses) <= ENDED  # every episode failed over to a
    if when == "paused":  # turns b aborted at the pause were continued on a, after the ids b sampled
        assert _continued_elsewhere(a, qwen_tokenizer.encode(" ok", add_special_tokens=False)[0]) > 0


def test_the_only_server_killed_while_paused_ends_the_episodes_with_a_status(dev_servers, qwen_tokenizer):
    a = dev_servers[1][2]
    options = ClientOptions(max_retries=1, backoff=0.05, max_backoff=0.1, timeout=120)
    policy = VLLMPolicy([a], qwen_tokenizer, SAMPLING, client_options=options)
    tasks = _tasks(6)
    handed = []
    with RolloutStream(ENV_ID, policy, tasks, samples_per_task=2, concurrency=6, max_steps=3) as stream:
        handed.append(stream.get(timeout=600))
        with pytest.raises(AgentGymError, match="could not be resumed"):
            stream.update_weights(a.kill, mode="abort")
        _drain(stream, handed)
    assert not stream.alive
    assert sorted(g.task["id"] for g in handed) == sorted(t["id"] for t in tasks)
    statuses = [t.status for g in handed for t in g.trajectories]
    assert len(statuses) == 12 and set(statuses) <= ENDED | {"POLICY_ERROR"}
    assert "POLICY_ERROR" in statuses  # the episodes running at the kill (and all later ones) ended with a status
