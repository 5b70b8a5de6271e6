"""Tests of POST /v1/chat/completions on a real server process."""

from __future__ import annotations

import httpx

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 2+3?"}]


def chat(server: str, **body):
    body.setdefault("messages", MESSAGES)
    return httpx.post(f"http://{server}/v1/chat/completions", json=body, timeout=60)


def test_chat_returns_prompt_and_sampled_ids(reference_server, qwen_tokenizer):
    r = chat(reference_server, max_tokens=5, return_token_ids=True, logprobs=True, top_logprobs=0, seed=1)
    assert r.status_code == 200, r.text
    body = r.json()
    expected = qwen_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert body["prompt_token_ids"] == qwen_tokenizer.encode(expected)
    choice = body["choices"][0]
    assert len(choice["token_ids"]) == 5 and choice["finish_reason"] == "length"
    content = choice["logprobs"]["content"]
    assert len(content) == 5 and all(c["logprob"] <= 0 and c["top_logprobs"] == [] for c in content)
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == qwen_tokenizer.decode(choice["token_ids"], skip_special_tokens=True)


def test_chat_tools_and_template_kwargs_reach_the_template(reference_server, qwen_tokenizer):
    body = chat(
        reference_server,
        max_tokens=1,
        return_token_ids=True,
        tools=TOOLS,
        tool_choice="none",
        chat_template_kwargs={"enable_thinking": False},
    ).json()
    prompt = qwen_tokenizer.decode(body["prompt_token_ids"])
    assert "<tools>\n" in prompt and '"name": "add"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    tok = httpx.post(
        f"http://{reference_server}/tokenize",
        json={"messages": MESSAGES, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}},
    )
    assert tok.json()["tokens"] == body["prompt_token_ids"]


def test_chat_top_logprobs_and_token_id_strings(reference_server):
    body = chat(
        reference_server,
        max_tokens=2,
        logprobs=True,
        top_logprobs=3,
        return_token_ids=True,
        return_tokens_as_token_ids=True,
    ).json()
    choice = body["choices"][0]
    for t, entry in zip(choice["token_ids"], choice["logprobs"]["content"], strict=False):
        assert entry["token"] == f"token_id:{t}"
        assert len(entry["top_logprobs"]) == 3


def test_chat_errors(reference_server):
    r = chat(reference_server, messages=[])
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    long_messages = [{"role": "user", "content": "hello " * 5000}]
    r = chat(reference_server, messages=long_messages)
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]


def test_tools_with_auto_choice_need_a_tool_parser_as_in_vllm(reference_server):
    for choice in ({}, {"tool_choice": "auto"}):
        r = chat(reference_server, max_tokens=1, tools=TOOLS, **choice)
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')


def test_a_tool_parser_server_returns_the_calls_as_tool_calls(start_server):
    server = start_server(fake_tokens=3, enable_auto_tool_choice=True, tool_call_parser="hermes")
    from agent_gym.parsers import make_parser
    from agent_gym.reference_server.app import _assistant_message

    message = _assistant_message('Sure. <tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
                                 make_parser("hermes"))
    assert message["content"] == "Sure." and message["tool_calls"][0]["function"] == {
        "name": "add", "arguments": '{"a": 1}'}
    assert message["tool_calls"][0]["type"] == "function"
    r = chat(server, max_tokens=3, tools=TOOLS)  # auto: served; plain text (no call) stays content
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"] == []


def test_a_media_part_is_refused_as_vllm_refuses_it_for_a_text_only_model(reference_server):
    """vLLM answers an image part for a model without a multimodal processor with 400 "<model> is not a multimodal
    model"; text parts are read as text; the answer is the same with or without the part's ``type``."""
    from agent_gym.messages import image_part

    name = httpx.get(f"http://{reference_server}/v1/models", timeout=30).json()["data"][0]["id"]
    text_only = [{"role": "user", "content": [{"type": "text", "text": "What is 2+3?"}]}]
    assert chat(reference_server, messages=text_only, max_tokens=1).status_code == 200
    image = image_part(b"\x89PNG\r\n\x1a\n")
    for part in (image, {"image_url": image["image_url"]}):
        messages = [{"role": "user", "content": [{"type": "text", "text": "What is shown?"}, part]}]
        r = chat(reference_server, messages=messages, max_tokens=1)
        assert r.status_code == 400
        assert r.json() == {"error": {"message": f"{name} is not a multimodal model", "type": "BadRequestError",
                                      "param": None, "code": 400}}
    r = chat(reference_server, messages=[{"role": "user", "content": [{"type": "sparkle", "x": 1}]}], max_tokens=1)
    assert r.status_code == 400 and "multimodal" not in r.json()["error"]["message"]
