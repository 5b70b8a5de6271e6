"""Token counting for the memories, with a per-content cache.

A message counts ``len(tokenizer.encode(content)) + 4`` tokens (the 4 stand for
the chat template's role markers); without a tokenizer it counts
``ceil(len(content) / 4)``. Counts are cached by content, so a message is
encoded once however many times the prompt view is rebuilt.

The tokenizer may be a ``transformers`` tokenizer, a ``tokenizers.Tokenizer``,
or any object whose ``encode(text)`` returns a list of ids (or an object with
``.ids``); a path given instead is loaded lazily with ``AutoTokenizer``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.errors import ConfigError

__all__ = ["MESSAGE_OVERHEAD_TOKENS", "TokenCounter"]

#: Tokens added to every message counted with a tokenizer (template overhead).
MESSAGE_OVERHEAD_TOKENS: int = 4

#: Characters per token of the estimate used without a tokenizer.
_CHARS_PER_TOKEN: int = 4


class TokenCounter:
    """Counts tokens of message contents and cuts text to a token budget.

    Args:
        tokenizer: A tokenizer object, or None.
        tokenizer_path: Used when ``tokenizer`` is None: a path or hub id loaded
            with ``transformers.AutoTokenizer.from_pretrained`` on first use;
            empty means no tokenizer.

    Raises:
        ConfigError: On first use, if ``tokenizer_path`` cannot be loaded.
    """

    def __init__(self, tokenizer: Any = None, tokenizer_path: str = "") -> None:
        if tokenizer is not None and not callable(getattr(tokenizer, "encode", None)):
            raise TypeError(f"tokenizer must have an encode(text) method, got {type(tokenizer).__name__}")
        self._tokenizer = tokenizer
        self._path = tokenizer_path
        self._loaded = tokenizer is not None or not tokenizer_path
        self._cache: dict[str, int] = {}
        self._hf_style = False
        if tokenizer is not None:
            self._hf_style = _accepts_add_special_tokens(tokenizer)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer in use (loaded now if it was given as a path), or None."""
        self._ensure_loaded()
        return self._tokenizer

    @property
    def cache_size(self) -> int:
        """Number of distinct contents whose count is cached."""
        return len(self._cache)

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        try:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._path)
        except Exception as exc:  # noqa: BLE001 - any loading failure is a config problem
            raise ConfigError(
                f"train_model_tokenizer_path: cannot load a tokenizer from {self._path!r}: {exc}"
            ) from exc
        self._hf_style = True
        self._loaded = True

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (without special tokens where supported).

        Raises:
            RuntimeError: If there is no tokenizer.
        """
        self._ensure_loaded()
        if self._tokenizer is None:
            raise RuntimeError("no tokenizer configured")
        if self._hf_style:
            out = self._tokenizer.encode(text, add_special_tokens=False)
        else:
            out = self._tokenizer.encode(text)
        ids = getattr(out, "ids", out)
        return list(ids)

    def count_text(self, text: str) -> int:
        """Return the number of tokens of ``text`` alone (no message overhead)."""
        self._ensure_loaded()
        if self._tokenizer is None:
            return math.ceil(len(text) / _CHARS_PER_TOKEN)
        return len(self.encode(text))

    def count(self, content: str) -> int:
        """Return the cached token count of a message with this content.

        ``len(encode(content)) + 4`` with a tokenizer, ``ceil(len(content) / 4)`` without.
        """
        n = self._cache.get(content)
        if n is None:
            self._ensure_loaded()
            if self._tokenizer is None:
                n = math.ceil(len(content) / _CHARS_PER_TOKEN)
            else:
                n = len(self.encode(content)) + MESSAGE_OVERHEAD_TOKENS
            self._cache[content] = n
        return n

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        """Return the total count of ``messages`` (each by its ``content``)."""
        return sum(self.count(m["content"]) for m in messages)

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut ``text`` to at most ``max_tokens`` tokens (counted like ``count_text``)."""
        if max_tokens <= 0:
            return ""
        if self.count_text(text) <= max_tokens:
            return text
        pieces = self.split(text, max_tokens)
        return pieces[0] if pieces else ""

    def split(self, text: str, max_tokens: int) -> list[str]:
        """Cut ``text`` into consecutive pieces of at most ``max_tokens`` tokens each.

        With a tokenizer that can ``decode``, pieces are cut at token boundaries;
        otherwise at ``max_tokens * 4`` characters.

        Raises:
            TypeError: If ``max_tokens`` is not an int.
            ConfigError: If ``max_tokens`` is not positive (a ``ValueError``).
        """
        check_int("max_tokens", max_tokens, low=1)
        self._ensure_loaded()
        if not text:
            return []
        tok = self._tokenizer
        if tok is not None and callable(getattr(tok, "decode", None)):
            ids = self.encode(text)
            return [self._decode(ids[i : i + max_tokens]) for i in range(0, len(ids), max_tokens)]
        if tok is None:
            step = max_tokens * _CHARS_PER_TOKEN
        else:  # encode-only tokenizer: estimate characters per token from the whole text
            n = max(1, len(self.encode(text)))
            step = max(1, int(len(text) * max_tokens / n))
        return [text[i : i + step] for i in range(0, len(text), step)]

    def _decode(self, ids: list[int]) -> str:
        if self._hf_style:
            return self._tokenizer.decode(ids, skip_special_tokens=False)
        return self._tokenizer.decode(ids)


def _accepts_add_special_tokens(tokenizer: Any) -> bool:
    """Whether ``tokenizer.encode`` takes ``add_special_tokens`` (transformers and tokenizers do).

    Checked by class name along the MRO so that neither library has to be imported.
    """
    for klass in type(tokenizer).__mro__:
        module = klass.__module__.split(".", 1)[0]
        if module == "transformers" and klass.__name__ == "PreTrainedTokenizerBase":
            return True
        if module == "tokenizers" and klass.__name__ == "Tokenizer":
            return True
    return False
