"""Policies: turn a conversation into the next assistant turn with its exact tokens.

* :class:`Policy` - the protocol (``act``, ``aact``, ``close_session``).
* :class:`AsyncPolicyBase` / :class:`TokenPolicyBase` - ``act`` over ``aact``; the turn steps
  shared by the token-exact policies (tools per session, seeds, budgets, decode and commit, pickling).
* :class:`SamplingParams` - validated sampling parameters (seed API ranges).
* :class:`ChatTokenBuilder` - incremental, token-exact prompt ids per session.
* :class:`VLLMPolicy` - vLLM/OpenAI-compatible servers, token-in; its HTTP side (sticky routing,
  retries, failover, ``/v1/models``) is :class:`VLLMClient`.
* :class:`TransformersPolicy` - a Hugging Face causal LM in-process.
"""

from __future__ import annotations

from agent_gym.policy.base import AsyncPolicyBase, Policy, TokenPolicyBase
from agent_gym.policy.chat_tokens import ChatTokenBuilder, PromptPlan, as_id_list, template_supports_tools
from agent_gym.policy.routing import HashRing, SessionRouter, normalize_address
from agent_gym.policy.sampling import SAMPLING_RANGES, SamplingParams
from agent_gym.policy.transformers_policy import TransformersPolicy, sample_next
from agent_gym.policy.vllm_client import VLLMClient
from agent_gym.policy.vllm_policy import VLLMPolicy, parse_completion_choice

__all__ = [
    "SAMPLING_RANGES",
    "AsyncPolicyBase",
    "ChatTokenBuilder",
    "HashRing",
    "Policy",
    "PromptPlan",
    "SamplingParams",
    "SessionRouter",
    "TokenPolicyBase",
    "TransformersPolicy",
    "VLLMClient",
    "VLLMPolicy",
    "as_id_list",
    "normalize_address",
    "parse_completion_choice",
    "sample_next",
    "template_supports_tools",
]
