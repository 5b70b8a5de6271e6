"""Every registered id: what register_envs registers, and the env checker over each of them."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs import ENV_INFOS, register_envs
from agent_gym.utils.env_checker import check_agent_env

IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("agent_gym/"))

# Episodes of sampled actions per env. Terminal-v0 runs every episode in its own sandbox and grades
# it with the task's tests in there (about a second each on a loaded 2-core machine); 3 episodes
# still reach the step limit, and its own tests run every task.
SAMPLED_EPISODES = {"agent_gym/Terminal-v0": 3, "agent_gym/SWE-v0": 1, "agent_gym/Web-v0": 2}


def _skip_without_browser(env_id: str) -> None:
    """Web-v0 needs a Chromium binary and playwright: skipped, with the reason, where they are missing."""
    if env_id == "agent_gym/Web-v0":
        from agent_gym.envs.web.browser import browser_unavailable_reason

        reason = browser_unavailable_reason()
        if reason is not None:
            pytest.skip(f"Web-v0: {reason}")

# Checks an env is known to fail, with why. The test fails when one of them starts passing, so
# that the entry is removed with the fix.
KNOWN_FAILURES: dict[str, dict[str, str]] = {}


def test_registry_has_the_built_envs():
    assert "agent_gym/ToolUse-v0" in IDS
    assert {info.id for info in ENV_INFOS} == set(IDS)
    for info in ENV_INFOS:
        spec = gym.spec(info.id)
        assert isinstance(spec.entry_point, str) and spec.max_episode_steps is None  # the env's max_steps is the limit
        assert spec.nondeterministic == info.nondeterministic
    register_envs()  # idempotent


@pytest.mark.parametrize("env_id", IDS)
def test_env_checker_passes(env_id):
    _skip_without_browser(env_id)
    report = check_agent_env(env_id, episodes=SAMPLED_EPISODES.get(env_id, 10), raise_on_failure=False)
    known = KNOWN_FAILURES.get(env_id, {})
    failed = {r.name: r.detail for r in report.failures}
    assert set(failed) == set(known), report.format()


@pytest.mark.parametrize("env_id", IDS)
def test_render_ansi(env_id):
    _skip_without_browser(env_id)
    env = gym.make(env_id, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "[system]" in text and "[user]" in text
    env.close()
