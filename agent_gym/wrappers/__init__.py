"""Gymnasium wrappers of agent_gym; each does one thing."""

from agent_gym.wrappers.prompt_view import FullConversation, MemoryView, PromptView
from agent_gym.wrappers.token_assembly import TokenAssembler
from agent_gym.wrappers.trajectory import TrajectoryWrapper

__all__ = ["FullConversation", "MemoryView", "PromptView", "TokenAssembler", "TrajectoryWrapper"]
