"""Images on messages: a chat policy sends them only with ``send_images=True``; text paths never see them."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from chat_bodies import BodyRecorder
from openai_strict_server import StrictOpenAIServer, request_problems

from agent_gym.errors import ServerError
from agent_gym.messages import IMAGES_KEY, image_part, vision_messages
from agent_gym.parsers import make_parser
from agent_gym.policy import ClientOptions, SamplingParams, VLLMChatPolicy
from agent_gym.policy.chat_tokens import ChatTokenBuilder
from agent_gym.policy.openai_chat import openai_messages, openai_request

SHOT = image_part(b"\x89PNG\r\n\x1a\n screenshot")
CALL = '<tool_call>\n{"name": "click", "arguments": {"ref": "e1"}}\n</tool_call>'


def conversation(images_on: tuple[int, ...] = (1, 3)) -> list[dict[str, Any]]:
    """A Web-v0-like conversation: the task's user message, a click, its tool result (images where asked)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Operate the page."},
        {"role": "user", "content": "Task: click the button.\n- button [ref=e1]"},
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "Clicked e1.\n- button [ref=e1]"},
    ]
    for i in images_on:
        messages[i][IMAGES_KEY] = [SHOT]
    return messages


def image_urls(body: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for part in m["content"] if part.get("type") == "image_url"]


def test_the_openai_shape_of_images_is_what_the_openai_types_accept():
    wire = openai_messages(vision_messages(conversation()), make_parser("hermes"))
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool", "user"]
    assert wire[1]["content"] == [{"type": "text", "text": conversation()[1]["content"]}, SHOT]
    assert wire[3]["content"] == conversation()[3]["content"] and wire[4]["content"] == [SHOT]
    assert all(IMAGES_KEY not in m for m in wire)
    body = openai_request(SamplingParams(top_k=-1, max_tokens=4), model="m", messages=wire, max_tokens=4, seed=None,
                          tools=None, tool_choice="none")
    assert request_problems(body) == []
    broken = dict(body, messages=[*wire[:4], {"role": "user", "content": [{"type": "image_url", "image_url": 3}]}])
    assert request_problems(broken) != []  # the check can fail


def test_the_token_path_renders_text_and_keeps_extending_when_older_images_drop(qwen_tokenizer):
    builder = ChatTokenBuilder(qwen_tokenizer)
    text = [{k: v for k, v in m.items() if k != IMAGES_KEY} for m in conversation()]
    first = builder.prepare("s", conversation(images_on=(1,))[:2])
    assert first.prompt_ids == ChatTokenBuilder(qwen_tokenizer).prepare("t", text[:2]).prompt_ids
    sampled = qwen_tokenizer.encode(CALL, add_special_tokens=False) + [builder.eot_token_id]
    builder.commit(first, sampled, CALL)
    plan = builder.prepare("s", conversation(images_on=(3,)))  # the user message's image dropped, the tool's new
    assert plan.incremental and not plan.new_segment


@pytest.mark.parametrize("send_images", [False, True])
def test_a_vllm_chat_request_carries_the_images_only_when_asked(reference_server, send_images):
    policy = VLLMChatPolicy(BodyRecorder([str(reference_server)], options=ClientOptions(max_retries=0)),
                            sampling={"top_k": -1, "max_tokens": 2}, send_images=send_images)
    try:
        if send_images:  # the reference server's model is text-only: refused as vLLM refuses it
            with pytest.raises(ServerError, match="is not a multimodal model"):
                policy.act(conversation(), session_id="s")
        else:
            assert policy.act(conversation(), session_id="s").error is None
    finally:
        policy.close()
    (body, *_) = policy.client.bodies
    assert all(IMAGES_KEY not in m for m in body["messages"])
    if send_images:
        assert image_urls(body) == [SHOT["image_url"]["url"]] * 2
        assert body["messages"][1]["content"][0] == {"type": "text", "text": conversation()[1]["content"]}
    else:
        assert image_urls(body) == [] and all(isinstance(m["content"], str) for m in body["messages"])
    assert pickle_roundtrip(policy).send_images is send_images


def pickle_roundtrip(policy: VLLMChatPolicy) -> VLLMChatPolicy:
    copy = pickle.loads(pickle.dumps(policy))
    copy.close()
    return copy


def test_an_openai_request_carries_the_images_when_asked(reference_server, tiny_model_dir):
    with StrictOpenAIServer(str(reference_server), api_key="k") as endpoint:
        policy = VLLMChatPolicy([endpoint.base_url], sampling={"top_k": -1, "max_tokens": 2}, model=str(tiny_model_dir),
                                api="openai", send_images=True, client_options=ClientOptions(api_key="k",
                                                                                             max_retries=0))
        with pytest.raises(ServerError, match="is not a multimodal model"):
            policy.act(conversation(), session_id="s")
        policy.close()
    assert endpoint.seen.refused == []  # the OpenAI types accept the request; the text-only model refuses it
    (body,) = endpoint.seen.bodies
    assert image_urls(body) == [SHOT["image_url"]["url"]] * 2


def test_send_images_is_a_bool():
    with pytest.raises(TypeError, match="send_images"):
        VLLMChatPolicy(["127.0.0.1:9"], send_images="yes")
