"""The stateful tool classes of the shipped conversation tasks: a file system, a shop, a calendar."""

from __future__ import annotations

from agent_gym.envs.conversation.domains.calendar import Calendar
from agent_gym.envs.conversation.domains.filesystem import FileSystem
from agent_gym.envs.conversation.domains.orders import OrderService

__all__ = ["BUILTIN_CLASSES", "Calendar", "FileSystem", "OrderService"]

BUILTIN_CLASSES: dict[str, type] = {"FileSystem": FileSystem, "OrderService": OrderService, "Calendar": Calendar}
"""Class names that tasks may use without passing ``classes`` to the env."""
