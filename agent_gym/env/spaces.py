"""Gymnasium spaces for chat agents: free text actions and conversation observations.

Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings made of its
charset, which rejects almost every real model response (punctuation, newlines,
non-Latin scripts, emoji). :class:`TextSpace` keeps ``Text``'s interface but
contains *any* ``str`` within its length bounds; its charset is only used to
sample. :class:`AssistantMessageSpace` is the action space of every agent_gym
environment: the next assistant message, as a ``str`` or as the
:class:`~agent_gym.types.PolicyOutput` a policy returns. :class:`MessageSpace`
holds one ``{"role", "content"}`` message and :class:`ConversationSpace` a tuple
of them (the observation of every agent_gym environment). All of them pass
``gymnasium.utils.env_checker.check_env`` with warnings as errors, pickle, and
sample valid elements.

Example:
    >>> space = TextSpace(max_length=4096)
    >>> "héllo, <think>wörld</think>" in space
    True
    >>> from agent_gym.types import PolicyOutput
    >>> PolicyOutput(text="hi") in AssistantMessageSpace()
    True
    >>> obs_space = ConversationSpace()
    >>> ({"role": "user", "content": "hi"},) in obs_space
    True
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Sequence as SequenceSpace
from gymnasium.spaces import Space, Text

from agent_gym.messages import IMAGES_KEY, is_image_part
from agent_gym.types import PolicyOutput

__all__ = [
    "DEFAULT_ROLES",
    "MAX_TEXT_LENGTH",
    "SAMPLE_CHARSET",
    "AssistantMessageSpace",
    "ConversationSpace",
    "MessageSpace",
    "TextSpace",
]

MAX_TEXT_LENGTH: int = 1 << 24
"""Default upper bound (characters) of a text element: large enough for any real message."""

DEFAULT_ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
"""Roles a message of an agent_gym conversation may have."""

SAMPLE_CHARSET: str = (
    string.ascii_letters + string.digits + string.punctuation + " \n\t" + "éüßøçñ€中文日本語한국어Ωπ✓🙂"
)
"""Characters :meth:`TextSpace.sample` draws from (``contains`` accepts any character)."""


class TextSpace(Text):
    """A ``Text`` space whose elements are any ``str`` within the length bounds.

    ``contains`` accepts every character; the charset only drives ``sample``.
    Sampled strings have at most ``sample_max_length`` characters so that
    ``sample()`` stays cheap even when ``max_length`` is huge.

    Args:
        max_length: Largest accepted length in characters.
        min_length: Smallest accepted length in characters.
        charset: Characters ``sample`` draws from.
        sample_max_length: Longest string ``sample`` produces (capped by ``max_length``).
        seed: Seed of the sampling generator.

    Raises:
        ValueError: If the bounds are inconsistent (from ``Text``) or
            ``sample_max_length < min_length``.
    """

    def __init__(
        self,
        max_length: int = MAX_TEXT_LENGTH,
        *,
        min_length: int = 0,
        charset: str | frozenset[str] = SAMPLE_CHARSET,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)
        if not isinstance(sample_max_length, int) or sample_max_length < self.min_length:
            raise ValueError(
                f"sample_max_length: expected an int >= min_length ({self.min_length}), got {sample_max_length!r}"
            )
        self.sample_max_length = min(int(sample_max_length), self.max_length)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Draw a random string of ``min_length`` to ``sample_max_length`` characters.

        Args:
            mask: As for :meth:`gymnasium.spaces.Text.sample`; a ``None`` length is
                replaced by a random length up to ``sample_max_length``.
            probability: As for :meth:`gymnasium.spaces.Text.sample`.

        Returns:
            A string contained in the space.
        """
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
            return super().sample(mask=(length, None))
        if mask is not None and mask[0] is None:
            mask = (int(self.np_random.integers(self.min_length, self.sample_max_length + 1)), mask[1])
        if probability is not None and probability[0] is None:
            probability = (int(self.np_random.integers(self.min_length, self.sample_max_length + 1)), probability[1])
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        """Return True if ``x`` is a ``str`` whose length is within the bounds."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """False: arbitrary characters have no fixed index to flatten to."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, TextSpace)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]


class AssistantMessageSpace(TextSpace):
    """The action space of agent_gym envs: the next assistant message, as text or as a policy's output.

    Contains every ``str`` within the length bounds (as :class:`TextSpace`) and every
    :class:`~agent_gym.types.PolicyOutput` whose ``text`` is within them, since
    ``env.step`` accepts both. ``sample`` draws plain strings.

    Args:
        max_length: Largest accepted length in characters.
        min_length: Smallest accepted length in characters.
        charset: Characters ``sample`` draws from.
        sample_max_length: Longest string ``sample`` produces (capped by ``max_length``).
        seed: Seed of the sampling generator.

    Example:
        >>> space = AssistantMessageSpace()
        >>> "<answer>4</answer>" in space and PolicyOutput(text="<answer>4</answer>") in space
        True
    """

    def contains(self, x: Any) -> bool:
        """Return True if ``x`` is a ``str`` or a ``PolicyOutput`` whose text is within the bounds."""
        if isinstance(x, PolicyOutput):
            x = x.text
        return super().contains(x)


class MessageSpace(Space[dict]):
    """One chat message: a dict with a ``role`` from ``roles`` and a ``content`` string.

    Extra keys (e.g. ``name`` or ``tool_call_id``) are allowed when their values are strings;
    ``images``, when present, is a list of OpenAI ``image_url`` content parts (see
    :mod:`agent_gym.messages`).

    Args:
        roles: The allowed roles.
        max_content_length: Largest accepted ``content`` length in characters.
        seed: Seed of the sampling generator.

    Raises:
        ValueError: If ``roles`` is empty or holds a non-string.
    """

    def __init__(
        self,
        roles: Sequence[str] = DEFAULT_ROLES,
        *,
        max_content_length: int = MAX_TEXT_LENGTH,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        roles = tuple(roles)
        if not roles or not all(isinstance(r, str) and r for r in roles):
            raise ValueError(f"roles: expected a non-empty sequence of non-empty str, got {roles!r}")
        self.roles: tuple[str, ...] = roles
        self._role_set = frozenset(roles)
        self.content_space = TextSpace(max_content_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    def seed(self, seed: int | tuple[int, int] | None = None) -> tuple[int, int]:
        """Seed the role generator and the content space.

        Args:
            seed: None (random), an int (both derived from it) or a pair (role, content).

        Returns:
            The seeds used for the role generator and the content space.
        """
        if isinstance(seed, (tuple, list)):
            if len(seed) != 2:
                raise ValueError(f"seed: expected a pair of ints, got {seed!r}")
            return int(super().seed(seed[0])), int(self.content_space.seed(seed[1]))
        own = int(super().seed(seed))
        content_seed = int(self.np_random.integers(np.iinfo(np.int32).max))
        return own, int(self.content_space.seed(content_seed))

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, str]:
        """Draw a message with a random role and random content.

        Args:
            mask: Unsupported; must be None.
            probability: Unsupported; must be None.

        Returns:
            A ``{"role", "content"}`` dict contained in the space.
        """
        if mask is not None or probability is not None:
            raise ValueError("MessageSpace.sample: mask and probability are not supported")
        role = self.roles[int(self.np_random.integers(len(self.roles)))]
        return {"role": role, "content": self.content_space.sample()}

    def contains(self, x: Any) -> bool:
        """Return True if ``x`` is a message dict with a known role, string content and well-formed images."""
        if not isinstance(x, dict) or x.get("role") not in self._role_set:
            return False
        if not self.content_space.contains(x.get("content")):
            return False
        for key, value in x.items():
            if key == IMAGES_KEY:
                if not isinstance(value, list) or not all(is_image_part(part) for part in value):
                    return False
            elif not (isinstance(key, str) and isinstance(value, str)):
                return False
        return True

    @property
    def is_np_flattenable(self) -> bool:
        """False: messages have no fixed-size array form."""
        return False

    def to_jsonable(self, sample_n: Iterable[dict[str, str]]) -> list[dict[str, str]]:
        """Convert a batch of messages to JSON-ready dicts."""
        return [dict(m) for m in sample_n]

    def from_jsonable(self, sample_n: Iterable[dict[str, str]]) -> list[dict[str, str]]:
        """Convert JSON dicts back to messages."""
        return [dict(m) for m in sample_n]

    def __repr__(self) -> str:
        return f"MessageSpace(roles={self.roles})"

    def __eq__(self, other: object, /) -> bool:
        return (
            isinstance(other, MessageSpace)
            and self.roles == other.roles
            and self.content_space == other.content_space
        )

    __hash__ = None  # type: ignore[assignment]


class ConversationSpace(SequenceSpace):
    """A conversation: a tuple of messages of a :class:`MessageSpace` (never stacked).

    Args:
        roles: The allowed message roles.
        max_content_length: Largest accepted ``content`` length in characters.
        seed: Seed of the sampling generators.
    """

    def __init__(
        self,
        roles: Sequence[str] = DEFAULT_ROLES,
        *,
        max_content_length: int = MAX_TEXT_LENGTH,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(MessageSpace(roles, max_content_length=max_content_length), seed=seed, stack=False)

    def from_jsonable(self, sample_n: list[list[Any]]) -> list[tuple[Any, ...]]:
        """Convert JSON lists of message dicts back to conversation tuples."""
        return [tuple(dict(m) for m in sample) for sample in sample_n]

    def __repr__(self) -> str:
        return f"ConversationSpace(roles={self.feature_space.roles})"  # type: ignore[attr-defined]
