r"""Images carried by chat messages beside their text, and the content-part form a vision endpoint takes.

A message of an agent_gym conversation has a ``str`` ``content``. An env may attach images to
it in an optional extra key, ``images``: a list of OpenAI ``image_url`` content parts
(``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``), e.g. the
screenshot of Web-v0 with ``screenshots="observation"``. Everything that reads text (chat
templates and token ids, memory, parsers, ``Trajectory.chat_completions``, exporters) reads
``content`` alone and never sees the images; a text-only model is never sent them.

A policy that talks to a vision model sends :func:`vision_messages` of the conversation: each
message with images becomes the OpenAI content-part form (``[{"type": "text", "text": ...},
{"type": "image_url", ...}]``). :func:`text_messages` drops the key for a text endpoint.

Example:
    >>> part = image_part(b"\x89PNG...")
    >>> msg = {"role": "user", "content": "The page:", "images": [part]}
    >>> [p["type"] for p in content_parts(msg)]
    ['text', 'image_url']
    >>> text_messages([msg])
    [{'role': 'user', 'content': 'The page:'}]
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "IMAGES_KEY",
    "attach_images",
    "check_image_part",
    "content_parts",
    "image_part",
    "is_image_part",
    "message_images",
    "text_messages",
    "vision_messages",
    "without_images",
]

IMAGES_KEY = "images"
"""The message key that holds its image content parts."""

_URL_SCHEMES = ("data:image/", "https://", "http://")


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    """An image as an OpenAI ``image_url`` content part (a base64 ``data:`` URL).

    Args:
        data: The encoded image (e.g. PNG bytes).
        mime: Its media type (``image/png``, ``image/jpeg``, ...).

    Raises:
        TypeError: ``data`` is not bytes.
        ValueError: ``mime`` is not an ``image/`` type.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    if not isinstance(mime, str) or not mime.startswith("image/") or len(mime) <= len("image/"):
        raise ValueError(f"mime: expected an image media type such as 'image/png', got {mime!r}")
    url = f"data:{mime};base64,{base64.b64encode(bytes(data)).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}


def check_image_part(part: Any) -> None:
    """Raise unless ``part`` is an OpenAI ``image_url`` content part.

    That is a dict ``{"type": "image_url", "image_url": {"url": URL}}`` (an optional ``detail``
    str beside ``url``) whose URL is a ``data:image/...`` URL or an http(s) address.

    Raises:
        TypeError: ``part`` or its fields have the wrong type.
        ValueError: The type is not ``image_url`` or the URL is not an image address.
    """
    if not isinstance(part, Mapping):
        raise TypeError(f"image part: expected a dict, got {type(part).__name__}")
    if part.get("type") != "image_url":
        raise ValueError(f"image part: expected type 'image_url', got {part.get('type')!r}")
    if set(part) != {"type", "image_url"}:
        raise ValueError(f"image part: expected the keys type and image_url, got {sorted(map(str, part))}")
    inner = part["image_url"]
    if not isinstance(inner, Mapping) or not isinstance(inner.get("url"), str):
        raise TypeError(f"image part: expected image_url {{'url': str}}, got {inner!r:.80}")
    if not set(inner) <= {"url", "detail"} or not isinstance(inner.get("detail", ""), str):
        raise ValueError(f"image part: image_url takes url and an optional str detail, got {sorted(map(str, inner))}")
    if not inner["url"].startswith(_URL_SCHEMES):
        raise ValueError(f"image part: expected a data:image/ or http(s) URL, got {inner['url']!r:.40}")


def is_image_part(part: Any) -> bool:
    """Whether ``part`` is a well-formed ``image_url`` content part (see :func:`check_image_part`)."""
    try:
        check_image_part(part)
    except (TypeError, ValueError):
        return False
    return True


def message_images(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The image parts a message carries (``[]`` without any).

    Raises:
        TypeError: ``images`` is not a list, or one of its items is not an image part.
        ValueError: An item is a malformed image part.
    """
    images = message.get(IMAGES_KEY)
    if images is None:
        return []
    if not isinstance(images, list):
        raise TypeError(f"{IMAGES_KEY}: expected a list of image_url parts, got {type(images).__name__}")
    for part in images:
        check_image_part(part)
    return images


def content_parts(message: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    """A message's content as a vision endpoint takes it.

    The ``content`` str when the message has no images, else the OpenAI content-part list:
    the text part (left out when the text is empty) followed by the image parts.
    """
    return _with_text(message, message_images(message))


def _with_text(message: Mapping[str, Any], images: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """:func:`content_parts` of ``message`` with its images already checked."""
    text = message.get("content")
    text = "" if text is None else str(text)
    if not images:
        return text
    head = [{"type": "text", "text": text}] if text else []
    return [*head, *_copies(images)]


def _copies(images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of image parts (their ``image_url`` dicts too), so what is sent never aliases the env's."""
    return [dict(part, image_url=dict(part["image_url"])) for part in images]


def text_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` without their images (every other key kept): what a text endpoint is sent."""
    return [{k: v for k, v in m.items() if k != IMAGES_KEY} for m in messages]


def without_images(messages: Any) -> Any:
    """``messages`` without the ``images`` of any message: the same object when none has any, else a new list.

    Anything that is not a list of dicts is returned as it is (its own checks report it).
    """
    if isinstance(messages, list) and any(isinstance(m, dict) and IMAGES_KEY in m for m in messages):
        return [{k: v for k, v in m.items() if k != IMAGES_KEY} if isinstance(m, dict) else m for m in messages]
    return messages


def vision_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with its images as OpenAI content parts, for a vision endpoint.

    A ``user`` message with images gets the content-part list of :func:`content_parts`. Other
    roles (``system``, ``tool`` results, assistant turns) keep their text: the OpenAI API takes
    image parts in user messages only, so their images follow in one ``user`` message placed
    after the run of ``tool`` messages they belong to (after the message itself for the other
    roles), which keeps each assistant turn's tool results together. Messages
    without images are copied unchanged; the ``images`` key is never sent.

    Raises:
        TypeError, ValueError: A message's ``images`` is malformed (see :func:`message_images`).
    """
    out: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []  # images of tool results, sent after their run of tool messages

    def flush() -> None:
        if waiting:
            out.append({"role": "user", "content": _copies(waiting)})
            waiting.clear()

    for message in messages:
        role = message.get("role")
        if role != "tool":
            flush()
        item = {k: v for k, v in message.items() if k != IMAGES_KEY}
        images = message_images(message)
        if images and role == "user":
            item["content"] = _with_text(message, images)
        elif images:
            waiting.extend(images)
        out.append(item)
        if role != "tool":
            flush()
    flush()
    return out


def attach_images(view: Sequence[Mapping[str, Any]], conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``view`` with the images of the ``conversation`` messages it ends with.

    ``view`` is a text view of ``conversation`` (role/content messages: the whole conversation,
    or a memory's prompt view whose last messages are the conversation's last ones, unchanged).
    Walking back from both ends while role and content agree, each ``view`` message gets the
    images of its ``conversation`` message; the first difference (a summary, elided thinking)
    ends the walk. Messages without images are copied as they are.
    """
    out = [dict(m) for m in view]
    i, j = len(out) - 1, len(conversation) - 1
    while i >= 0 and j >= 0:
        source = conversation[j]
        if out[i].get("role") != source.get("role") or out[i].get("content") != source.get("content"):
            break
        images = source.get(IMAGES_KEY)
        if images:
            out[i][IMAGES_KEY] = list(images)
        i, j = i - 1, j - 1
    return out
