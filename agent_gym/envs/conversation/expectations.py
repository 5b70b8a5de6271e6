"""Turns whose right move is to ask the user or to refuse: what they expect of the reply, and its check.

A turn of a conversation task may carry ``expect``, the behaviour the turn wants instead of
(or besides) tool calls::

    {"content": "Please delete my draft in the docs folder.",
     "expect": {"kind": "clarify",
                "slot": "which of the two drafts to delete",       # the missing detail
                "terms": ["draft", "which one", "which file"],     # the question names one of them
                "reply": "There are two drafts ... which one should I delete?"}}

    {"content": "Cancel order O-3, please.",
     "expect": {"kind": "refuse",
                "reason": "O-3 has shipped; only pending orders can be cancelled",
                "terms": ["shipped", "pending"],                   # the refusal states the reason
                "reply": "Sorry, I can't cancel O-3: it has already shipped ..."}}

The reply that ends the turn (the assistant message without tool calls, its ``<think>`` part
removed) meets the expectation when:

* ``clarify``: it asks a question (it contains ``?``) that mentions at least one of ``terms``;
* ``refuse``: it refuses (it contains one of :data:`REFUSAL_MARKERS`) and mentions at least
  one of ``terms``.

Text is compared after :func:`~agent_gym.grading.normalize_text` (case, punctuation and
spacing ignored); a term or marker matches where a word starts, so ``"overlap"`` also
matches ``"overlapping"``. The env adds the state rule: the world state at the end of the
turn must equal its state at the start (see :class:`~agent_gym.envs.conversation.env.ConversationEnv`).
``reply`` is the oracle's reply; when absent it is ``"Could you tell me <slot>?"`` or
``"Sorry, I can't do that: <reason>."``, and :func:`check_expectation` rejects an
expectation that its own reply does not meet. The check is lexical: it tells asking and
refusing from doing nothing, not a relevant question from a keyword list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.grading import normalize_text

__all__ = ["EXPECTATION_KINDS", "REFUSAL_MARKERS", "check_expectation", "reply_problem"]

EXPECTATION_KINDS = ("clarify", "refuse")
"""The kinds of ``expect``: ask the user for a missing detail, or refuse the request."""

REFUSAL_MARKERS: tuple[str, ...] = (
    "can't", "cannot", "can not", "couldn't", "could not", "unable", "not able", "not possible", "impossible",
    "isn't possible", "not allowed", "not permitted", "won't", "will not", "not something i can", "sorry",
    "unfortunately", "afraid", "refuse", "decline",
)
"""Phrases of which a refusal contains at least one (matched on normalised text)."""

_DETAIL_KEY = {"clarify": "slot", "refuse": "reason"}
_QUESTION_MARKS = ("?", "\uff1f")
_MARKERS = tuple(normalize_text(m) for m in REFUSAL_MARKERS)


def _mentions(text: str, phrase: str) -> bool:
    """Whether normalised ``phrase`` occurs in normalised ``text`` where a word starts."""
    return f" {phrase}" in f" {text}"


def _first_mentioned(text: str, phrases: Sequence[str]) -> str | None:
    normalised = normalize_text(text)
    return next((p for p in phrases if _mentions(normalised, normalize_text(p))), None)


def reply_problem(expectation: Mapping[str, Any], reply: str) -> str | None:
    """Why ``reply`` does not meet a checked expectation, or None when it does.

    Args:
        expectation: An expectation as :func:`check_expectation` returns it.
        reply: The assistant's reply that ended the turn ("" when the turn ended without one).

    Returns:
        One readable line (e.g. ``"the reply asks no question"``), or None. Never raises on model text.
    """
    kind, terms = expectation["kind"], expectation["terms"]
    if not reply.strip():
        return f"the turn ended without a reply; it should {'ask' if kind == 'clarify' else 'refuse'}"
    if kind == "clarify":
        if not any(mark in reply for mark in _QUESTION_MARKS):
            return f"the reply asks no question; it should ask {expectation['slot']}"
        if _first_mentioned(reply, terms) is None:
            return f"the question mentions none of {terms}; it should ask {expectation['slot']}"
        return None
    if _first_mentioned(reply, _MARKERS) is None:
        return f"the reply does not refuse; it should refuse because {expectation['reason']}"
    if _first_mentioned(reply, terms) is None:
        return f"the refusal mentions none of {terms}; its reason is that {expectation['reason']}"
    return None


def check_expectation(value: Any) -> dict[str, Any]:
    """Check a turn's ``expect`` and return it normalised (a new dict with ``reply`` filled in).

    Args:
        value: The ``expect`` value of a turn.

    Returns:
        ``{"kind", "slot" | "reason", "terms", "reply"}``.

    Raises:
        ValueError: Saying what is wrong (the caller names the task and field).
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a dict with 'kind', got {value!r:.80}")
    kind = value.get("kind")
    if kind not in _DETAIL_KEY:
        raise ValueError(f"'kind': expected one of {list(EXPECTATION_KINDS)}, got {kind!r}")
    detail_key = _DETAIL_KEY[kind]
    allowed = {"kind", detail_key, "terms", "reply"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"expected keys among {sorted(allowed)} for kind {kind!r}, got unknown {unknown}")
    detail = value.get(detail_key)
    if not isinstance(detail, str) or not detail.strip():
        what = "the missing detail" if kind == "clarify" else "why the request is refused"
        raise ValueError(f"{detail_key!r}: expected a non-empty str ({what}), got {detail!r:.80}")
    terms = value.get("terms")
    if (not isinstance(terms, list) or not terms
            or not all(isinstance(t, str) and normalize_text(t) for t in terms)):
        raise ValueError(f"'terms': expected a non-empty list of words or phrases (each with a letter or digit), "
                         f"got {terms!r:.80}")
    reply = value.get("reply")
    if reply is None:
        reply = f"Could you tell me {detail}?" if kind == "clarify" else f"Sorry, I can't do that: {detail}."
    elif not isinstance(reply, str):
        raise ValueError(f"'reply': expected a str (the oracle's reply), got {type(reply).__name__}")
    checked = {"kind": kind, detail_key: detail, "terms": list(terms), "reply": reply}
    problem = reply_problem(checked, reply)
    if problem is not None:
        raise ValueError(f"the oracle's reply {reply!r:.120} does not meet the expectation ({problem}); "
                         "write a 'reply' that does")
    return checked
