"""The trained tiny agent: its tokenizer, its training data, the training script, the shipped model."""

from __future__ import annotations

import json

import pytest
import torch

from agent_gym.models import default_model_path
from agent_gym.models.chat_template import TINY_AGENT_CHAT_TEMPLATE
from agent_gym.models.tiny_agent_data import (
    TAG_TOKENS,
    oracle_conversations,
    train_tokenizer,
    training_tasks,
)
from agent_gym.models.train_tiny_agent import (
    VLLM_CPU_HEAD_SIZES,
    TrainConfig,
    _batch_loss,
    common_prefix_length,
    train_tiny_agent,
)


@pytest.fixture(scope="module")
def small_tasks():
    return training_tasks([3], per_family=3)


@pytest.fixture(scope="module")
def agent_tokenizer(small_tasks):
    from agent_gym.models.tiny_agent_data import bootstrap_texts

    return train_tokenizer(bootstrap_texts(small_tasks), vocab_size=800)


def test_training_tasks_never_ask_a_held_out_question():
    from agent_gym.envs.tool_use.tasks import builtin_tasks

    held_out = {t["question"] for t in builtin_tasks()}
    tasks = training_tasks([1, 2], per_family=20)
    assert len(tasks) > 100 and not held_out & {t["question"] for t in tasks}
    assert len({t["question"] for t in tasks}) == len(tasks)
    with pytest.raises(ValueError, match="other than 0"):
        training_tasks([0, 1])


def test_tokenizer_splits_digits_and_keeps_tags_whole(agent_tokenizer):
    tok = agent_tokenizer
    ids = tok.encode("12345", add_special_tokens=False)
    assert [tok.decode([i]) for i in ids] == list("12345")
    for tag in (*TAG_TOKENS, "<|im_start|>", "<|im_end|>"):
        assert len(tok.encode(tag, add_special_tokens=False)) == 1, tag
    text = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 * 3"}}</tool_call>'
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    # tags are not special: they survive skip_special_tokens, the ChatML markers do not
    assert tok.decode(tok.encode("<answer>7</answer><|im_end|>"), skip_special_tokens=True) == "<answer>7</answer>"
    assert tok.chat_template == TINY_AGENT_CHAT_TEMPLATE


def test_template_lists_tools_as_signatures(agent_tokenizer):
    tools = [{"type": "function", "function": {
        "name": "lookup", "description": "Find a row.\n\nMore text.",
        "parameters": {"type": "object", "properties": {
            "item": {"type": "string"},
            "field": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]}},
            "required": ["item"]}}}]
    text = agent_tokenizer.apply_chat_template([{"role": "system", "content": "Sys."},
                                                {"role": "user", "content": "Q?"}],
                                               tools=tools, tokenize=False, add_generation_prompt=True)
    assert "lookup(item: string, field?: a|b) - Find a row.\n" in text
    assert text.startswith("<|im_start|>system\nSys.\n\nTools:\n<tools>") and text.endswith("<|im_start|>assistant\n")
    assert "More text" not in text


def test_oracle_conversations_are_rendered_as_at_rollout_time(small_tasks, agent_tokenizer):
    import gymnasium as gym

    tok = agent_tokenizer
    convs = oracle_conversations(small_tasks, tok)
    assert len(convs) == len(small_tasks)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    env = gym.make("agent_gym/ToolUse-v0")
    for task, conv in zip(small_tasks, convs, strict=True):
        obs, info = env.reset(seed=0, options={"task": task})
        tools = info["tools"]
        actions = []
        done = False
        while not done:
            action = env.unwrapped.oracle_action()
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        # the incremental ids equal a full render of the finished conversation
        full = tok.apply_chat_template(list(obs), tools=tools, tokenize=False)
        assert tok.decode(conv.input_ids, skip_special_tokens=False) == full.rstrip("\n")
        # the supervised spans are exactly the assistant messages, each ending with <|im_end|>
        spans, current = [], []
        for token, m in zip(conv.input_ids, conv.loss_mask, strict=True):
            if m:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        spans.append(current)
        assert [s[-1] for s in spans] == [im_end] * len(actions)
        assert [tok.decode(s[:-1]) for s in spans] == actions
    env.close()


def test_shared_prefix_loss_equals_the_full_forward_loss(small_tasks, agent_tokenizer):
    from agent_gym.models.train_tiny_agent import build_agent_model

    convs = oracle_conversations(small_tasks, agent_tokenizer)
    start = common_prefix_length(convs)
    assert start > 100 and not any(c.loss_mask[start - 1] for c in convs)
    model = build_agent_model(agent_tokenizer, TrainConfig(hidden_size=32, num_heads=1, num_kv_heads=1, num_layers=2,
                                                              intermediate_size=64))
    prefix = torch.tensor([convs[0].input_ids[:start]])
    with torch.no_grad():
        shared = _batch_loss(model, prefix, convs[:5], start, agent_tokenizer.pad_token_id)
        full = _batch_loss(model, prefix, convs[:5], 0, agent_tokenizer.pad_token_id)
    assert torch.isfinite(shared) and abs(float(shared) - float(full)) < 1e-4


def test_training_script_writes_a_loadable_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_gym.models.train_tiny_agent import main

    out = tmp_path / "agent"
    code = main(["--out", str(out), "--task-seeds", "5", "--per-family", "2", "--steps", "3", "--batch-size", "2",
                 "--hidden-size", "32", "--num-heads", "1", "--num-kv-heads", "1", "--num-layers", "1",
                 "--intermediate-size", "64", "--vocab-size", "700"])
    assert code == 0
    record = json.loads((out / "training.json").read_text())
    assert record["command"].startswith("python -m agent_gym.models.train_tiny_agent ")
    assert "--steps 3" in record["command"] and len(record["loss_every_25_steps"]) == 1
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tok) and tok.chat_template == TINY_AGENT_CHAT_TEMPLATE
    # saved untied (vLLM's in-place reload is exact only for an untied head), the same function as trained
    assert model.config.tie_word_embeddings is False
    assert torch.equal(model.lm_head.weight, model.get_input_embeddings().weight)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_train_function_is_deterministic(tmp_path):
    config = dict(task_seeds=[5], per_family=1, steps=2, batch_size=2, hidden_size=32, num_heads=1, num_kv_heads=1,
                  num_layers=1, intermediate_size=64, vocab_size=700)
    a = train_tiny_agent(tmp_path / "a", TrainConfig(**config), log=lambda *a: None)
    b = train_tiny_agent(tmp_path / "b", TrainConfig(**config), log=lambda *a: None)
    assert a["loss_every_25_steps"] == b["loss_every_25_steps"]


def test_head_sizes_vllm_cannot_serve_are_refused():
    with pytest.raises(ValueError, match="head size vLLM's CPU attention takes"):
        TrainConfig(hidden_size=192, num_heads=8)  # 24: vLLM's CPU attention fails at the first request
    TrainConfig(hidden_size=192, num_heads=6)


def test_shipped_model_is_small_and_complete():
    path = default_model_path()
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "training.json"):
        assert (path / name).is_file(), name
    assert (path / "model.safetensors").stat().st_size <= 10 * 2**20
    record = json.loads((path / "training.json").read_text())
    assert record["command"].startswith("python -m agent_gym.models.train_tiny_agent")
    assert 0 not in record["config"]["task_seeds"]
    config = json.loads((path / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] in VLLM_CPU_HEAD_SIZES  # vLLM serves it
    assert config["tie_word_embeddings"] is False


def test_value_mask_marks_arguments_and_answers(small_tasks, agent_tokenizer):
    from agent_gym.models.tiny_agent_data import value_spans

    text = '<tool_call>{"name": "date_add", "arguments": {"date": "2001-02-03", "days": 7}}</tool_call>'
    (start, end), = value_spans(text)
    assert text[start:end] == '{"date": "2001-02-03", "days": 7}'
    answer = "<answer>2.65</answer>"
    assert [answer[a:b] for a, b in value_spans(answer)] == ["2.65"]
    convs = oracle_conversations(small_tasks, agent_tokenizer)
    for conv in convs:
        assert len(conv.value_mask) == len(conv.input_ids)
        assert all(m for m, v in zip(conv.loss_mask, conv.value_mask, strict=True) if v)
        marked = agent_tokenizer.decode([i for i, v in zip(conv.input_ids, conv.value_mask, strict=True) if v])
        assert any(ch.isdigit() for ch in marked) and "<tool_call>" not in marked and "name" not in marked


def test_value_weight_changes_the_loss_only_through_value_ids(small_tasks, agent_tokenizer):
    from agent_gym.models.train_tiny_agent import build_agent_model

    convs = oracle_conversations(small_tasks, agent_tokenizer)[:4]
    model = build_agent_model(agent_tokenizer, TrainConfig(hidden_size=32, num_heads=1, num_kv_heads=1, num_layers=1,
                                                              intermediate_size=64))
    pad = agent_tokenizer.pad_token_id
    prefix = torch.tensor([[pad]])
    with torch.no_grad():
        plain = float(_batch_loss(model, prefix, convs, 0, pad))
        weighted = float(_batch_loss(model, prefix, convs, 0, pad, value_weight=3.0))
        values_only = [type(c)(c.task_id, c.family, c.input_ids, c.value_mask, c.value_mask) for c in convs]
        value_loss = float(_batch_loss(model, prefix, values_only, 0, pad))
        rest = [type(c)(c.task_id, c.family, c.input_ids,
                        [m - v for m, v in zip(c.loss_mask, c.value_mask, strict=True)]) for c in convs]
        rest_loss = float(_batch_loss(model, prefix, rest, 0, pad))
    n_value = sum(sum(c.value_mask) for c in convs)
    n_rest = sum(sum(c.loss_mask) for c in convs) - n_value
    assert abs(plain - (value_loss * n_value + rest_loss * n_rest) / (n_value + n_rest)) < 1e-4
    assert abs(weighted - (3 * value_loss * n_value + rest_loss * n_rest) / (3 * n_value + n_rest)) < 1e-4


def test_config_rejects_bad_schedule_and_weight():
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="value_weight"):
        TrainConfig(value_weight=0)


def test_copy_drills_repeat_their_values_and_mark_them(agent_tokenizer):
    from agent_gym.models.tiny_agent_data import copy_drills

    drills = copy_drills(agent_tokenizer, 40, words=["parts", "shift", "trucks", "filter"], seed=3)
    assert len(drills) == 40 and {d.family for d in drills} == {"drill"}
    eot = agent_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for drill in drills:
        assert len(drill.input_ids) == len(drill.loss_mask) == len(drill.value_mask)
        start = drill.loss_mask.index(1)
        assert all(drill.loss_mask[start:]) and drill.input_ids[-1] == eot
        context = agent_tokenizer.decode(drill.input_ids[:start])
        answer = agent_tokenizer.decode(drill.input_ids[start:-1])
        assert context.endswith("<|im_start|>assistant\n")
        for value in answer.split(" | "):
            assert value in context
    again = copy_drills(agent_tokenizer, 40, words=["parts", "shift", "trucks", "filter"], seed=3)
    assert [d.input_ids for d in again] == [d.input_ids for d in drills]


def test_config_rejects_bad_drill_ratio():
    with pytest.raises(ValueError, match="drill_ratio"):
        TrainConfig(drill_ratio=1.0)
