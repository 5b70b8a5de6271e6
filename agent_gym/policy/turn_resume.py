"""Continuing a turn the server aborted, and the weight version of each sampled id.

A server paused for a weight update in vLLM's ``abort`` mode (``POST /pause?mode=abort``) ends
every in-flight request with ``finish_reason: "abort"`` and the ids sampled so far. The turn
is not over: :class:`TurnResume` keeps those ids and their logprobs and the policy sends the
request again with the prompt followed by them and ``max_tokens`` (and ``min_tokens``) reduced
by their number, on the session's server, until an answer ends the turn another way. The ids of
every answer are appended as they came, so no id is sampled twice or lost: the turn's ids are
exactly the concatenation of what the server sampled.

Each answer also says which weights sampled it, read from the answer in this order: the
choice's ``weight_versions`` (one per id, the reference server's), the answer's
``weight_version`` (vLLM generate answers of the reference server) or SGLang's
``meta_info.weight_version`` when numeric, else the policy's own counter
(``policy.weight_version``, set by the trainer; -1 when never set).
"""

from __future__ import annotations

from typing import Any

from agent_gym.errors import ServerError
from agent_gym.policy.vllm_protocol import is_context_error, parse_completion_choice

__all__ = ["MAX_EMPTY_ABORTS", "TurnResume", "answer_versions"]

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
        per_id = choice.get("weight_versions")
        if isinstance(per_id, list) and len(per_id) == count:
            parsed = [_as_version(v) for v in per_id]
            if all(v is not None for v in parsed):
                return [int(v) for v in parsed if v is not None]
        meta = data.get("meta_info")
        for value in (data.get("weight_version"), meta.get("weight_version") if isinstance(meta, dict) else None):
            version = _as_version(value)
            if version is not None:
                return [version] * count
    return [default] * count


class TurnResume:
    """The ids, logprobs and versions of one turn across aborted answers.

    Args:
        default_version: The version of ids whose answer names none.
    """

    def __init__(self, default_version: int) -> None:
        self.default_version = default_version
        self.ids: list[int] = []
        self.logprobs: list[float] | None = []
        self.versions: list[int] = []
        self.aborts = 0
        self._empty_aborts = 0

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
        self.aborts += 1
        self._empty_aborts = 0 if token_ids else self._empty_aborts + 1
        if self._empty_aborts > MAX_EMPTY_ABORTS:
            raise ServerError(f"server {server} aborted the turn {self._empty_aborts} times in a row without "
                              "sampling an id", server=server, status=200)
        self._keep(token_ids, logprobs, data)
        return True

    def _keep(self, token_ids: list[int], logprobs: list[float] | None, data: Any) -> None:
        self.ids += token_ids
        if self.logprobs is not None and logprobs is not None and len(logprobs) == len(token_ids):
            self.logprobs += logprobs
        else:
            self.logprobs = None
        self.versions += answer_versions(data, len(token_ids), self.default_version)

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
