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

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent_gym.types import Segment

__all__ = ["SegmentBuilder", "TokenAssembler"]


@dataclass
class SegmentBuilder:
    """A segment under construction (plain lists; converted to tensors at the end)."""

    prompt: list[int]
    first_step: int
    response: list[int] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    last_step: int = 0

    @property
    def length(self) -> int:
        """Number of ids in the segment so far (prompt and response)."""
        return len(self.prompt) + len(self.response)

    def extends(self, prompt_ids: Sequence[int]) -> bool:
        """Return whether ``prompt_ids`` starts with every id of this segment."""
        n_prompt = len(self.prompt)
        if len(prompt_ids) < self.length:
            return False
        return list(prompt_ids[:n_prompt]) == self.prompt and list(prompt_ids[n_prompt : self.length]) == self.response

    def freeze(self) -> Segment:
        """Return the finished ``Segment``."""
        return Segment(
            prompt_tokens=list(self.prompt),
            response_tokens=list(self.response),
            response_masks=list(self.masks),
            response_logprobs=list(self.logprobs),
            first_step=self.first_step,
            last_step=self.last_step,
            weight_versions=list(self.versions),
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
        prompt_ids = [int(t) for t in prompt_ids]
        sampled = [int(t) for t in sampled_ids]
        if logprobs is None:
            values = [0.0] * len(sampled)
        else:
            values = [float(v) for v in logprobs]
            if len(values) != len(sampled):
                raise ValueError(f"logprobs: expected {len(sampled)} values, got {len(values)}")
        versions = [-1] * len(sampled) if weight_versions is None else [int(v) for v in weight_versions]
        if len(versions) != len(sampled):
            raise ValueError(f"weight_versions: expected {len(sampled)} values, got {len(versions)}")
        started_new = False
        current = self._current
        if current is None or not current.extends(prompt_ids):
            if current is not None:
                self._done.append(current)
                started_new = True
                self.prefix_breaks += 1
            current = self._current = SegmentBuilder(prompt=prompt_ids, first_step=step_index)
        else:
            suffix = prompt_ids[current.length :]
            current.response.extend(suffix)
            current.masks.extend([0] * len(suffix))
            current.logprobs.extend([0.0] * len(suffix))
            current.versions.extend([-1] * len(suffix))
        current.response.extend(sampled)
        current.masks.extend([1] * len(sampled))
        current.logprobs.extend(values)
        current.versions.extend(versions)
        current.last_step = step_index
        return started_new

    def segments(self) -> list[Segment]:
        """Return every segment, finished ones and the current one."""
        builders = self._done + ([self._current] if self._current is not None else [])
        return [b.freeze() for b in builders]
