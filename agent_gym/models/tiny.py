"""The embedded default model, and a tiny random-weight causal LM with the real Qwen vocabulary.

:func:`default_model_path` returns agent_gym's trained tiny tool-use agent, shipped inside the
package (``agent_gym/models/tiny_agent/``: weights, config, tokenizer and ``training.json``
with the exact training command; see :mod:`agent_gym.models.train_tiny_agent`).

:func:`build_tiny_model` builds a random-weight model for tests. It has the Qwen2
architecture (hidden size 64, 2 layers by default, tied embeddings) and exactly
``len(tokenizer)`` output logits, so every id it samples decodes. Weights come from a
seeded initialisation, so the same arguments always give the same model. It is meant for
CPU development and tests: its text is noise, but its token ids, logprobs and chat
formatting are exercised exactly like a real model's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_gym.models.tokenizers import QWEN_TOKENIZER_VERSION, cached_build, load_qwen_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "EMBEDDED_MODEL_NAME",
    "TINY_AGENT_DIR",
    "TINY_MODEL_VERSION",
    "build_tiny_model",
    "default_model_path",
    "embedded_model_dir",
    "public_model_name",
    "random_model_path",
]

#: Bump when the default model changes (architecture, init): invalidates caches.
TINY_MODEL_VERSION = "tiny-qwen2-v1"


def build_tiny_model(
    path: str | os.PathLike,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> Path:
    """Build a tiny random-weight Qwen2-architecture causal LM and save it with its tokenizer.

    The directory is loadable with ``AutoModelForCausalLM.from_pretrained(path)`` and
    ``AutoTokenizer.from_pretrained(path)`` and by ``python -m agent_gym.reference_server --model path``.

    Args:
        path: Output directory (created if needed).
        tokenizer: Tokenizer to pair with the model; defaults to :func:`load_qwen_tokenizer`.
            The vocabulary size of the model is ``len(tokenizer)``.
        seed: Seed of the weight initialisation.
        hidden_size: Hidden size (a multiple of 16: 4 attention heads of even size).
        num_layers: Number of decoder layers.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: ``hidden_size`` or ``num_layers`` is invalid.
    """
    if not isinstance(hidden_size, int) or hidden_size < 16 or hidden_size % 16:
        raise ValueError(f"expected hidden_size to be a positive multiple of 16, got {hidden_size!r}")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"expected num_layers >= 1, got {num_layers!r}")
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = tokenizer if tokenizer is not None else load_qwen_tokenizer()
    eos_ids = _eos_ids(tok)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,  # type: ignore[call-arg]  # transformers < 5 takes rope_theta only; 5.x maps it
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.pad_token_id,
        eos_token_id=eos_ids[0] if len(eos_ids) == 1 else eos_ids,
        pad_token_id=tok.pad_token_id,
        initializer_range=0.02,
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).float().eval()
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=tok.pad_token_id, bos_token_id=config.bos_token_id, do_sample=True
    )
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def _eos_ids(tok: Any) -> list[int]:
    ids: list[int] = []
    if tok.eos_token_id is not None:
        ids.append(int(tok.eos_token_id))
    pad = tok.pad_token_id
    if pad is not None and pad not in ids and tok.convert_ids_to_tokens(pad) == "<|endoftext|>":
        ids.append(int(pad))  # Qwen stops on <|endoftext|> as well as <|im_end|>
    return ids


#: Directory of the trained tiny agent shipped in the package.
TINY_AGENT_DIR = Path(__file__).resolve().parent / "tiny_agent"


def default_model_path() -> Path:
    """Return the directory of agent_gym's embedded default model: the trained tiny agent.

    A small Qwen2-architecture model (about 1.7M parameters, hidden size 192, 4 layers, its
    own 1,015-id byte-level BPE tokenizer) trained on ToolUse-v0 oracle conversations; it
    ships in the package (about 7 MB), so nothing is built or downloaded. Load it with
    ``TransformersPolicy(default_model_path())`` or serve it with ``agent-gym serve``.

    Raises:
        FileNotFoundError: If the package was installed without its model files.
    """
    if not (TINY_AGENT_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"expected the embedded model in {TINY_AGENT_DIR}, got no model.safetensors there: reinstall "
            "agent_gym with its package data, or train one with python -m agent_gym.models.train_tiny_agent"
        )
    return TINY_AGENT_DIR


#: The name servers give the embedded default model (instead of its directory, a host path).
EMBEDDED_MODEL_NAME = "agent_gym/tiny-agent"


def public_model_name(model_path: str | Path) -> str:
    """The name a server reports for ``model_path``.

    :data:`EMBEDDED_MODEL_NAME` for the embedded default (its directory inside the installed package
    is a host path a client does not need), else the path as the operator gave it (as ``vllm serve``
    reports it; ``--served-model-name`` names it otherwise).
    """
    try:
        if Path(model_path).resolve() == TINY_AGENT_DIR:
            return EMBEDDED_MODEL_NAME
    except (OSError, ValueError):
        pass
    return str(model_path)


def embedded_model_dir(name: object) -> Path | None:
    """The embedded default model's directory when a server names it :data:`EMBEDDED_MODEL_NAME`, else None."""
    if name != EMBEDDED_MODEL_NAME:
        return None
    try:
        return default_model_path()
    except FileNotFoundError:
        return None


def random_model_path() -> Path:
    """Return a cached :func:`build_tiny_model` with the Qwen tokenizer and seed 0 (random weights).

    Built on first use under :func:`agent_gym.models.tokenizers.cache_root` (safe under
    concurrent first use).
    """
    name = f"{TINY_MODEL_VERSION}-{QWEN_TOKENIZER_VERSION}-seed0"
    return cached_build(name, lambda tmp: build_tiny_model(tmp, seed=0))
