"""Incremental, token-exact prompt building for multi-turn chat.

:class:`ChatTokenBuilder` keeps, per session, the prompt ids sent and the ids the
model sampled. The next turn's prompt is::

    previous prompt ids + sampled ids (+ end-of-turn id if sampling stopped early)
        + ids of the new messages + generation prompt

The ids of the new messages come from a fixed, cached *base conversation* that ends
with an assistant turn: the chat template renders ``base + new messages`` with the
generation prompt, and the ids after the base assistant's end-of-turn token are the
suffix. Earlier turns are never re-rendered, so:

* the model's own sampled ids stay in the context (a re-tokenization of the text can
  merge bytes differently, and Qwen3-style templates drop earlier ``<think>`` blocks);
* the newline a ChatML template puts after ``<|im_end|>`` belongs to the suffix, never
  to the sampled ids;
* turn ``k`` costs O(new messages), not O(conversation).

When the incoming messages are not "previous messages + the assistant message just
sampled + new messages" (memory rewrote the history, thinking was elided, tools
changed), the conversation is rendered afresh and the turn is flagged ``new_segment``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agent_gym.parsers import ChatFamily, ToolCallParser, canonical_tool_parser, detect_parsers, get_family, make_parser
from agent_gym.policy.chat_messages import normalize_messages, template_supports_tools, tool_set_key
from agent_gym.policy.family_turns import FamilySuffix
from agent_gym.policy.piece_encoder import PieceEncoder

__all__ = ["ChatTokenBuilder", "PromptPlan"]

_BASE_USER = "Say hello."
_BASE_ASSISTANT = "Hello there, friend."
_BASE: tuple[dict[str, str], ...] = (
    {"role": "user", "content": _BASE_USER},
    {"role": "assistant", "content": _BASE_ASSISTANT},
)


def _describe_tools(schemas: list[dict[str, Any]], parser: ToolCallParser | None = None) -> str:
    """Plain-text tool description for templates without tool support (the env's wording, the parser's format)."""
    from agent_gym.parsers.instructions import describe_tools_for

    return describe_tools_for(schemas, parser)


@dataclass
class PromptPlan:
    """The prompt of one turn, before sampling.

    Attributes:
        session_id: The session the plan belongs to.
        prompt_ids: The full prompt ids to send.
        messages: The (normalized) messages the prompt encodes.
        new_segment: True when the prompt does not extend the previous turn's prompt and
            sampled ids (history rewritten): a new training segment starts here.
        incremental: True when the prompt was built from the previous turn without
            re-rendering earlier messages.
        segment_start: Length of the prompt that opened the current segment; ids after it
            are the segment's response (sampled and environment ids).
    """

    session_id: str
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    new_segment: bool
    incremental: bool
    segment_start: int
    tools_key: str | None = None

    @property
    def response_length(self) -> int:
        """Ids after the segment's first prompt (sampled + environment), before this turn."""
        return len(self.prompt_ids) - self.segment_start


@dataclass
class _Session:
    messages: list[dict[str, Any]]
    tools_key: str | None
    prompt_ids: list[int]
    sampled_ids: list[int]
    text: str
    segment_start: int
    turns: int = 1


@dataclass
class _BaseInfo:
    """What the base conversation looks like for one tools setting."""

    eot_count: int
    valid_texts: set[str] = field(default_factory=set)


class ChatTokenBuilder:
    """Builds each turn's prompt ids from the previous turn's exact ids.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        chat_template_kwargs: Extra template variables (e.g. ``{"enable_thinking": False}``).
        track_retokenization: Count turns whose sampled ids differ from a re-tokenization
            of their text (see :attr:`noncanonical_turns`). Costs one encode per turn.
        tool_parser: The model family's tool-call parser name (vLLM's: ``hermes``,
            ``llama3_json``, ``mistral``, ``openai``, ``deepseek_v3``, ``qwen3_coder``,
            ``pythonic``); None reads it from the chat template where that is unambiguous
            (else ``hermes``). A structured family's messages are rendered in its shape and its
            turns continue as :mod:`agent_gym.policy.family_turns` describes.
        reasoning_parser: ``deepseek_r1``, ``qwen3``, ``openai`` or None (read from the template
            with the tool parser when neither is given).

    Raises:
        ValueError: If the tokenizer has no chat template, or its assistant turns do not
            end with a special end-of-turn token.

    Example:
        >>> builder = ChatTokenBuilder(tokenizer)  # doctest: +SKIP
        >>> plan = builder.prepare("ep-1", [{"role": "user", "content": "2+2?"}])  # doctest: +SKIP
        >>> builder.commit(plan, sampled_ids, text)  # doctest: +SKIP
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        track_retokenization: bool = True,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer: expected a tokenizer with a chat template, got one without")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.track_retokenization = track_retokenization
        self.supports_tools = template_supports_tools(tokenizer)
        # Exact ids of recurring text (the system prompt and tool schemas of every episode)
        # are reused instead of tokenized again: see PieceEncoder.
        self.encoder = PieceEncoder(tokenizer)
        detected_tool, detected_reasoning = detect_parsers(tokenizer)
        self.parsers_detected = tool_parser is None and detected_tool is not None
        """True when the parser names were read from the chat template (none was given)."""
        self.tool_parser: str = canonical_tool_parser(tool_parser or detected_tool or "hermes")
        """The tool-call parser name of the model family (given, or read from the chat template)."""
        if reasoning_parser is None and tool_parser is None:
            reasoning_parser = detected_reasoning
        self.reasoning_parser: str | None = reasoning_parser
        """The reasoning parser name (given, or read from the chat template with the tool parser)."""
        self.family: ChatFamily = get_family(self.tool_parser)
        self.parser: ToolCallParser = make_parser(self.tool_parser, reasoning_parser)
        self._family: FamilySuffix | None = (
            FamilySuffix(tokenizer, self.family, self.parser, self._render_template, self.encoder.encode)
            if self.family.structured
            else None
        )
        self._sessions: dict[str, _Session] = {}
        self._bases: dict[str | None, _BaseInfo] = {}
        # (tools key, roles of the new messages) -> whether the text after the base changes with the tools
        self._suffix_needs_tools: dict[tuple[str | None, tuple[str, ...]], bool] = {}
        # (tools key, system message, roles) -> the rendered system turn with the tool schemas, or
        # None where the tools change the text after it (see _fresh_text)
        self._system_heads: dict[tuple[str, str, tuple[str, ...]], str | None] = {}
        # (tools key, the conversation as JSON) -> its fresh prompt ids: the members of a group share their first prompt
        self._fresh_prompts: dict[tuple[str | None, bytes], tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self.noncanonical_turns = 0
        self.fresh_renders = 0
        self.eot_token_id = self._find_eot()
        self._eot_text = tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        self._split_at_eot: bool | None = None
        eos = getattr(tokenizer, "eos_token_id", None)
        self.stop_ids: frozenset[int] = frozenset({self.eot_token_id} | ({int(eos)} if eos is not None else set()))
        self.family_stop_ids: frozenset[int] = self._family.stop_ids if self._family is not None else frozenset()
        """The ids that end sampling in the model family's format (e.g. harmony's ``<|call|>``, ``<|return|>``)."""
        self.stop_ids |= self.family_stop_ids

    # ------------------------------------------------------------------ rendering
    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render ``messages`` with the chat template (tools in the template or the system message).

        Messages are first put in the model family's shape (see :class:`~agent_gym.parsers.ChatFamily`).
        """
        msgs = normalize_messages(messages)
        if self._family is not None:
            msgs = self._family.template_messages(msgs)
        msgs, kwargs = self._template_args(msgs, tools)
        return self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def render_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Render ``messages`` and tokenize the whole text (a full, non-incremental render).

        The ids equal ``apply_chat_template(..., tokenize=True)``'s.
        """
        return self.encoder.encode(self.render_text(messages, tools, add_generation_prompt=add_generation_prompt))

    def _render_template(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """Render messages already in the family's shape, with the generation prompt."""
        msgs, kwargs = self._template_args(msgs, tools)
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)

    def _template_args(
        self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        kwargs = dict(self.chat_template_kwargs)
        if tools:
            if self.supports_tools:
                kwargs["tools"] = tools
            else:
                description = _describe_tools(tools, self.parser)
                if msgs and msgs[0].get("role") == "system":
                    head = str(msgs[0].get("content") or "")
                    msgs = [{**msgs[0], "content": f"{head}\n\n{description}" if head else description}, *msgs[1:]]
                else:
                    msgs = [{"role": "system", "content": description}, *msgs]
        return msgs, kwargs

    def _fresh_text(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None, key: str | None) -> str:
        """``render_text(msgs, tools)``, reusing the rendered system turn that carries the tool schemas.

        Rendering every schema through the template's ``tojson`` is most of a first turn's render
        (about ten times the rest). Templates put the schemas in the system turn, so the text after
        that turn's end-of-turn token is the same without them: then the conversation is rendered
        without tools and the system turn rendered with them (kept per tool set, system message and
        sequence of roles) is put in front. Whether the text after the cut is the same both ways is
        checked once per such key, by rendering both ways; where it is not (tools in a user turn,
        a model family with its own message shape), every render is a whole one.
        """
        if (not tools or key is None or not self.supports_tools or self._family is not None
                or len(msgs) < 2 or msgs[0].get("role") != "system"):
            return self.render_text(msgs, tools)
        signature = (key, str(msgs[0].get("content") or ""), tuple(str(m.get("role")) for m in msgs))
        if signature not in self._system_heads:
            with_tools = self.render_text(msgs, tools)
            without = self.render_text(msgs, None)
            cut_tools, cut_plain = self._text_cut(with_tools, 1), self._text_cut(without, 1)
            same_tail = cut_tools > 0 and cut_plain > 0 and with_tools[cut_tools:] == without[cut_plain:]
            with self._lock:
                if len(self._system_heads) >= 1024:
                    self._system_heads.clear()
                self._system_heads[signature] = with_tools[:cut_tools] if same_tail else None
            return with_tools
        head = self._system_heads.get(signature)
        if head is None:
            return self.render_text(msgs, tools)
        without = self.render_text(msgs, None)
        cut = self._text_cut(without, 1)
        return head + without[cut:] if cut > 0 else self.render_text(msgs, tools)

    # ------------------------------------------------------------------ base conversation
    def _find_eot(self) -> int:
        """Return the special token that ends an assistant turn in this template."""
        ids = self.render_ids(list(_BASE), add_generation_prompt=False)
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        special |= set(getattr(self.tokenizer, "added_tokens_decoder", {}) or {})
        for pos in range(len(ids) - 1, -1, -1):
            token = ids[pos]
            if token in special:
                return token
            if self.tokenizer.decode([token], skip_special_tokens=False).strip():
                break
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is not None and eos in ids:
            return int(eos)
        raise ValueError(
            "tokenizer: expected assistant turns to end with a special end-of-turn token, "
            f"got a template whose base turn ends with {self.tokenizer.decode(ids[-4:])!r}"
        )

    def _base_info(self, tools: list[dict[str, Any]] | None, key: str | None) -> _BaseInfo:
        info = self._bases.get(key)
        if info is None:
            template_tools = tools if self.supports_tools else None
            ids = self.render_ids(list(_BASE), template_tools, add_generation_prompt=False)
            last = max(i for i, t in enumerate(ids) if t == self.eot_token_id)
            info = _BaseInfo(eot_count=ids[: last + 1].count(self.eot_token_id))
            self._bases[key] = info
        return info

    def _render_after_base(
        self, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None, key: str | None
    ) -> tuple[str, _BaseInfo]:
        info = self._base_info(tools, key if tools else None)
        kwargs = dict(self.chat_template_kwargs)
        if tools:
            kwargs["tools"] = tools
        msgs = [dict(m) for m in _BASE] + new
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs), info

    def _suffix_render(
        self, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None, key: str | None
    ) -> tuple[str, _BaseInfo]:
        """Render the base conversation + ``new``, leaving the tools out where they change nothing.

        Templates put the tool schemas in the system turn, before the cut, so the text after it
        is usually the same without them, and rendering them (every schema through ``tojson``)
        is most of a render's cost. Whether that holds is checked once per tool set and sequence
        of roles in ``new``, by rendering both ways.
        """
        if not tools:
            return self._render_after_base(new, None, None)
        signature = (key, tuple(str(m.get("role")) for m in new))
        needs_tools = self._suffix_needs_tools.get(signature)
        if needs_tools is None:
            with_tools, info_tools = self._render_after_base(new, tools, key)
            without, info_plain = self._render_after_base(new, None, None)
            cut_tools = self._text_cut(with_tools, info_tools.eot_count)
            cut_plain = self._text_cut(without, info_plain.eot_count)
            needs_tools = cut_tools < 0 or cut_plain < 0 or with_tools[cut_tools:] != without[cut_plain:]
            if len(self._suffix_needs_tools) >= 4096:
                self._suffix_needs_tools.clear()
            self._suffix_needs_tools[signature] = needs_tools
            return (with_tools, info_tools) if needs_tools else (without, info_plain)
        return self._render_after_base(new, tools if needs_tools else None, key)

    def suffix_ids(
        self,
        new_messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tools_key: str | None = None,
    ) -> list[int] | None:
        """Ids that follow a finished assistant turn for ``new_messages`` plus the generation prompt.

        The template renders the cached base conversation followed by ``new_messages``; the
        ids after the base assistant's end-of-turn token are returned. Only the text after
        that special token is tokenized when the tokenizer splits there (checked once).

        Args:
            new_messages: The messages after the assistant turn.
            tools: OpenAI function schemas, or None.
            tools_key: ``tools`` as canonical JSON, when the caller already has it.

        Returns:
            The ids, or None when the rendered base part does not look like the cached base
            conversation (the caller then renders the whole conversation).
        """
        new = normalize_messages(new_messages) if new_messages else []
        if tools and self.supports_tools:
            text, info = self._suffix_render(new, tools, tools_key or tool_set_key(tools))
        else:
            text, info = self._suffix_render(new, None, None)
        if self._split_at_eot is None:
            self._split_at_eot = self._check_text_split(text, info)
        if self._split_at_eot:
            cut = self._text_cut(text, info.eot_count)
            if cut < 0:
                return None
            prefix = text[:cut]
            if prefix not in info.valid_texts:
                ids = self.encoder.encode(prefix)
                if not self._valid_base_ids(ids, info):
                    return None
                if len(info.valid_texts) < 16:
                    info.valid_texts.add(prefix)
            return self.encoder.encode(text[cut:])
        full = self.encoder.encode(text)
        seen, cut = 0, -1
        for pos, token in enumerate(full):
            if token == self.eot_token_id:
                seen += 1
                if seen == info.eot_count:
                    cut = pos + 1
                    break
        if cut < 0 or not self._valid_base_ids(full[:cut], info):
            return None
        return full[cut:]

    def _text_cut(self, text: str, count: int) -> int:
        """Index just after the ``count``-th end-of-turn token string in ``text`` (-1 if absent)."""
        pos = -1
        for _ in range(count):
            pos = text.find(self._eot_text, pos + 1)
            if pos < 0:
                return -1
        return pos + len(self._eot_text)

    def _valid_base_ids(self, ids: list[int], info: _BaseInfo) -> bool:
        """Whether ``ids`` look like the base conversation cut after its assistant's end of turn."""
        if not ids or ids[-1] != self.eot_token_id or ids.count(self.eot_token_id) != info.eot_count:
            return False
        decoded = self.tokenizer.decode(ids[:-1], skip_special_tokens=False)
        return decoded.rstrip().endswith(_BASE_ASSISTANT) and _BASE_USER in decoded

    def _check_text_split(self, text: str, info: _BaseInfo) -> bool:
        """Whether tokenizing the text after the end-of-turn token alone gives the in-context ids."""
        cut = self._text_cut(text, info.eot_count)
        if cut < 0:
            return False
        full = self.encoder.encode(text)
        head = self.encoder.encode(text[:cut])
        tail = self.encoder.encode(text[cut:])
        return head + tail == full and bool(head) and head[-1] == self.eot_token_id

    # ------------------------------------------------------------------ sessions
    def prepare(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> PromptPlan:
        """Return the prompt ids for the next turn of ``session_id`` (state is not changed).

        Args:
            session_id: The episode.
            messages: The whole conversation as the policy sees it.
            tools: OpenAI function schemas, or None.

        Returns:
            A :class:`PromptPlan`; pass it to :meth:`commit` once the turn is sampled.

        Raises:
            RuntimeError: If the incremental prompt breaks the prefix invariant (a bug).
        """
        msgs = normalize_messages(messages)
        key = tool_set_key(tools)
        with self._lock:
            state = self._sessions.get(session_id)
        if state is not None:
            new = self._continuation(state, msgs, key)
            suffix: list[int] | None = None
            end_id = self.eot_token_id
            if new is not None and self._family is not None:
                found = self._family.suffix(state.text, new, tools, key)
                if found is not None:
                    suffix, end_id = found
            elif new is not None:
                suffix = self.suffix_ids(new, tools, tools_key=key)
            if suffix is not None:
                head = state.prompt_ids + state.sampled_ids
                if not state.sampled_ids or state.sampled_ids[-1] not in self.stop_ids:
                    head.append(end_id)
                ids = head + suffix
                n_prev, n_sampled = len(state.prompt_ids), len(state.sampled_ids)
                if ids[:n_prev] != state.prompt_ids or ids[n_prev : n_prev + n_sampled] != state.sampled_ids:
                    raise RuntimeError(f"session {session_id!r}: prefix invariant broken while building the prompt")
                return PromptPlan(session_id, ids, msgs, False, True, state.segment_start, key)
        ids = self._fresh_ids(msgs, tools, key)
        return PromptPlan(session_id, ids, msgs, state is not None, False, len(ids), key)

    def _fresh_ids(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None, key: str | None) -> list[int]:
        """The ids of a whole render of ``msgs``, kept for the next identical conversation (bounded cache).

        The samples of one task (a GRPO group) start from the same conversation; its render and
        tokenization are done once. Conversations that are not plain JSON are rendered every time.
        """
        try:
            conversation = orjson.dumps(msgs, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            conversation = None
        if conversation is not None:
            cached = self._fresh_prompts.get((key, conversation))
            if cached is not None:
                return list(cached)
        ids = self.encoder.encode(self._fresh_text(msgs, tools, key))
        self.fresh_renders += 1
        if conversation is not None:
            with self._lock:
                if len(self._fresh_prompts) >= 256:
                    self._fresh_prompts.pop(next(iter(self._fresh_prompts)))
                self._fresh_prompts[(key, conversation)] = tuple(ids)
        return ids

    def _continuation(
        self, state: _Session, msgs: list[dict[str, Any]], key: str | None
    ) -> list[dict[str, Any]] | None:
        """Return the messages added after the last sampled turn, or None if history was rewritten."""
        n = len(state.messages)
        if key != state.tools_key or len(msgs) <= n or msgs[:n] != state.messages:
            return None
        reply = msgs[n]
        if reply.get("role") != "assistant":
            return None
        content = str(reply.get("content") or "")
        if content != state.text and content.strip() != state.text.strip():
            return None
        return msgs[n + 1 :]

    def commit(self, plan: PromptPlan, sampled_ids: Sequence[int], text: str) -> bool:
        """Record the ids sampled for ``plan``; the next :meth:`prepare` extends them.

        Args:
            plan: The plan returned by :meth:`prepare` for this turn.
            sampled_ids: The raw sampled ids (including a final end-of-turn/stop id).
            text: The assistant message content the caller will add to the conversation.

        Returns:
            True when ``sampled_ids`` equal a fresh tokenization of ``text`` (plus the stop id),
            False when a re-tokenization would have changed them (always True when tracking
            is off).
        """
        sampled = [int(t) for t in sampled_ids]
        canonical = True
        if self.track_retokenization:
            core = sampled[:-1] if sampled and sampled[-1] in self.stop_ids else sampled
            canonical = self.encoder.encode(text) == core
            if not canonical:
                self.noncanonical_turns += 1
        with self._lock:
            old = self._sessions.get(plan.session_id)
            turns = old.turns + 1 if old is not None else 1
            self._sessions[plan.session_id] = _Session(
                plan.messages, plan.tools_key, plan.prompt_ids, sampled, text, plan.segment_start, turns
            )
        return canonical

    def decode_response(self, sampled_ids: Sequence[int], extra_stop_ids: Sequence[int] = ()) -> str:
        """Decode sampled ids to the assistant message text (a final stop id is left out)."""
        ids = list(sampled_ids)
        if ids and (ids[-1] in self.stop_ids or ids[-1] in extra_stop_ids):
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def session_ids(self, session_id: str) -> list[int]:
        """Return the last prompt ids plus sampled ids of ``session_id`` (empty if unknown)."""
        with self._lock:
            state = self._sessions.get(session_id)
        return [] if state is None else state.prompt_ids + state.sampled_ids

    def close(self, session_id: str) -> None:
        """Forget ``session_id``."""
        with self._lock:
            self._sessions.pop(session_id, None)

    @property
    def num_sessions(self) -> int:
        """Number of sessions currently tracked."""
        return len(self._sessions)
