"""``agent_gym/Conversation-v0``: multi-turn user conversations with stateful tools and state-checked rewards.

* :mod:`~agent_gym.envs.conversation.env`: :class:`ConversationEnv`.
* :mod:`~agent_gym.envs.conversation.tasks`: the task format, its checks and loaders
  (JSON schema in ``task_schema.json``; Python call-string references).
* :mod:`~agent_gym.envs.conversation.expectations`: turns whose right move is to ask or to refuse
  (``expect``) and the check of their reply.
* :mod:`~agent_gym.envs.conversation.state`: stateful tool classes, their methods as tools, state diffs.
* :mod:`~agent_gym.envs.conversation.users`: :class:`SimulatedUser`, a policy playing the user.
* :mod:`~agent_gym.envs.conversation.domains`: the shipped classes (file system, shop, calendar).
* :mod:`~agent_gym.envs.conversation.generate`: the generator of the shipped tasks.
"""

from __future__ import annotations

from agent_gym.envs.conversation.domains import BUILTIN_CLASSES, Calendar, FileSystem, OrderService
from agent_gym.envs.conversation.env import ConversationEnv
from agent_gym.envs.conversation.state import state_diff
from agent_gym.envs.conversation.tasks import builtin_tasks, load_call_string_tasks, load_tasks
from agent_gym.envs.conversation.users import DEFAULT_STOP_MARKER, SimulatedUser, UserReply

__all__ = [
    "BUILTIN_CLASSES",
    "DEFAULT_STOP_MARKER",
    "Calendar",
    "ConversationEnv",
    "FileSystem",
    "OrderService",
    "SimulatedUser",
    "UserReply",
    "builtin_tasks",
    "load_call_string_tasks",
    "load_tasks",
    "state_diff",
]
