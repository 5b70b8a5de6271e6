"""agent_gym.messages: image parts beside a message's text, and the content-part form a vision endpoint takes."""

from __future__ import annotations

import base64

import pytest

from agent_gym.messages import (
    IMAGES_KEY,
    attach_images,
    check_image_part,
    content_parts,
    image_part,
    is_image_part,
    message_images,
    text_messages,
    vision_messages,
)

PART = image_part(b"\x89PNG\r\n\x1a\n")
OTHER = image_part(b"\xff\xd8\xff", "image/jpeg")


def test_image_part_is_a_data_url_part():
    assert PART["type"] == "image_url" and PART["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(PART["image_url"]["url"].split(",", 1)[1]) == b"\x89PNG\r\n\x1a\n"
    assert OTHER["image_url"]["url"].startswith("data:image/jpeg;base64,")
    with pytest.raises(TypeError, match="expected bytes"):
        image_part("not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="image media type"):
        image_part(b"x", "text/plain")


@pytest.mark.parametrize("part", [
    PART,
    {"type": "image_url", "image_url": {"url": "https://example.org/a.png", "detail": "low"}},
])
def test_well_formed_parts(part):
    check_image_part(part)
    assert is_image_part(part)


@pytest.mark.parametrize(("part", "error"), [
    ("data:image/png;base64,AA", TypeError),
    ({"type": "text", "text": "hi"}, ValueError),
    ({"type": "image_url"}, ValueError),
    ({"type": "image_url", "image_url": "https://example.org/a.png"}, TypeError),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, ValueError),
    ({"type": "image_url", "image_url": {"url": "data:text/html,hi"}}, ValueError),
    ({"type": "image_url", "image_url": {"url": "https://x", "size": 3}}, ValueError),
    ({"type": "image_url", "image_url": {"url": "https://x"}, "extra": 1}, ValueError),
])
def test_malformed_parts(part, error):
    with pytest.raises(error):
        check_image_part(part)
    assert not is_image_part(part)


def test_content_parts_and_text_messages():
    message = {"role": "user", "content": "The page:", IMAGES_KEY: [PART, OTHER]}
    assert content_parts(message) == [{"type": "text", "text": "The page:"}, PART, OTHER]
    assert content_parts({"role": "user", "content": "", IMAGES_KEY: [PART]}) == [PART]
    assert content_parts({"role": "user", "content": "plain"}) == "plain"
    assert message_images({"role": "user", "content": "x"}) == []
    with pytest.raises(TypeError, match="images"):
        message_images({"role": "user", "content": "x", IMAGES_KEY: PART})
    assert text_messages([message, {"role": "tool", "content": "t", "name": "n"}]) == [
        {"role": "user", "content": "The page:"}, {"role": "tool", "content": "t", "name": "n"}]
    assert IMAGES_KEY in message  # nothing given is changed


def test_vision_messages_put_images_where_the_openai_api_takes_them():
    conversation = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U", IMAGES_KEY: [PART]},
        {"role": "assistant", "content": "two calls"},
        {"role": "tool", "content": "r1", IMAGES_KEY: [OTHER]},
        {"role": "tool", "content": "r2", IMAGES_KEY: [PART]},
        {"role": "assistant", "content": "A"},
    ]
    wire = vision_messages(conversation)
    assert wire == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "U"}, PART]},
        {"role": "assistant", "content": "two calls"},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
        {"role": "user", "content": [OTHER, PART]},  # after the turn's results, never between them
        {"role": "assistant", "content": "A"},
    ]
    wire[1]["content"][1]["image_url"]["url"] = "changed"
    assert PART["image_url"]["url"].startswith("data:")  # the parts sent are copies
    assert vision_messages([{"role": "user", "content": "x"}]) == [{"role": "user", "content": "x"}]
    assert vision_messages([{"role": "system", "content": "S", IMAGES_KEY: [PART]}]) == [
        {"role": "system", "content": "S"}, {"role": "user", "content": [PART]}]  # never on a system message
    with pytest.raises(ValueError):
        vision_messages([{"role": "user", "content": "x", IMAGES_KEY: [{"type": "text", "text": "no"}]}])


def test_attach_images_follows_the_messages_the_view_ends_with():
    conversation = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U", IMAGES_KEY: [PART]},
        {"role": "assistant", "content": "A"},
        {"role": "tool", "content": "T", IMAGES_KEY: [OTHER]},
    ]
    full = attach_images(text_messages(conversation), conversation)
    assert full == conversation and full is not conversation
    summarized = [{"role": "system", "content": "S + summary"}, {"role": "user", "content": "U"},
                  {"role": "assistant", "content": "A"}, {"role": "tool", "content": "T"}]
    out = attach_images(summarized, conversation)
    assert [IMAGES_KEY in m for m in out] == [False, True, False, True]
    elided = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
              {"role": "assistant", "content": "<think>omitted</think>A"}, {"role": "tool", "content": "T"}]
    assert [IMAGES_KEY in m for m in attach_images(elided, conversation)] == [False, False, False, True]
    assert all(IMAGES_KEY not in m for m in elided)
