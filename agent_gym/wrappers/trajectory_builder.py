"""The one builder of :class:`~agent_gym.types.StepTrajectory` records.

Every episode, whatever drives it, is recorded by a :class:`TrajectoryBuilder`:
the :class:`~agent_gym.wrappers.TrajectoryWrapper` (env episodes), the gateway
(client-driven sessions) and the rollout runners (episodes that could not run).
The builder owns what those have in common: the steps, the turns' token ids
(through a :class:`~agent_gym.wrappers.token_assembly.TokenAssembler`, whose
prefix check decides the segments), the sampling record and re-tokenization flag
of the policy's turns, the weight version of every sampled id (and the episode's
oldest and newest), the timings, the metrics and ``mc_return``. The one
``StepTrajectory(...)`` call of the package is in :meth:`TrajectoryBuilder.build`;
a record derived from one (a segment of it, see :func:`agent_gym.segments.split_segments`)
is made with ``dataclasses.replace``, so no field is ever listed twice.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.checks import check_gamma
from agent_gym.types import (
    EpisodeStatus,
    PolicyOutput,
    Segment,
    Step,
    StepTrajectory,
    compute_mc_return,
    default_metrics,
)
from agent_gym.wrappers.token_assembly import TokenAssembler

__all__ = ["TrajectoryBuilder"]


def _relabel(segment: Segment, **lineage: Any) -> Segment:
    """A shallow copy of ``segment`` with other lineage fields (``role``, ``parent_segment``, ...)."""
    out = copy.copy(segment)
    for name, value in lineage.items():
        setattr(out, name, value)
    return out


class TrajectoryBuilder:
    """Collects one episode and builds its ``StepTrajectory``.

    Args:
        rollout_id: The episode's id (``Trajectory.rollout_id``).
        gamma: Discount factor of ``mc_return``, in [0, 1].
        env_id: Id of the env (or agent) that produced the episode.
        task: The task the episode ran on.
        group_id: Shared by the sibling samples of one task.
        idx: Index of the episode in its batch.
        role: The role name of the episode's own agent, put on its segments ("" by default).

    Attributes:
        steps: The steps recorded so far (owners append and update them).
        assembler: The turns' token ids, split into prefix-consistent segments.
        times: Seconds spent in the env (``env_time``), the policy (``llm_time``)
            and reward computation (``reward_time``); owners add to them.
        retokenized: Whether some turn's ids come from re-tokenized text.
        sampling: The first non-empty ``PolicyOutput.sampling`` of the episode.
        role_rewards: Reward per role set by the env (``info["role_rewards"]``), put on
            the ``role_reward`` of the segments of that role that have none.

    Other agents' segments (a subagent's, or another role's) join the episode with
    :meth:`add_child`; they come after the episode's own segments, with their lineage.

    Example:
        >>> from agent_gym.types import PolicyOutput, Step
        >>> builder = TrajectoryBuilder("ep-0", task={"id": "t"})
        >>> out = PolicyOutput(text="hi", prompt_token_ids=[1, 2], token_ids=[3], logprobs=[-0.5],
        ...                    sampling={"logprobs_mode": "raw_logprobs"})
        >>> builder.add_output(0, out)["num_sampled_tokens"]
        1
        >>> builder.steps.append(Step(model_response="hi", reward=1.0, done=True))
        >>> trajectory = builder.build("ENV_DONE", conversation=[{"role": "assistant", "content": "hi"}])
        >>> trajectory.response_tokens.tolist(), trajectory.sampling, trajectory.steps[0].mc_return
        ([3], {'logprobs_mode': 'raw_logprobs'}, 1.0)
    """

    def __init__(
        self,
        rollout_id: str,
        *,
        gamma: float = 1.0,
        env_id: str = "",
        task: Any = None,
        group_id: str = "",
        idx: int = 0,
        role: str = "",
    ) -> None:
        self.rollout_id = rollout_id
        self.role = role
        self.role_rewards: dict[str, float] = {}
        self._children: list[tuple[int, int, list[Segment]]] = []
        self._lineages: dict[str, TokenAssembler] = {}
        self.gamma = check_gamma(gamma)
        self.env_id = env_id
        self.task = task
        self.group_id = group_id
        self.idx = idx
        self.steps: list[Step] = []
        self.assembler = TokenAssembler()
        self.times: dict[str, float] = {"env_time": 0.0, "llm_time": 0.0, "reward_time": 0.0}
        self.retokenized = False
        self.sampling: dict[str, Any] = {}
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        """Seconds since the builder was made (the episode's wall time so far)."""
        return time.perf_counter() - self.start

    def add_output(self, step_index: int, output: PolicyOutput, lineage: str = "") -> dict[str, Any]:
        """Record what a policy turn says about the episode: its time, sampling, flags and ids.

        Args:
            step_index: Index of the step the turn belongs to.
            output: The policy's turn.
            lineage: The agent the turn belongs to, when several agents share the episode (a
                gateway session): each lineage's ids are assembled apart (its prefix check,
                its segments, whose ``role`` is the lineage's name); "" for the episode's own.

        Returns:
            What the step's info keeps about the turn's ids (``finish_reason``,
            ``num_prompt_tokens``, ``num_sampled_tokens``, ``new_segment``,
            ``llm_time``), or {} when the output carries no ids.
        """
        self.times["llm_time"] += float(output.llm_time)
        if output.retokenized:
            self.retokenized = True
        if output.sampling and not self.sampling:
            self.sampling = dict(output.sampling)
        if output.token_ids is None or output.prompt_token_ids is None:
            return {}
        assembler = self._lineages.setdefault(lineage, TokenAssembler()) if lineage else self.assembler
        new_segment = assembler.add_turn(
            step_index, output.prompt_token_ids, output.token_ids, output.logprobs, output.weight_versions
        )
        return {
            "finish_reason": output.finish_reason,
            "num_prompt_tokens": len(output.prompt_token_ids),
            "num_sampled_tokens": len(output.token_ids),
            "new_segment": new_segment,
            "llm_time": output.llm_time,
        }

    def add_ids(self, step_index: int, prompt_ids: Sequence[int], sampled_ids: Sequence[int]) -> dict[str, Any]:
        """Record a turn's ids obtained by re-tokenizing its text (no logprobs; marks the episode retokenized).

        Returns:
            What the step's info keeps about the ids (``num_prompt_tokens``,
            ``num_sampled_tokens``, ``new_segment``).
        """
        self.retokenized = True
        new_segment = self.assembler.add_turn(step_index, prompt_ids, sampled_ids, None)
        return {
            "num_prompt_tokens": len(prompt_ids),
            "num_sampled_tokens": len(sampled_ids),
            "new_segment": new_segment,
        }

    def add_child(self, segments: Sequence[Segment], *, spawn_step: int = -1, spawned: bool = True) -> None:
        """Add another agent's segments (a subagent's sub-episode, another role's turns) to the episode.

        Args:
            segments: The agent's segments, with their own lineage: those whose
                ``parent_segment`` is -1 are the agent's own; the others (its own
                subagents') point into ``segments``.
            spawn_step: The step of this episode during which the agent was spawned (-1: none).
            spawned: Whether the episode's own current segment spawned the agent (a
                subagent); False for a role that takes turns (no parent segment).
        """
        parent = self.assembler.num_segments - 1 if spawned else -1
        self._children.append((parent, spawn_step if spawned else -1, list(segments)))

    def set_role_rewards(self, rewards: Mapping[str, float]) -> None:
        """Record rewards per role (later values replace earlier ones)."""
        self.role_rewards.update({str(role): float(value) for role, value in rewards.items()})

    def segments(self) -> list[Segment]:
        """The episode's segments so far: its own, then each child's with its lineage resolved to episode indices.

        Lineage is set on shallow copies (``_relabel``): the tensors were checked once, when made.
        """
        segments = self.assembler.segments()
        if self.role:
            segments = [_relabel(s, role=self.role) for s in segments]
        agents = 0
        for name, assembler in self._lineages.items():
            agents += 1
            segments += [_relabel(s, role=name, agent_index=agents) for s in assembler.segments()]
        for parent, spawn_step, child in self._children:
            offset = len(segments)
            first_agent = agents + 1
            for segment in child:
                index = first_agent + segment.agent_index  # the child's own agents, then its subagents
                agents = max(agents, index)
                if segment.parent_segment < 0:
                    segments.append(_relabel(segment, parent_segment=parent, spawn_step=spawn_step, agent_index=index))
                else:
                    segments.append(_relabel(segment, parent_segment=segment.parent_segment + offset,
                                             agent_index=index))
        if self.role_rewards:
            segments = [
                _relabel(s, role_reward=self.role_rewards[s.role])
                if s.role_reward is None and s.role in self.role_rewards else s
                for s in segments
            ]
        return segments

    def end(self, error: str | None = None, *, context: Sequence[dict[str, str]] = (), observation: Any = None) -> None:
        """Mark the last step done; with no step yet, add an empty one.

        Args:
            error: Recorded as the last step's ``info["error"]``.
            context: The messages the policy would have seen (the empty step's ``chat_completions``).
            observation: The empty step's observation.
        """
        if not self.steps:
            self.steps.append(Step(chat_completions=[dict(m) for m in context], observation=observation))
        last = self.steps[-1]
        last.done = True
        if error:
            last.info["error"] = error

    def metrics(self) -> dict[str, Any]:
        """The trajectory's metrics: step count, reward sums from the steps' info, times."""
        metrics = default_metrics()
        metrics["steps"] = len(self.steps) or 1
        metrics["toolcall_reward"] = float(sum(float(s.info.get("toolcall_reward", 0.0)) for s in self.steps))
        metrics["res_reward"] = float(sum(float(s.info.get("res_reward", 0.0)) for s in self.steps))
        metrics.update({k: float(v) for k, v in self.times.items()})
        metrics["total_time"] = self.elapsed
        return metrics

    def build(
        self, status: EpisodeStatus | str, *, conversation: Sequence[dict[str, str]], detach: bool = False
    ) -> StepTrajectory:
        """Build the ``StepTrajectory`` of the episode so far.

        ``mc_return`` is filled on the steps; the top-level tensors are the first
        segment's (empty without ids). An episode with no step yet (an open
        session) gets one empty step, not kept by the builder.

        Args:
            status: An ``EpisodeStatus`` (or its value), or ``""`` while the episode is open.
            conversation: The whole conversation (``chat_completions``).
            detach: Give the trajectory copies of the steps, so later updates of the
                builder's steps (an open episode) do not change it.

        Returns:
            The trajectory.
        """
        steps = self.steps or [Step()]
        compute_mc_return(steps, self.gamma)
        segments = self.segments()
        first = segments[0] if segments else Segment([], [], [], [])
        spans = [span for span in (s.version_span() for s in segments) if span[0] >= 0]
        return StepTrajectory(
            prompt_tokens=first.prompt_tokens,
            response_tokens=first.response_tokens,
            response_masks=first.response_masks,
            response_logprobs=first.response_logprobs,
            idx=self.idx,
            trajectory_reward=float(sum(s.reward for s in steps)),
            chat_completions=[dict(m) for m in conversation],
            metrics=self.metrics(),
            rollout_id=self.rollout_id,
            group_id=self.group_id,
            status=EpisodeStatus(status).value if status else "",
            retokenized=self.retokenized,
            env_id=self.env_id,
            sampling=dict(self.sampling),
            task=self.task,
            steps=[Step.from_dict(s.to_dict()) for s in steps] if detach else list(steps),
            segments=segments,
            weight_version_start=min((lo for lo, _ in spans), default=-1),
            weight_version_end=max((hi for _, hi in spans), default=-1),
        )
