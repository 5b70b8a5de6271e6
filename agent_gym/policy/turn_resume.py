"""Continuing a turn the server aborted, and the weight version of each sampled id.

A server paused for a weight update in vLLM's ``abort`` mode (``POST /pause?mode=abort``) ends
every in-flight request with ``finish_reason: "abort"`` and the ids sampled so far. The turn
is not over: :class:`TurnResume` keeps those ids and their logprobs and the policy sends the
request again with the prompt followed by them and ``max_tokens`` (and ``min_tokens``) reduced
by their number, on the session's server, until an answer ends the turn another way. The ids of
every answer are appended as they came, so no id is sampled twice or lost: the turn's ids are
exactly the concatenation of what the server sampled. A streamed turn continues the same way:
:class:`ContinuedText` keeps its text deltas seamless across the abort, and ends them on the
turn's final text.

Each answer may say which weights sampled it, read from the answer in this order: the
choice's ``weight_versions`` (vLLM's ``/inference/v1/generate`` spans ``[{"version", "start",
"end"}]``, labels set with ``POST /update_weight_version``), the answer's ``weight_version`` or
SGLang's ``meta_info.weight_version`` when numeric, else the policy's own counter
(``policy.weight_version``, set by the trainer or :meth:`RolloutStream.update_weights`; -1 when
never set). vLLM's ``/v1/completions`` and chat answers name no version: their ids get the counter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_gym.errors import ServerError
from agent_gym.policy.vllm_protocol import is_context_error, parse_completion_choice

__all__ = ["MAX_EMPTY_ABORTS", "ContinuedText", "TurnResume", "answer_versions", "choice_versions"]

MAX_EMPTY_ABORTS = 50
"""Aborted answers in a row without a new id after which the turn fails (a server that aborts everything)."""


def _as_version(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def choice_versions(choice: Any, count: int, default: int | None = None) -> list[int] | None:
    """The choice's own ``weight_versions`` as one version per id, when they cover ``count`` ids, else None.

    Two shapes are read: vLLM's spans ``[{"version", "start", "end"}]`` over the output ids (the
    ``/inference/v1/generate`` answers; a label that is not an int, such as vLLM's initial
    ``"default"``, becomes ``default``, or makes the spans unusable without one) and one int per id.
    """
    per_id = choice.get("weight_versions") if isinstance(choice, dict) else None
    if not isinstance(per_id, list):
        return None
    if per_id and all(isinstance(span, dict) for span in per_id):
        out: list[int] = []
        for span in per_id:
            version = _as_version(span.get("version"))
            version = default if version is None else version
            start, end = span.get("start"), span.get("end")
            if version is None or not isinstance(start, int) or not isinstance(end, int) or start != len(out):
                return None
            out += [version] * max(end - start, 0)
        return out if len(out) == count else None
    if len(per_id) == count:
        parsed = [_as_version(v) for v in per_id]
        if all(v is not None for v in parsed):
            return [int(v) for v in parsed if v is not None]
    return None


def answer_versions(data: Any, count: int, default: int) -> list[int]:
    """The weight version of each of the ``count`` ids of an answer (see the module docs).

    Args:
        data: The answer's JSON body.
        count: How many ids the answer's first choice holds.
        default: The version to use when the answer names none.
    """
    if isinstance(data, dict):
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        per_id = choice_versions(choice, count, default)
        if per_id is not None:
            return per_id
        meta = data.get("meta_info")
        for value in (data.get("weight_version"), meta.get("weight_version") if isinstance(meta, dict) else None):
            version = _as_version(value)
            if version is not None:
                return [version] * count
    return [default] * count


class TurnResume:
    """The ids, logprobs and versions of one turn across aborted answers.

    Args:
        default_version: The version of ids whose answer names none, or a callable giving it (read
            as each answer arrives: the policy's counter, which a weight update moves before it
            resumes the servers, so an aborted answer keeps the old version and its continuation
            gets the new one).
    """

    def __init__(self, default_version: int | Callable[[], int]) -> None:
        self._default = default_version
        self.ids: list[int] = []
        self.logprobs: list[float] | None = []
        self.versions: list[int] = []
        self.aborts = 0
        self._empty_aborts = 0

    @property
    def default_version(self) -> int:
        """The version of ids whose answer names none, now."""
        return int(self._default() if callable(self._default) else self._default)

    def extend_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """Continue ``body`` (a ``/v1/completions`` body) after the ids kept so far: prompt, budget, seed."""
        if not self.ids:
            return body
        body["prompt"] = list(body["prompt"]) + self.ids
        body["max_tokens"] = max(int(body["max_tokens"]) - len(self.ids), 0)
        if body.get("min_tokens"):
            body["min_tokens"] = max(int(body["min_tokens"]) - len(self.ids), 0)
        if body.get("seed") is not None:  # a new draw sequence for the rest of the turn
            body["seed"] = int(body["seed"]) + len(self.ids)
        return body

    def absorb(self, choice: dict[str, Any], data: Any, server: str) -> bool:
        """Keep an aborted answer's ids; True when the turn must be sent again.

        Raises:
            ServerError: The server keeps aborting without sampling anything.
        """
        if choice.get("finish_reason") != "abort" or is_context_error(str(choice.get("abort_message") or "")):
            return False
        token_ids, logprobs = parse_completion_choice(choice)
        if token_ids is None:  # ids are needed to continue exactly
            return False
        self.keep(token_ids, logprobs, answer_versions(data, len(token_ids), self.default_version), server)
        return True

    def keep(self, token_ids: list[int], logprobs: list[float] | None, versions: list[int], server: str) -> None:
        """Keep the ids, logprobs and versions of an aborted answer (the turn goes on after them).

        Raises:
            ServerError: The server keeps aborting without sampling anything.
        """
        self.aborts += 1
        self._empty_aborts = 0 if token_ids else self._empty_aborts + 1
        if self._empty_aborts > MAX_EMPTY_ABORTS:
            raise ServerError(f"server {server} aborted the turn {self._empty_aborts} times in a row without "
                              "sampling an id", server=server, status=200)
        self.ids += token_ids
        if self.logprobs is not None and logprobs is not None and len(logprobs) == len(token_ids):
            self.logprobs += logprobs
        else:
            self.logprobs = None
        self.versions += versions

    def whole(
        self, token_ids: list[int], logprobs: list[float] | None, versions: list[int]
    ) -> tuple[list[int], list[float] | None, list[int]]:
        """The turn's ids, logprobs (None unless every answer had them) and versions: the kept ones, then these."""
        if self.logprobs is None or logprobs is None or len(logprobs) != len(token_ids):
            return self.ids + token_ids, None, self.versions + versions
        return self.ids + token_ids, self.logprobs + logprobs, self.versions + versions

    def merged(self, choice: dict[str, Any], data: Any) -> tuple[dict[str, Any], list[int] | None]:
        """The final answer's choice with the kept ids in front, and every id's version.

        Returns:
            ``(choice, versions)``; versions is None when the final answer has no ids.
        """
        token_ids, logprobs = parse_completion_choice(choice)
        if token_ids is None:
            return choice, None
        versions = self.versions + answer_versions(data, len(token_ids), self.default_version)
        if not self.ids:
            return choice, versions
        whole = dict(choice)
        whole["token_ids"] = self.ids + token_ids
        if self.logprobs is not None and logprobs is not None:
            whole["logprobs"] = {"token_logprobs": self.logprobs + logprobs}
        else:
            whole.pop("logprobs", None)
        return whole, versions

    def budget_spent(self, body_max_tokens: int) -> bool:
        """Whether the kept ids used the whole budget (the turn ends with ``length``)."""
        return len(self.ids) >= body_max_tokens


class ContinuedText:
    """The text deltas of a streamed turn, decoded from its ids once an answer was aborted.

    The last delta is cut from the turn's final text (:meth:`finish`), so the deltas
    concatenate to it: the stop id's text that a server streams with
    ``include_stop_str_in_output`` is not passed on, as vLLM leaves it out of its own text.

    Until an abort the server's text deltas are passed on (and noted with :meth:`sent_text`).
    The text that ends an aborted answer may stop inside a character, and the continued answer's
    text starts without the kept ids, so from the abort on the deltas are cut from the decoding of
    every id of the turn: they go on from what was sent, an incomplete character waits for its
    next id, and the deltas concatenate to the decoding of the turn's ids.

    Args:
        tokenizer: Decodes the ids (special tokens kept, as the server's text in token mode).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.sent = ""

    def sent_text(self, text: str) -> str:
        """Note a server delta passed on unchanged; returns it."""
        self.sent += text
        return text

    def finish(self, text: str) -> str | None:
        """The last delta of a turn whose text is ``text``; None when ``text`` does not extend what was sent."""
        if not text.startswith(self.sent):
            return None
        delta = text[len(self.sent):]
        self.sent = text
        return delta

    def delta(self, token_ids: list[int], *, final: bool = False) -> str:
        """The text to send now for the turn's ids so far (``final``: no later id will complete a character)."""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        if not text.startswith(self.sent):  # the decoding of earlier ids changed: wait for the end
            return ""
        end = len(text)
        while not final and end > len(self.sent) and text[end - 1] == "\ufffd":
            end -= 1
        delta = text[len(self.sent):end]
        self.sent += delta
        return delta
