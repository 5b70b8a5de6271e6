"""Tokenization that reuses the ids of text seen before, with the tokenizer's exact result.

A Hugging Face fast tokenizer first cuts its input at *added tokens* (``<|im_start|>``,
``<|im_end|>``, ``<tool_call>``, ...) and then normalizes, pre-tokenizes and encodes each
piece between them on its own. So the ids of a chat render are the concatenation of the
ids of its pieces, and a piece that recurs (a system prompt with its tool schemas, the
same in every episode) needs to be encoded once. :class:`PieceEncoder` does that cut
itself and keeps the ids of recent pieces.

The equivalence holds only when the cut is a plain leftmost-longest match of the added
tokens' strings: no added token strips whitespace around it (``lstrip``/``rstrip``),
matches whole words only (``single_word``), or is matched after normalization, and the
tokenizer does not split special tokens. Otherwise, or when a probe encoding disagrees,
:class:`PieceEncoder` encodes every text whole (exact, without reuse).
"""

from __future__ import annotations

import re
import threading
from typing import Any

__all__ = ["PieceEncoder"]

_PROBE = (
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n  Hi there!\n\n<|im_end|>"
    "\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"add\"}\n</tool_call><|im_end|>\n"
)


def _piecewise_exact(tokenizer: Any) -> bool:
    """Whether cutting at added tokens reproduces the tokenizer's own cut (see module docs)."""
    if getattr(tokenizer, "split_special_tokens", False):
        return False
    backend = getattr(tokenizer, "backend_tokenizer", None)
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if backend is None or not isinstance(added, dict) or not added:
        return False
    normalizer = backend.normalizer
    has_normalizer = normalizer is not None and repr(normalizer) != "Sequence(normalizers=[])"
    for token in added.values():
        if getattr(token, "lstrip", False) or getattr(token, "rstrip", False) or getattr(token, "single_word", False):
            return False
        if has_normalizer and getattr(token, "normalized", False):
            return False
    return True


class PieceEncoder:
    """Encode text (``add_special_tokens=False``) reusing the ids of recurring pieces.

    Args:
        tokenizer: A Hugging Face tokenizer.
        max_entries: Most pieces kept; the oldest half is dropped when full.
        min_chars: Pieces shorter than this are encoded every time, not kept. Short
            pieces are kept by default: a call into the tokenizer costs more than its
            text length suggests (it releases and re-takes the GIL).

    Attributes:
        exact_pieces: Whether texts are cut at added tokens (False: every text is
            encoded whole).
        hits: Pieces answered from the cache.
        misses: Pieces encoded.
    """

    def __init__(self, tokenizer: Any, *, max_entries: int = 8192, min_chars: int = 1) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self.min_chars = min_chars
        self.hits = 0
        self.misses = 0
        self._cache: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._added: dict[str, int] = {}
        self._pattern: re.Pattern[str] | None = None
        self.exact_pieces = _piecewise_exact(tokenizer)
        if self.exact_pieces:
            self._added = {str(token): int(i) for i, token in tokenizer.added_tokens_decoder.items()}
            alternatives = sorted(self._added, key=len, reverse=True)  # leftmost, then longest
            self._pattern = re.compile("|".join(re.escape(a) for a in alternatives))
            probe = _PROBE + "".join(f" {a}x" for a in alternatives[:64])
            self.exact_pieces = self._encode_pieces(probe, store=False) == self._whole(probe)
        self.hits = self.misses = 0

    def _whole(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        """Return ``tokenizer.encode(text, add_special_tokens=False)``."""
        if not self.exact_pieces:
            return self._whole(text)
        return self._encode_pieces(text, store=True)

    def _encode_pieces(self, text: str, *, store: bool) -> list[int]:
        assert self._pattern is not None
        out: list[int] = []
        pos = 0
        for match in self._pattern.finditer(text):
            start = match.start()
            if start > pos:
                out += self._piece(text[pos:start], store)
            out.append(self._added[match.group()])
            pos = match.end()
        if pos < len(text):
            out += self._piece(text[pos:], store)
        return out

    def _piece(self, piece: str, store: bool) -> list[int]:
        if len(piece) < self.min_chars or not store:
            return self._whole(piece)
        ids = self._cache.get(piece)
        if ids is not None:
            self.hits += 1
            return ids
        self.misses += 1
        ids = self._whole(piece)
        with self._lock:
            if len(self._cache) >= self.max_entries:
                for old in list(self._cache)[: self.max_entries // 2]:
                    del self._cache[old]
            self._cache[piece] = ids
        return ids

    def clear(self) -> None:
        """Forget every kept piece."""
        with self._lock:
            self._cache.clear()
