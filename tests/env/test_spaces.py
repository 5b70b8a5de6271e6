from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from agent_gym.env.spaces import AssistantMessageSpace, ConversationSpace, MessageSpace, TextSpace


def test_text_space_contains_any_characters_within_length():
    space = TextSpace(max_length=20)
    assert "héllo <think>\n🙂</think>" not in space  # 22 characters
    assert "héllo <b>\n🙂 中文" in space
    assert "" in space
    assert "x" * 21 not in space
    assert 5 not in space and None not in space and b"abc" not in space


def test_text_space_min_length_and_validation():
    space = TextSpace(max_length=5, min_length=2)
    assert "a" not in space and "ab" in space
    with pytest.raises(ValueError):
        TextSpace(max_length=5, min_length=2, sample_max_length=1)


def test_text_space_sample_is_valid_and_seeded():
    space = TextSpace(seed=3)
    samples = [space.sample() for _ in range(200)]
    assert all(s in space and len(s) <= 64 for s in samples)
    again = TextSpace(seed=3)
    assert samples[:10] == [again.sample() for _ in range(10)]
    masked = space.sample(mask=(4, None))
    assert len(masked) == 4


def test_text_space_equality_pickle_and_repr():
    space = TextSpace(100)
    clone = pickle.loads(pickle.dumps(space))
    assert clone == space and clone != TextSpace(99)
    assert "TextSpace" in repr(space)
    assert not space.is_np_flattenable


def test_message_space():
    space = MessageSpace(seed=0)
    assert {"role": "tool", "content": "ok"} in space
    assert {"role": "user", "content": "hi", "name": "bob"} in space
    assert {"role": "robot", "content": "hi"} not in space
    assert {"role": "user"} not in space
    assert {"role": "user", "content": 3} not in space
    assert ("user", "hi") not in space
    for _ in range(50):
        assert space.sample() in space
    with pytest.raises(ValueError):
        MessageSpace(roles=())
    assert space.seed((1, 2)) == (1, 2)


def test_message_space_images():
    from agent_gym.messages import image_part

    part = image_part(b"\x89PNG")
    space = MessageSpace()
    assert {"role": "user", "content": "page", "images": [part]} in space
    assert {"role": "tool", "content": "", "images": []} in space
    assert ({"role": "system", "content": "s"}, {"role": "tool", "content": "t", "images": [part, part]}) in (
        ConversationSpace())
    for bad in (part, [part["image_url"]], [{"type": "text", "text": "x"}], [{**part, "detail": "low"}],
                [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}], "data:image/png;base64,AA"):
        assert {"role": "user", "content": "page", "images": bad} not in space
    assert {"role": "user", "content": "page", "photos": [part]} not in space  # other keys stay str


def test_conversation_space_tuples_only_and_sampling():
    space = ConversationSpace(seed=1)
    conv = ({"role": "system", "content": "s"}, {"role": "user", "content": "q"})
    assert conv in space
    assert list(conv) not in space
    assert () in space
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20):
            sample = space.sample()
            assert isinstance(sample, tuple) and sample in space
    clone = pickle.loads(pickle.dumps(space))
    assert clone == space
    assert space.from_jsonable(space.to_jsonable([conv])) == [conv]


def test_conversation_space_seeding_is_deterministic():
    a, b = ConversationSpace(), ConversationSpace()
    a.seed(7)
    b.seed(7)
    assert a.sample() == b.sample()
    assert isinstance(np.random.default_rng(0), np.random.Generator)


def test_assistant_message_space_contains_text_and_policy_outputs():
    from agent_gym.types import PolicyOutput

    space = AssistantMessageSpace(max_length=10, seed=0)
    assert "hi" in space and PolicyOutput(text="hi") in space
    assert PolicyOutput(text="x" * 11) not in space and "x" * 11 not in space
    assert 3 not in space and {"text": "hi"} not in space
    assert all(isinstance(s, str) and s in space for s in (space.sample() for _ in range(20)))
    assert space == AssistantMessageSpace(max_length=10) and space != TextSpace(max_length=10)
    assert repr(space) == "AssistantMessageSpace(0, 10)"
    assert pickle.loads(pickle.dumps(space)) == space


def test_env_action_space_contains_what_policies_return():
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the ids)
    from agent_gym.types import PolicyOutput

    env = gym.make("agent_gym/ToolUse-v0")
    assert isinstance(env.action_space, AssistantMessageSpace)
    assert PolicyOutput(text="<answer>4</answer>") in env.action_space
    env.close()
