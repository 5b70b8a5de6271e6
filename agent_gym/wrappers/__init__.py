"""Gymnasium wrappers of agent_gym; each does one thing.

* :class:`TrajectoryWrapper`: records each episode as a token-exact
  :class:`~agent_gym.types.StepTrajectory` (``info["trajectory"]`` at the end) and
  shows the policy the memory's view of the conversation.

The wrapper's parts (:mod:`~agent_gym.wrappers.prompt_view`,
:mod:`~agent_gym.wrappers.token_assembly`) are imported from their modules.
"""

from agent_gym.wrappers.trajectory import TrajectoryWrapper

__all__ = ["TrajectoryWrapper"]
