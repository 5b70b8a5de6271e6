"""Configuration of the conversation memories (``MemoryConfig``).

``MemoryConfig`` carries the fields, defaults and ranges of the reference memory
API: thinking elision, automatic summarization, the prompt budget in tokens, the
raw windows at the start and end of the conversation that are never rewritten,
and the chat endpoint that writes summaries. Assignments are validated too, and
a rejected assignment leaves the config unchanged.

Example:
    >>> cfg = MemoryConfig(use_summary=True, max_prompt_length=4096, max_summary_length=512)
    >>> cfg.before_raw_message = 1  # validated on assignment
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["DEFAULT_SUMMARY_SYSTEM_PROMPT", "MAX_PROMPT_LENGTH_LIMIT", "MemoryConfig"]

#: Upper bound of ``max_prompt_length`` (128K tokens).
MAX_PROMPT_LENGTH_LIMIT: int = 128 * 1024

#: The system prompt sent to the summarizer; ``{max_summary_length}`` is filled in.
DEFAULT_SUMMARY_SYSTEM_PROMPT: str = (
    "Please act as a summarization assistant to provide a precise and comprehensive summary of the "
    "specified content. The summary should meet the following requirements:\n"
    "1. **Core Objective**: Extract the core information of the content, retain all key details (such as "
    "important data, viewpoints, time, characters, conclusions, etc.), and remove redundant information "
    "to ensure the summary is both concise and complete.\n"
    "2. **Structural Requirements**:\n"
    "- Begin with 1-2 sentences summarizing the content theme or core conclusion;\n"
    "- List key information (such as main viewpoints, important events, data indicators, etc.) in bullet "
    "points, each containing specific details (avoid general statements);\n"
    "- Conclude with the impact of the content, follow-up recommendations, or unresolved issues (if "
    "applicable).\n"
    "3. **Detail Specifications**:\n"
    "- Retain key terms, numerical values, and proper nouns (such as names of people, places, "
    "institutions) from the original text without alteration or abbreviation;\n"
    "- If the content involves a timeline, organize key events in chronological order;\n"
    "- If the content includes multiple viewpoints, clearly distinguish the positions of different entities;\n"
    "- Avoid adding personal interpretations to maintain the objectivity of the summary.\n"
    "4. **Length Recommendation**: The summary should not exceed {max_summary_length} tokens.\n"
    "Please summarize the following dialogue content based on the above requirements."
)

_UNSET = object()


@dataclass(frozen=True)
class _OpenAIClientSpec:
    """What rebuilds an ``openai.OpenAI`` client after pickling (the client itself holds locks)."""

    base_url: str
    api_key: str | None
    organization: str | None = None
    project: str | None = None
    timeout: Any = None
    max_retries: int = 2
    default_headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, client: Any) -> _OpenAIClientSpec | None:
        """Return the spec of an ``openai.OpenAI`` client, None for any other object."""
        openai = sys.modules.get("openai")
        if openai is None or type(client) is not getattr(openai, "OpenAI", None):
            return None
        api_key = client.api_key if isinstance(client.api_key, str) else None
        return cls(
            base_url=str(client.base_url),
            api_key=api_key,
            organization=client.organization,
            project=client.project,
            timeout=client.timeout,
            max_retries=client.max_retries,
            default_headers=dict(getattr(client, "_custom_headers", None) or {}),
        )

    def build(self) -> Any:
        """Create a new ``openai.OpenAI`` client with these settings."""
        import openai

        return openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            organization=self.organization,
            project=self.project,
            timeout=self.timeout,
            max_retries=self.max_retries,
            default_headers=self.default_headers or None,
        )


class MemoryConfig(BaseModel):
    """Settings of ``MemorySimple`` and ``MemorySummary``.

    Attributes:
        simplify_thinking: Replace ``<think>...</think>`` in assistant messages
            outside the raw windows with ``<think>Thinking process omitted.</think>``.
        use_summary: Summarize the conversation when it exceeds ``max_prompt_length``.
        max_summary_length: Maximum length of one summary, in tokens; in
            ``[1, max_prompt_length)``.
        max_prompt_length: Budget of the prompt view, in tokens; in ``[1, 131072]``.
        before_raw_message: Number of messages at the start kept unchanged (>= 0).
        end_raw_message: Minus the number of messages at the end kept unchanged (<= 0).
        summary_system_prompt: System prompt of the summary call; the text
            ``{max_summary_length}`` is replaced by ``max_summary_length``.
        oai_client: An OpenAI-compatible client (``openai.OpenAI`` or anything
            with ``chat.completions.create``) that writes summaries, or None.
        oai_model_name: Model name sent to the summary endpoint.
        train_model_tokenizer_path: Path or hub id of the tokenizer used to count
            tokens, loaded lazily with ``transformers.AutoTokenizer``; empty
            means no tokenizer (a message counts ``ceil(chars / 4)`` tokens).

    Note:
        Where a summary ends and how the prompt view keeps the role order that strict
        chat templates (Gemma 3, Mistral) require are set per memory, not here:
        ``MemorySummary(summary_cut=...)`` (``"auto"`` by default: the reference cut,
        unless the memory's tokenizer's chat template refuses the view it gives; then
        the cut and the view keep the conversation's user/assistant order). See
        :mod:`agent_gym.memory.summary`.

    Raises:
        pydantic.ValidationError: On a wrong type, an out-of-range value, an
            unknown field, or a violated cross-field rule; the error names the field.
    """

    model_config = ConfigDict(validate_assignment=True, arbitrary_types_allowed=True, extra="forbid")

    simplify_thinking: bool = Field(default=False, strict=True)
    use_summary: bool = Field(default=False, strict=True)
    max_summary_length: int = Field(default=1024, strict=True, ge=1, le=MAX_PROMPT_LENGTH_LIMIT)
    max_prompt_length: int = Field(default=8192, strict=True, ge=1, le=MAX_PROMPT_LENGTH_LIMIT)
    before_raw_message: int = Field(default=0, strict=True, ge=0)
    end_raw_message: int = Field(default=0, strict=True, le=0)
    summary_system_prompt: str = Field(default=DEFAULT_SUMMARY_SYSTEM_PROMPT, strict=True, min_length=1)
    oai_client: Any = None
    oai_model_name: str = Field(default="qwen2.5-7b-instruct", strict=True, min_length=1)
    train_model_tokenizer_path: str = Field(default="", strict=True)

    @field_validator("train_model_tokenizer_path", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        """Accept ``os.PathLike`` paths as well as strings."""
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        return value

    @field_validator("oai_client")
    @classmethod
    def _check_client(cls, value: Any) -> Any:
        """Require None or an object exposing ``chat.completions.create``."""
        if value is None:
            return value
        create = getattr(getattr(getattr(value, "chat", None), "completions", None), "create", None)
        if not callable(create):
            raise ValueError(
                "oai_client must be None or an OpenAI-compatible client with chat.completions.create, "
                f"got {type(value).__name__}"
            )
        return value

    @model_validator(mode="after")
    def _check_cross_field(self) -> MemoryConfig:
        """Enforce ``max_summary_length < max_prompt_length``."""
        if self.max_summary_length >= self.max_prompt_length:
            raise ValueError(
                f"max_summary_length ({self.max_summary_length}) must be less than "
                f"max_prompt_length ({self.max_prompt_length})"
            )
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        """Validate an assignment; on failure restore the previous value and re-raise."""
        if name not in type(self).model_fields:
            super().__setattr__(name, value)
            return
        previous = self.__dict__.get(name, _UNSET)
        try:
            super().__setattr__(name, value)
        except ValidationError:
            if previous is not _UNSET:
                self.__dict__[name] = previous
            raise

    def __getstate__(self) -> dict[Any, Any]:
        """Pickle support: an ``openai.OpenAI`` client travels as its settings.

        The client holds locks and cannot be pickled; it is rebuilt, with the same
        base URL, key, timeout and retries, when the config is unpickled (e.g. in
        a Ray worker). Other clients are pickled as they are.
        """
        state = super().__getstate__()
        spec = _OpenAIClientSpec.of(self.__dict__.get("oai_client"))
        if spec is not None:
            state = {**state, "__dict__": {**state["__dict__"], "oai_client": spec}}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        """Restore a pickled config, rebuilding an ``openai.OpenAI`` client."""
        spec = state.get("__dict__", {}).get("oai_client")
        if isinstance(spec, _OpenAIClientSpec):
            state = {**state, "__dict__": {**state["__dict__"], "oai_client": spec.build()}}
        super().__setstate__(state)

    def formatted_summary_prompt(self) -> str:
        """Return ``summary_system_prompt`` with ``{max_summary_length}`` filled in.

        Only that placeholder is replaced, so other braces in a custom prompt are kept.
        """
        return self.summary_system_prompt.replace("{max_summary_length}", str(self.max_summary_length))

    def updated(self, changes: dict[str, Any]) -> MemoryConfig:
        """Return a new validated config with ``changes`` applied (this one is unchanged).

        All changes are validated together, so e.g. lowering ``max_prompt_length``
        and ``max_summary_length`` at once is accepted.

        Args:
            changes: Field names mapped to new values.

        Raises:
            TypeError: If ``changes`` is not a dict.
            pydantic.ValidationError: If a name is unknown or a value is invalid.
        """
        if not isinstance(changes, dict):
            raise TypeError(f"config must be a dictionary or None, got {type(changes).__name__}")
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values.update(changes)
        return type(self)(**values)
