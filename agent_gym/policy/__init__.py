"""Policies: turn a conversation into the next assistant turn with its exact tokens.

* :class:`Policy` - the protocol (``act``, ``aact``, ``close_session``).
* :class:`AsyncPolicyBase` / :class:`TokenPolicyBase` - ``act`` over ``aact``; the turn steps
  shared by the token-exact policies (tools per session, seeds, budgets, decode and commit, pickling).
* :class:`SamplingParams` - validated sampling parameters (seed API ranges).
* :class:`ChatTokenBuilder` - incremental, token-exact prompt ids per session.
* :class:`VLLMPolicy` - vLLM/OpenAI-compatible servers, token-in; its HTTP side (sticky routing,
  retries, failover, ``/v1/models``) is :class:`VLLMClient`, configured by :class:`ClientOptions`.
* :class:`VLLMChatPolicy` - the same servers through ``/v1/chat/completions`` (messages in); with
  ``api="openai"``, hosted OpenAI-compatible APIs (:mod:`~agent_gym.policy.openai_chat`).
* :class:`TransformersPolicy` - a Hugging Face causal LM in-process.
"""

from __future__ import annotations

from agent_gym.policy.base import AsyncPolicyBase, Policy, TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.client_options import ClientOptions
from agent_gym.policy.sampling import SAMPLING_RANGES, SamplingParams
from agent_gym.policy.transformers_policy import TransformersPolicy
from agent_gym.policy.vllm_base import StreamEvent
from agent_gym.policy.vllm_chat import VLLMChatPolicy
from agent_gym.policy.vllm_client import VLLMClient
from agent_gym.policy.vllm_policy import VLLMPolicy

__all__ = [
    "SAMPLING_RANGES",
    "AsyncPolicyBase",
    "ChatTokenBuilder",
    "ClientOptions",
    "Policy",
    "SamplingParams",
    "StreamEvent",
    "TokenPolicyBase",
    "TransformersPolicy",
    "VLLMChatPolicy",
    "VLLMClient",
    "VLLMPolicy",
]
