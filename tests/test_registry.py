from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym  # noqa: F401
from agent_gym.envs import ENV_INFOS, register_envs

IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("agent_gym/"))


def test_registry_has_the_built_envs():
    assert "agent_gym/ToolUse-v0" in IDS
    assert {info.id for info in ENV_INFOS} == set(IDS)
    for info in ENV_INFOS:
        spec = gym.spec(info.id)
        assert isinstance(spec.entry_point, str) and spec.max_episode_steps == info.max_episode_steps
    register_envs()  # idempotent


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_with_warnings_as_errors(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make(env_id)
        check_env(env.unwrapped)
        env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_reset_is_deterministic_from_seed(env_id):
    a, b = gym.make(env_id), gym.make(env_id)
    for seed in (0, 1, 123):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, info_b = b.reset(seed=seed)
        assert obs_a == obs_b and info_a == info_b
        action = a.unwrapped.oracle_action()
        assert a.step(action)[:4] == b.step(action)[:4]
    firsts = {a.reset(seed=s)[0][1]["content"] for s in range(20)}
    assert len(firsts) > 1


@pytest.mark.parametrize("env_id", IDS)
def test_env_pickles_before_and_during_an_episode(env_id):
    env = gym.make(env_id)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.reset(seed=4)[0] == env.reset(seed=4)[0]
    env.step(env.unwrapped.oracle_action())
    clone = pickle.loads(pickle.dumps(env))
    assert clone.unwrapped.messages == env.unwrapped.messages


# Episodes of random actions per env. Terminal-v0 runs every episode in its own sandbox and grades
# it with the task's tests in there (about a second each on a loaded 2-core machine); 6 episodes
# still cover submit, the step limit and malformed calls, and its own tests run every task.
SAMPLED_EPISODES = {"agent_gym/Terminal-v0": 6}


@pytest.mark.parametrize("env_id", IDS)
def test_step_with_sampled_actions_survives(env_id):
    env = gym.make(env_id)
    env.action_space.seed(0)
    for episode in range(SAMPLED_EPISODES.get(env_id, 20)):
        obs, _ = env.reset(seed=episode)
        while True:
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert obs in env.observation_space and isinstance(reward, float)
            if terminated or truncated:
                assert "status" in info
                break


@pytest.mark.parametrize("env_id", IDS)
def test_render_ansi(env_id):
    env = gym.make(env_id, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "[system]" in text and "[user]" in text
