"""Assemble an episode's exact token sequences from its turns.

Each turn contributes the prompt ids it was sent with and the ids the model
sampled. As long as every turn's prompt extends the previous prompt plus the
sampled ids (the prefix invariant), the turns form one segment: the extra ids
(environment messages, template tokens) go into the response with mask 0 and
the sampled ids with mask 1; each response id carries the weight version it was
sampled under (-1 on environment ids). When the invariant breaks (memory rewrote the
history, the policy re-rendered the conversation), a new segment starts.

This prefix check is the one place that decides segment boundaries: a policy's
``PolicyOutput.new_segment`` and a memory's ``last_view_rewritten`` describe the
same event from their side and are informational only; the ids decide.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.types import Segment

__all__ = ["SegmentBuilder", "TokenAssembler"]

_Ids = array | list
"""A run of ids: packed int64s, or a list of ints where some id does not fit in 64 bits."""


def _ids(values: Sequence[Any]) -> _Ids:
    """``[int(v) for v in values]``, packed as int64s where every value fits (else that list).

    A list or tuple of ints (or of values with ``__index__``, which ``int`` reads the same way)
    is packed in one C loop; anything else (floats, strings, other iterables) goes through
    ``int`` one value at a time, exactly as before.
    """
    if type(values) is list or type(values) is tuple:
        try:
            return array("q", values)
        except (TypeError, OverflowError):
            pass
    ints = [int(v) for v in values]
    try:
        return array("q", ints)
    except OverflowError:  # an id beyond 64 bits: kept as is, refused when the segment is made
        return ints


def _same(a: _Ids, b: _Ids) -> bool:
    """Whether two runs hold the same ids (a packed run and a list compare by value)."""
    return a == b if type(a) is type(b) else list(a) == list(b)


def _record(ids: _Ids) -> Any:
    """What a ``Segment`` field gets: a fresh int64 tensor of a packed run, a list otherwise."""
    if type(ids) is array and ids:
        import torch

        return torch.frombuffer(array("q", ids), dtype=torch.long)  # a copy: the builder's array may grow
    return list(ids)


@dataclass
class SegmentBuilder:
    """A segment under construction (packed ids and a list of logprobs; converted to tensors at the end).

    The id runs (``prompt``, ``response``, ``masks``, ``versions``) are int64 arrays; a run
    that meets an id beyond 64 bits becomes a plain list (the segment then refuses it when
    it is made, as :class:`~agent_gym.types.Segment` refuses such ids).
    """

    prompt: _Ids
    first_step: int
    response: _Ids = field(default_factory=lambda: array("q"))
    masks: _Ids = field(default_factory=lambda: array("q"))
    logprobs: list[float] = field(default_factory=list)
    versions: _Ids = field(default_factory=lambda: array("q"))
    last_step: int = 0

    @property
    def length(self) -> int:
        """Number of ids in the segment so far (prompt and response)."""
        return len(self.prompt) + len(self.response)

    def extends(self, prompt_ids: _Ids) -> bool:
        """Return whether ``prompt_ids`` starts with every id of this segment."""
        n_prompt = len(self.prompt)
        if len(prompt_ids) < self.length:
            return False
        return _same(prompt_ids[:n_prompt], self.prompt) and _same(prompt_ids[n_prompt : self.length], self.response)

    def add(self, ids: _Ids, mask: int, logprobs: list[float], versions: _Ids) -> None:
        """Append ``ids`` to the response with ``mask``, their logprobs and weight versions."""
        if type(ids) is not type(self.response) or type(versions) is not type(self.versions):
            self.response, self.versions = list(self.response), list(self.versions)
            ids, versions = list(ids), list(versions)
        self.response.extend(ids)
        self.masks.extend(array("q", [mask]) * len(ids) if type(self.masks) is array else [mask] * len(ids))
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)

    def freeze(self) -> Segment:
        """Return the finished ``Segment``."""
        return Segment(
            prompt_tokens=_record(self.prompt),
            response_tokens=_record(self.response),
            response_masks=_record(self.masks),
            response_logprobs=list(self.logprobs),
            first_step=self.first_step,
            last_step=self.last_step,
            weight_versions=_record(self.versions),
        )


class TokenAssembler:
    """Collects turns into prefix-consistent segments.

    Example:
        >>> asm = TokenAssembler()
        >>> asm.add_turn(0, [1, 2], [3, 4], [-0.1, -0.2])
        False
        >>> asm.add_turn(1, [1, 2, 3, 4, 5], [6], [-0.3])
        False
        >>> seg = asm.segments()[0]
        >>> seg.response_tokens.tolist(), seg.response_masks.tolist()
        ([3, 4, 5, 6], [1, 1, 0, 1])
    """

    def __init__(self) -> None:
        self._done: list[SegmentBuilder] = []
        self._current: SegmentBuilder | None = None
        self.prefix_breaks = 0

    @property
    def num_segments(self) -> int:
        """Number of segments so far (finished ones and the current one)."""
        return len(self._done) + (self._current is not None)

    @property
    def empty(self) -> bool:
        """Whether no turn has been added."""
        return self._current is None

    def add_turn(
        self,
        step_index: int,
        prompt_ids: Sequence[int],
        sampled_ids: Sequence[int],
        logprobs: Sequence[float] | None = None,
        weight_versions: Sequence[int] | None = None,
    ) -> bool:
        """Add one turn.

        Args:
            step_index: Index of the step this turn belongs to.
            prompt_ids: The full prompt ids the turn was sent with.
            sampled_ids: The ids the model sampled.
            logprobs: One logprob per sampled id, or None (zeros are stored).
            weight_versions: One weight version per sampled id, or None (-1 is stored).

        Returns:
            True when the turn started a new segment after an earlier one: its
            prompt ids do not start with the current segment's prompt and response.

        Raises:
            ValueError: If ``logprobs`` or ``weight_versions`` does not have one value per sampled id.
        """
        prompt = _ids(prompt_ids)
        sampled = _ids(sampled_ids)
        if logprobs is None:
            values = [0.0] * len(sampled)
        else:
            values = [float(v) for v in logprobs]
            if len(values) != len(sampled):
                raise ValueError(f"logprobs: expected {len(sampled)} values, got {len(values)}")
        versions = array("q", [-1]) * len(sampled) if weight_versions is None else _ids(weight_versions)
        if len(versions) != len(sampled):
            raise ValueError(f"weight_versions: expected {len(sampled)} values, got {len(versions)}")
        started_new = False
        current = self._current
        if current is None or not current.extends(prompt):
            if current is not None:
                self._done.append(current)
                started_new = True
                self.prefix_breaks += 1
            current = self._current = SegmentBuilder(prompt=prompt, first_step=step_index)
        else:
            suffix = prompt[current.length :]
            current.add(suffix, 0, [0.0] * len(suffix), array("q", [-1]) * len(suffix))
        current.add(sampled, 1, values, versions)
        current.last_step = step_index
        return started_new

    def segments(self) -> list[Segment]:
        """Return every segment, finished ones and the current one."""
        builders = self._done + ([self._current] if self._current is not None else [])
        return [b.freeze() for b in builders]
