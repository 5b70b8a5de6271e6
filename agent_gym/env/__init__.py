"""``AgentEnv``, the base environment of every agent_gym task, and its parts.

- :mod:`agent_gym.env.core`: :class:`~agent_gym.env.core.AgentEnv`, the step loop and its hooks.
- :mod:`agent_gym.env.tools`: the env's tools (its own and each episode's) and the tool calls of one message.
- :mod:`agent_gym.env.info`: :class:`~agent_gym.env.info.StepInfo`, every key of the ``info`` of
  ``reset`` and ``step``, declared in one place.
- :mod:`agent_gym.env.tasks`: task validation, choice and copying.
- :mod:`agent_gym.env.rewards`: :class:`~agent_gym.env.rewards.RewardConfig` and the per-episode shaping budget.
- :mod:`agent_gym.env.spaces`: the text and conversation spaces of the action and the observation
  (also ``agent_gym.spaces``).

The public names are reachable from ``agent_gym`` itself (``agent_gym.AgentEnv``, ``agent_gym.RewardConfig``,
``agent_gym.TextSpace``, ...); the concrete environments live in :mod:`agent_gym.envs`.
"""

__all__: list[str] = []
