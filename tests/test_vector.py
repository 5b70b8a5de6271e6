"""``gym.make_vec`` works for every registered agent_gym env, sync and async."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the env ids

ENV_IDS = sorted(k for k in gym.registry if k.startswith("agent_gym/"))
# Conversation-v0: a message without tool calls ends the assistant's turn, and the user speaks next;
# the episode ends only after the task's last user turn.
ANSWER_ENDS_EPISODE = {"agent_gym/Conversation-v0": False}


def test_some_env_is_registered():
    assert "agent_gym/ToolUse-v0" in ENV_IDS


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize(
    "mode, kwargs",
    [("sync", {}), ("async", {"vector_kwargs": {"shared_memory": False}})],
)
def test_make_vec(env_id, mode, kwargs):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs)
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert len(obs) == 2 and all(isinstance(o, tuple) and o for o in obs)
        assert all(m["role"] in ("system", "user") for o in obs for m in o)
        actions = ("<answer>42</answer>", "I am not sure.")
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert len(rewards) == 2
        if ANSWER_ENDS_EPISODE.get(env_id, True):
            assert bool(terminated[0])  # an answer ends the episode
            assert not bool(terminated[1])
        else:
            assert all(o[-1]["role"] == "user" or done for o, done in zip(obs, terminated, strict=True))
    finally:
        envs.close()
