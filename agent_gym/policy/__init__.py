"""Policies: turn a conversation into the next assistant turn with its exact tokens.

* :class:`Policy` - the protocol (``act``, ``aact``, ``close_session``).
* :class:`SamplingParams` - validated sampling parameters (seed API ranges).
* :class:`ChatTokenBuilder` - incremental, token-exact prompt ids per session.
* :class:`VLLMPolicy` - vLLM/OpenAI-compatible servers, token-in, sticky routing, retries.
* :class:`TransformersPolicy` - a Hugging Face causal LM in-process.
"""

from __future__ import annotations

from agent_gym.policy.base import AsyncPolicyBase, Policy
from agent_gym.policy.chat_tokens import ChatTokenBuilder, PromptPlan, as_id_list, template_supports_tools
from agent_gym.policy.routing import HashRing, SessionRouter, normalize_address
from agent_gym.policy.sampling import SAMPLING_RANGES, SamplingParams
from agent_gym.policy.transformers_policy import TransformersPolicy, sample_next
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
    "TransformersPolicy",
    "VLLMPolicy",
    "as_id_list",
    "normalize_address",
    "parse_completion_choice",
    "sample_next",
    "template_supports_tools",
]
