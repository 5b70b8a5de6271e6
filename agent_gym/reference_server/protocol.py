"""Request models and validation of the reference server (vLLM's OpenAI dialect).

Unknown fields are ignored, as vLLM does. Values out of range raise :class:`BadRequest`,
which the app turns into vLLM's 400 body
``{"error": {"message", "type": "BadRequestError", "param", "code": 400}}``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_gym.errors import RequestError
from agent_gym.reference_server.backends import GenRequest

__all__ = [
    "MEDIA_PART_TYPES",
    "BadRequest",
    "ChatRequest",
    "CompletionRequest",
    "DetokenizeRequest",
    "PromptBound",
    "TokenizeRequest",
    "context_error",
    "encode_text",
    "message_text",
    "to_gen_request",
]


BadRequest = RequestError
"""A client error, answered with vLLM's error body (:meth:`~agent_gym.errors.RequestError.openai_body`)."""

MEDIA_PART_TYPES = frozenset({"image_url", "input_image", "image_pil", "image_embeds", "audio_url", "input_audio",
                              "audio_embeds", "video_url", "video_embeds"})
"""The content part types vLLM reads as media (a part without ``type`` is one by its key): a model without a
multimodal processor, as the reference server's, refuses them with 400 ``"<model> is not a multimodal model"``."""


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    """Body of ``POST /v1/completions``: ``prompt`` is text, token ids, or a list of either."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    add_special_tokens: bool = True


class ChatRequest(_Sampling):
    """Body of ``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    chat_template: Any = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = 0


class TokenizeRequest(BaseModel):
    """Body of ``POST /tokenize``: either ``prompt`` or ``messages``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    chat_template: Any = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    """Body of ``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]


def message_text(content: Any, model: str = "") -> str:
    """Flatten OpenAI message content (a string or a list of text parts, joined by newlines) to a string.

    Args:
        content: The message's content.
        model: The served model's name, for the answer to a media part.

    Raises:
        BadRequest: A media part (:data:`MEDIA_PART_TYPES`: the model is text-only, as vLLM answers
            for such a model), another kind of part, or content that is neither str nor list.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind is None and isinstance(part, dict):
                kind = next((key for key in part if key in MEDIA_PART_TYPES), None)
            if kind == "text":
                parts.append(str(part.get("text", "")))
            elif kind in MEDIA_PART_TYPES:
                raise BadRequest(f"{model} is not a multimodal model")
            else:
                raise BadRequest(f"only text content parts are supported, got {part!r:.80}", param="messages")
        return "\n".join(parts)  # as vLLM joins a message's text parts
    raise BadRequest(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def encode_text(tokenizer: Any, text: str, *, add_special_tokens: bool, param: str = "prompt") -> list[int]:
    """``tokenizer.encode(text)``; text it cannot encode (lone surrogates, say) is the client's error.

    Raises:
        BadRequest: The tokenizer refused the text.
    """
    try:
        return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))
    except (TypeError, ValueError, UnicodeError) as exc:
        raise BadRequest(f"{param}: the tokenizer cannot encode this text ({type(exc).__name__}: {str(exc)[:100]}); "
                         "lone surrogates are not text", param=param) from None


class PromptBound:
    """Refuses a text prompt that cannot fit the context before tokenizing it.

    Every id covers at most ``longest`` bytes of text (4 bytes per character of the longest token
    of the vocabulary, an upper bound), so a text of more than ``max_model_len * longest`` bytes has
    more than ``max_model_len`` ids:
    vLLM's over-long-prompt error is certain, and the seconds and memory of tokenizing megabytes
    are saved. (Chat messages are not bounded this way: a template may drop text.)

    Args:
        tokenizer: The server's tokenizer.
        max_model_len: The context length.
    """

    def __init__(self, tokenizer: Any, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._longest: int | None = None

    @property
    def longest(self) -> int:
        """At least the bytes of the longest token (read from the vocabulary once, in milliseconds)."""
        if self._longest is None:
            try:
                self._longest = 4 * max(map(len, self.tokenizer.get_vocab()), default=0) or 1 << 30
            except Exception:  # noqa: BLE001 - a tokenizer without a readable vocabulary: no bound
                self._longest = 1 << 30
        return self._longest

    def check(self, text: str, param: str = "prompt") -> None:
        """Raise vLLM's context error when ``text`` cannot fit (cheap for short texts).

        Raises:
            BadRequest: The text has more ids than the context holds, whatever they are.
        """
        if len(text) <= self.max_model_len:  # at most 4 bytes per character: decided only for long texts
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        least = -(-size // self.longest)
        if least > self.max_model_len:
            raise BadRequest(f"This model's maximum context length is {self.max_model_len} tokens. However, your "
                             f"request has at least {least} input tokens. Please reduce the length of the input "
                             "messages.", param=param)


def context_error(max_model_len: int, prompt_len: int, max_tokens: int | None) -> BadRequest | None:
    """Return vLLM's over-long-prompt error, or ``None`` when the request fits."""
    if prompt_len >= max_model_len:
        return BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{prompt_len} input tokens. Please reduce the length of the input messages.",
            param="prompt",
        )
    if max_tokens is not None and prompt_len + max_tokens > max_model_len:
        return BadRequest(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            f"length is {max_model_len} tokens and your request has {prompt_len} input tokens "
            f"({max_tokens} > {max_model_len} - {prompt_len}).",
            param="max_tokens",
        )
    return None


def _check(cond: bool, param: str, expected: str, value: Any) -> None:
    if not cond:
        raise BadRequest(f"{param} must be {expected}, got {value!r}.", param=param)


def to_gen_request(
    req: _Sampling, prompt_ids: list[int], *, max_tokens: int, top_logprobs: int, vocab_size: int
) -> GenRequest:
    """Validate the sampling fields of ``req`` and build the engine's :class:`GenRequest`.

    Raises:
        BadRequest: A field is out of range, or a prompt id is outside the vocabulary.
    """
    temperature = 1.0 if req.temperature is None else req.temperature
    top_p = 1.0 if req.top_p is None else req.top_p
    top_k = -1 if req.top_k is None or req.top_k == 0 else req.top_k
    min_p = 0.0 if req.min_p is None else req.min_p
    rep = 1.0 if req.repetition_penalty is None else req.repetition_penalty
    freq = 0.0 if req.frequency_penalty is None else req.frequency_penalty
    pres = 0.0 if req.presence_penalty is None else req.presence_penalty
    _check(req.n >= 1, "n", "at least 1", req.n)
    _check(temperature >= 0.0, "temperature", "non-negative", temperature)
    _check(0.0 < top_p <= 1.0, "top_p", "in (0, 1]", top_p)
    _check(top_k == -1 or top_k >= 1, "top_k", "-1 or 0 (disabled) or at least 1", top_k)
    _check(0.0 <= min_p <= 1.0, "min_p", "in [0, 1]", min_p)
    _check(rep > 0.0, "repetition_penalty", "greater than zero", rep)
    _check(-2.0 <= freq <= 2.0, "frequency_penalty", "in [-2, 2]", freq)
    _check(-2.0 <= pres <= 2.0, "presence_penalty", "in [-2, 2]", pres)
    _check(max_tokens >= 1, "max_tokens", "at least 1", max_tokens)
    _check(req.min_tokens >= 0, "min_tokens", "non-negative", req.min_tokens)
    _check(req.min_tokens <= max_tokens, "min_tokens", f"less than or equal to max_tokens={max_tokens}", req.min_tokens)
    _check(0 <= top_logprobs <= 20, "logprobs", "in [0, 20]", top_logprobs)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    _check(all(stop), "stop", "a list of non-empty strings", stop)
    stop_ids = list(req.stop_token_ids or [])
    for tid in list(prompt_ids) + stop_ids:
        if not 0 <= tid < vocab_size:
            raise BadRequest(f"Token id {tid} is out of vocabulary (size {vocab_size}).", param="prompt")
    return GenRequest(
        prompt_ids=list(prompt_ids),
        max_tokens=max_tokens,
        n=req.n,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        seed=req.seed,
        stop=stop,
        stop_token_ids=stop_ids,
        ignore_eos=req.ignore_eos,
        min_tokens=req.min_tokens,
        repetition_penalty=rep,
        frequency_penalty=freq,
        presence_penalty=pres,
        top_logprobs=top_logprobs,
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
    )
