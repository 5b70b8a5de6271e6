"""A tiny random-weight vision-language model the real vLLM engine serves: :func:`build_vision_model`.

Idefics3's architecture (SmolVLM's: a SigLIP-style vision encoder, pixel shuffle, a Llama text model),
with the real Qwen tokenizer plus Idefics3's image tokens, 2 + 2 layers, random weights (seed 0): the
model's answers are noise, but every part of a multimodal request runs for real (the engine's image
processor, the vision encoder, the image tokens in the prompt). Idefics3 is chosen because vLLM's
CPU build serves it without ``torchvision`` (Qwen2-VL's and LLaVA's image processors import it, and
PyPI's ``torchvision`` does not match the engine's ``torch``).

Run by the engine's interpreter (it has ``transformers`` and ``torch``, not agent_gym)::

    python tests/vision_model.py OUT_DIR TOKENIZER_DIR

``TOKENIZER_DIR`` holds the Qwen tokenizer saved by ``agent_gym.models.load_qwen_tokenizer()``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

IMAGE_SIZE = 224
PATCH_SIZE = 14
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
"""Image tokens per image (64): the vision encoder's patches after the pixel shuffle."""

IMAGE_TOKENS = ["<image>", "<fake_token_around_image>", "<global-img>",
                *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]
"""The special tokens Idefics3's processor writes around an image, added after Qwen's own."""


def build_vision_model(out: Path, tokenizer_dir: Path) -> int:
    """Write the model, its tokenizer and its processor configs to ``out``; return the ``<image>`` token id."""
    import torch
    from tokenizers import AddedToken
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": [
        AddedToken(token, special=True, normalized=False) for token in IMAGE_TOKENS]})
    tokenizer.save_pretrained(str(out))
    image_id = int(tokenizer.convert_tokens_to_ids("<image>"))
    endoftext, im_end = 151643, 151645
    torch.manual_seed(0)
    config = Idefics3Config(
        image_token_id=image_id, scale_factor=SCALE_FACTOR, tie_word_embeddings=False, pad_token_id=endoftext,
        text_config={"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32, "vocab_size": 151936,
                     "max_position_embeddings": 4096, "bos_token_id": endoftext, "eos_token_id": im_end,
                     "pad_token_id": endoftext, "tie_word_embeddings": False},
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "num_channels": 3},
    )
    model = Idefics3ForConditionalGeneration(config).to(torch.float32)
    model.generation_config.eos_token_id = im_end
    model.save_pretrained(str(out))
    (out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Idefics3ImageProcessor", "processor_class": "Idefics3Processor",
        "do_convert_rgb": True, "do_resize": True, "size": {"longest_edge": IMAGE_SIZE}, "resample": 1,
        "do_image_splitting": False, "max_image_size": {"longest_edge": IMAGE_SIZE}, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
        "do_pad": True}, indent=2))
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Idefics3Processor",
                                                           "image_seq_len": IMAGE_SEQ_LEN}))
    return image_id


if __name__ == "__main__":
    print(build_vision_model(Path(sys.argv[1]), Path(sys.argv[2])))
