"""Tests of agent_gym.models.tiny: a loadable, deterministic tiny Qwen2 model."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent_gym.models import build_tiny_model, default_model_path


def test_tiny_model_loads_and_matches_tokenizer(tiny_model_dir, qwen_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(qwen_tokenizer) == len(tok)
    assert sorted(model.generation_config.eos_token_id) == [151643, 151645]
    assert tok.encode("Hello world!") == qwen_tokenizer.encode("Hello world!")
    assert tok.chat_template == qwen_tokenizer.chat_template
    with torch.no_grad():
        logits = model(torch.tensor([[9707, 1879]])).logits
    assert logits.shape == (1, 2, len(tok)) and torch.isfinite(logits).all()


def test_build_is_deterministic(tmp_path, qwen_tokenizer):
    a = build_tiny_model(tmp_path / "a", tokenizer=qwen_tokenizer, seed=3, hidden_size=16, num_layers=1)
    b = build_tiny_model(tmp_path / "b", tokenizer=qwen_tokenizer, seed=3, hidden_size=16, num_layers=1)
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_build_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError, match="hidden_size"):
        build_tiny_model(tmp_path, hidden_size=10)
    with pytest.raises(ValueError, match="num_layers"):
        build_tiny_model(tmp_path, num_layers=0)


def test_default_model_path_is_cached():
    path = default_model_path()
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert default_model_path() == path
