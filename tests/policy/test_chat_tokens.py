"""ChatTokenBuilder: prefix invariant, exact sampled ids, suffix computation, segments, tools."""

from __future__ import annotations

import pytest
import torch

from agent_gym.policy.chat_messages import as_id_list, template_supports_tools
from agent_gym.policy.chat_tokens import ChatTokenBuilder

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]

REPLIES = [
    'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expr": "17*3"}}\n</tool_call>',
    "The result is 51, 世界 — done. ",
    "  leading spaces and trailing newline\n",
    "Numbers 12345 and symbols {}[]()!?",
    "<answer>51</answer>",
]
NEW_MESSAGES = [
    [{"role": "tool", "content": "51"}],
    [{"role": "user", "content": "Now double it."}],
    [{"role": "tool", "content": "{\"ok\": true}"}, {"role": "tool", "content": "second result"}],
    [{"role": "user", "content": "Thanks!\n\nOne more: 2+2?"}],
]


@pytest.fixture(params=["qwen", "deepseek"])
def tokenizer(request, qwen_tokenizer, deepseek_tokenizer):
    return qwen_tokenizer if request.param == "qwen" else deepseek_tokenizer


def _sampled(builder: ChatTokenBuilder, text: str, *, stop: bool = True) -> list[int]:
    ids = builder.tokenizer.encode(text, add_special_tokens=False)
    return ids + [builder.eot_token_id] if stop else ids


@pytest.mark.parametrize("use_tools", [False, True])
def test_prefix_invariant_and_render_equality(tokenizer, use_tools):
    builder = ChatTokenBuilder(tokenizer)
    tools = TOOLS if use_tools else None
    messages = [{"role": "system", "content": "You are a careful agent."}, {"role": "user", "content": "17*3?"}]
    previous: list[int] = []
    for turn in range(12):
        plan = builder.prepare("ep", messages, tools)
        assert not plan.new_segment
        assert plan.incremental == (turn > 0)
        assert plan.prompt_ids[: len(previous)] == previous, f"prefix broken at turn {turn}"
        # With canonical replies, incremental ids equal a full render of the same conversation.
        assert plan.prompt_ids == builder.render_ids(messages, tools)
        assert tokenizer.decode(plan.prompt_ids) == builder.render_text(messages, tools)
        text = REPLIES[turn % len(REPLIES)]
        sampled = _sampled(builder, text)
        assert builder.commit(plan, sampled, text)
        previous = plan.prompt_ids + sampled
        assert builder.session_ids("ep") == previous
        messages = messages + [{"role": "assistant", "content": text}] + NEW_MESSAGES[turn % len(NEW_MESSAGES)]
    assert builder.fresh_renders == 1


def test_newline_after_end_of_turn_belongs_to_suffix(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer)
    assert builder.eot_token_id == qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = [{"role": "user", "content": "hi"}]
    plan = builder.prepare("s", messages)
    sampled = _sampled(builder, "hello")
    builder.commit(plan, sampled, "hello")
    nxt = builder.prepare("s", messages + [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "x"}])
    after = nxt.prompt_ids[len(plan.prompt_ids) + len(sampled) :]
    assert qwen_tokenizer.decode(after).startswith("\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")
    assert sampled[-1] == builder.eot_token_id  # the newline was never part of the sampled ids


def test_length_finish_appends_end_of_turn(tokenizer):
    builder = ChatTokenBuilder(tokenizer)
    messages = [{"role": "user", "content": "count"}]
    plan = builder.prepare("s", messages)
    sampled = _sampled(builder, "one two three", stop=False)
    builder.commit(plan, sampled, "one two three")
    messages = messages + [{"role": "assistant", "content": "one two three"}, {"role": "user", "content": "go on"}]
    nxt = builder.prepare("s", messages)
    n = len(plan.prompt_ids) + len(sampled)
    assert nxt.prompt_ids[:n] == plan.prompt_ids + sampled
    assert nxt.prompt_ids[n] == builder.eot_token_id
    assert not nxt.new_segment
    assert nxt.prompt_ids == builder.render_ids(messages)


def test_noncanonical_sampled_ids_are_detected_and_kept(qwen_tokenizer):
    """The model may sample "hel"+"lo": re-tokenizing "hello" gives other ids; the builder keeps the sampled ones."""
    tok = qwen_tokenizer
    builder = ChatTokenBuilder(tok)
    messages = [{"role": "user", "content": "greet"}]
    plan = builder.prepare("s", messages)
    text = "hello world"
    sampled = tok.encode("hel", add_special_tokens=False) + tok.encode("lo world", add_special_tokens=False)
    sampled.append(builder.eot_token_id)
    canonical = tok.encode(text, add_special_tokens=False) + [builder.eot_token_id]
    assert tok.decode(sampled[:-1]) == text
    assert sampled != canonical  # naive re-tokenization would change the ids
    assert builder.commit(plan, sampled, text) is False
    assert builder.noncanonical_turns == 1
    messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
    nxt = builder.prepare("s", messages)
    n = len(plan.prompt_ids)
    assert nxt.prompt_ids[n : n + len(sampled)] == sampled
    naive = builder.render_ids(messages)
    assert naive != nxt.prompt_ids  # a full re-render would have trained on ids the model never sampled
    assert tok.decode(naive) == tok.decode(nxt.prompt_ids)  # same text, different ids
    assert not nxt.new_segment


def test_thinking_dropping_template_keeps_sampled_thinking(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer)
    messages = [{"role": "user", "content": "What is 6*7?"}]
    history: list[int] = []
    for turn in range(3):
        plan = builder.prepare("s", messages)
        assert plan.prompt_ids[: len(history)] == history
        assert not plan.new_segment
        text = f"<think>\nstep {turn}: multiply\n</think>\n\nIt is 42."
        sampled = _sampled(builder, text)
        builder.commit(plan, sampled, text)
        history = plan.prompt_ids + sampled
        messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "Sure?"}]
    final = builder.prepare("s", messages)
    naive = builder.render_text(messages)
    assert naive.count("<think>") == 0  # the template drops earlier thinking ...
    assert qwen_tokenizer.decode(final.prompt_ids).count("<think>") == 3  # ... the sampled ids keep it


def test_enable_thinking_kwarg_goes_into_generation_prompt(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer, {"enable_thinking": False})
    messages = [{"role": "user", "content": "hi"}]
    plan = builder.prepare("s", messages)
    assert qwen_tokenizer.decode(plan.prompt_ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    builder.commit(plan, _sampled(builder, "hey"), "hey")
    nxt = builder.prepare("s", messages + [{"role": "assistant", "content": "hey"}, {"role": "user", "content": "?"}])
    assert qwen_tokenizer.decode(nxt.prompt_ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not nxt.new_segment


@pytest.mark.parametrize(
    "rewrite",
    ["summary", "elided_thinking", "edited_reply", "tools_changed"],
)
def test_rewritten_history_starts_new_segment(qwen_tokenizer, rewrite):
    builder = ChatTokenBuilder(qwen_tokenizer)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    plan = builder.prepare("s", messages, TOOLS)
    text = "<think>\nlong reasoning\n</think>\n\nanswer"
    builder.commit(plan, _sampled(builder, text), text)
    tools = TOOLS
    if rewrite == "summary":
        messages = [{"role": "system", "content": "sys\n\n[Historical Information Summary]:\n\nq was asked"}]
        messages.append({"role": "user", "content": "next"})
    elif rewrite == "elided_thinking":
        elided = "<think>Thinking process omitted.</think>\n\nanswer"
        messages = messages + [{"role": "assistant", "content": elided}, {"role": "user", "content": "next"}]
    elif rewrite == "edited_reply":
        messages = messages + [{"role": "assistant", "content": "something else"}, {"role": "user", "content": "n"}]
    else:
        messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "n"}]
        tools = None
    nxt = builder.prepare("s", messages, tools)
    assert nxt.new_segment and not nxt.incremental
    assert nxt.prompt_ids == builder.render_ids(messages, tools)
    assert nxt.segment_start == len(nxt.prompt_ids) and nxt.response_length == 0


def test_uncommitted_turn_does_not_change_state(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer)
    messages = [{"role": "user", "content": "q"}]
    first = builder.prepare("s", messages)
    again = builder.prepare("s", messages)  # e.g. the first attempt failed and the turn is retried
    assert first.prompt_ids == again.prompt_ids and not again.new_segment
    builder.close("s")
    assert builder.session_ids("s") == [] and builder.num_sessions == 0


def test_tools_go_to_template_or_system_message_never_both(qwen_tokenizer, deepseek_tokenizer):
    assert template_supports_tools(qwen_tokenizer) and not template_supports_tools(deepseek_tokenizer)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "17*3?"}]
    qwen = ChatTokenBuilder(qwen_tokenizer).render_text(messages, TOOLS)
    assert "<tools>" in qwen and qwen.count('"name": "calculator"') == 1
    deep = ChatTokenBuilder(deepseek_tokenizer).render_text(messages, TOOLS)
    assert deep.count("calculator") >= 1 and "<tools>" not in deep
    assert deep.index("You are an agent.") < deep.index("calculator") < deep.index("17*3?")
    # Without a system message the description becomes one.
    deep2 = ChatTokenBuilder(deepseek_tokenizer).render_text(messages[1:], TOOLS)
    assert deep2.index("calculator") < deep2.index("17*3?")


def test_incremental_turn_with_tools_described_in_system(deepseek_tokenizer):
    builder = ChatTokenBuilder(deepseek_tokenizer)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    plan = builder.prepare("s", messages, TOOLS)
    builder.commit(plan, _sampled(builder, "call"), "call")
    messages = messages + [{"role": "assistant", "content": "call"}, {"role": "tool", "content": "51"}]
    nxt = builder.prepare("s", messages, TOOLS)
    assert nxt.incremental and not nxt.new_segment
    assert nxt.prompt_ids == builder.render_ids(messages, TOOLS)


def test_as_id_list_accepts_every_form(qwen_tokenizer):
    ids = [1, 2, 3]
    assert as_id_list(ids) == ids
    assert as_id_list([ids]) == ids
    assert as_id_list(torch.tensor([ids])) == ids
    assert as_id_list({"input_ids": ids, "attention_mask": [1, 1, 1]}) == ids
    enc = qwen_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True)
    assert as_id_list(enc) == qwen_tokenizer.encode(
        qwen_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False),
        add_special_tokens=False,
    )
    with pytest.raises(TypeError):
        as_id_list(3.5)


def test_bad_arguments(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer)
    with pytest.raises(ValueError, match="at least one message"):
        builder.prepare("s", [])
    with pytest.raises(TypeError, match="expected a sequence"):
        builder.prepare("s", "hello")

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="chat template"):
        ChatTokenBuilder(NoTemplate())


# Tools rendered just before the last user message (as some Mistral templates do): the text after
# an earlier assistant turn then depends on the tools, and suffixes must keep them.
_TOOLS_BEFORE_LAST_USER = (
    "{%- set last_user = namespace(i=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set last_user.i = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if loop.index0 == last_user.i and tools %}[TOOLS]{{ tools | tojson }}[/TOOLS]{%- endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


@pytest.mark.parametrize("template", ["qwen", "tools_before_last_user"])
def test_suffix_keeps_tools_exactly_where_the_template_puts_them(qwen_tokenizer, template):
    import copy

    tokenizer = qwen_tokenizer
    if template != "qwen":
        tokenizer = copy.deepcopy(qwen_tokenizer)
        tokenizer.chat_template = _TOOLS_BEFORE_LAST_USER
    builder = ChatTokenBuilder(tokenizer)
    for new in NEW_MESSAGES:
        for _ in range(2):  # the first call checks the template, the second uses the verdict
            got = builder.suffix_ids(new, TOOLS)
            base = [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello there, friend."}]
            text = tokenizer.apply_chat_template(base + new, tools=TOOLS, tokenize=False, add_generation_prompt=True)
            cut = text.find("<|im_end|>", text.find("Hello there, friend.")) + len("<|im_end|>")
            assert got == tokenizer.encode(text[cut:], add_special_tokens=False)
    if template != "qwen":
        assert "[TOOLS]" in tokenizer.decode(builder.suffix_ids([{"role": "user", "content": "again"}], TOOLS))


_FIRST_TURNS = [
    [{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": "What is 17*3?"}],
    [{"role": "system", "content": "You are a careful assistant."},
     {"role": "user", "content": "  世界 <b>{}</b>\n\n"}],
    [{"role": "system", "content": "Another system prompt."}, {"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "<tool_response>x</tool_response>"}],
]


@pytest.mark.parametrize("template", ["qwen", "deepseek", "tools_before_last_user", "llama3_json", "gemma3"])
def test_first_turn_render_with_the_kept_system_turn_equals_a_whole_render(qwen_tokenizer, deepseek_tokenizer,
                                                                           template):
    """A fresh prompt reuses the system turn rendered with the tools only where the rest renders the same."""
    import copy

    from family_templates import family_tokenizer

    if template == "qwen":
        tokenizer = qwen_tokenizer
    elif template == "deepseek":
        tokenizer = deepseek_tokenizer
    elif template == "tools_before_last_user":
        tokenizer = copy.deepcopy(qwen_tokenizer)
        tokenizer.chat_template = _TOOLS_BEFORE_LAST_USER
    else:
        tokenizer = family_tokenizer(template)
    builder = ChatTokenBuilder(tokenizer)
    for round_ in range(2):  # the first round checks each shape, the second uses the verdict
        for i, msgs in enumerate(_FIRST_TURNS):
            if template == "gemma3" and len(msgs) > 2:
                continue
            whole = builder.render_ids(msgs, TOOLS)
            assert builder.prepare(f"s{round_}-{i}", msgs, TOOLS).prompt_ids == whole
    if template == "qwen":  # the schemas in the system turn: every shape was checked and reuses its system turn
        assert all(head is not None for head in builder._system_heads.values()) and builder._system_heads
    if template == "tools_before_last_user":
        assert all(head is None for head in builder._system_heads.values())


def test_identical_first_conversations_are_rendered_once(qwen_tokenizer):
    """The samples of one task share their first prompt: one render, equal ids, independent lists."""
    builder = ChatTokenBuilder(qwen_tokenizer)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 17*3?"}]
    first = builder.prepare("a", messages, TOOLS)
    second = builder.prepare("b", [dict(m) for m in messages], TOOLS)
    assert builder.fresh_renders == 1
    assert first.prompt_ids == second.prompt_ids == builder.render_ids(messages, TOOLS)
    second.prompt_ids.append(0)
    assert builder.prepare("c", messages, TOOLS).prompt_ids == first.prompt_ids
    # Another question, or the same one without tools, is its own render.
    other = builder.prepare("d", [messages[0], {"role": "user", "content": "What is 17*4?"}], TOOLS)
    plain = builder.prepare("e", messages, None)
    assert builder.fresh_renders == 3
    assert other.prompt_ids != first.prompt_ids and plain.prompt_ids == builder.render_ids(messages, None)
