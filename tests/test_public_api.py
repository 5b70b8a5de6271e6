"""What a Gymnasium user reaches from ``import agent_gym``, and what that costs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import agent_gym

ROOT = Path(agent_gym.__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "aiohttp", "pyarrow", "fastapi", "ray")


def _run(code: str) -> dict:
    script = f"import json, sys\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_env_api_and_submodules_are_reachable_without_heavy_imports():
    loaded = _run(
        "import agent_gym\n"
        "assert 'agent_gym.utils' not in sys.modules\n"
        "mods = [agent_gym.spaces, agent_gym.wrappers, agent_gym.errors, agent_gym.tools, agent_gym.utils]\n"
        "assert [m.__name__ for m in mods] == ['agent_gym.' + n for n in "
        "('env.spaces', 'wrappers', 'errors', 'tools', 'utils')]\n"
        "assert agent_gym.utils.check_agent_env is agent_gym.utils.env_checker.check_agent_env\n"
        "assert agent_gym.spaces.AssistantMessageSpace is agent_gym.AssistantMessageSpace\n"
        "assert issubclass(agent_gym.AgentEnv, __import__('gymnasium').Env)\n"
        "assert agent_gym.RewardConfig().correct == 1.0\n"
        "assert agent_gym.errors.EnvCheckError.__mro__[1] is agent_gym.AgentGymError\n"
    )
    assert not any(loaded.values()), loaded


def test_env_api_and_submodules_are_public_names():
    for name in ("spaces", "wrappers", "errors", "tools", "utils"):
        assert name in agent_gym.__all__ and name in dir(agent_gym)
    for name in ("AgentEnv", "RewardConfig", "TextSpace", "AssistantMessageSpace", "MessageSpace",
                 "ConversationSpace"):
        assert name in agent_gym.__all__


def test_a_policy_output_is_an_action():
    import gymnasium as gym

    env = gym.make("agent_gym/ToolUse-v0")
    assert agent_gym.PolicyOutput(text="hi") in env.action_space
    env.close()
