"""Real episodes with every kind of infrastructure failure, for the training-contract tests.

The episodes run through ``collect`` with the library's own token-exact policy (``VerlServerPolicy``,
whose turns a server manager samples) and a ToolUse env; faults are injected where they happen in
production:

* in the inference server (:class:`OracleServer`): down before the first turn, lost mid-episode, a turn
  that never returns (the episode's timeout), a request the server aborts;
* in the env (:class:`FaultyToolUse`): the env raising in a step, the tool runner failing while it runs
  the calls, the grader unable to grade (the episode ends ``ENV_ERROR`` as Terminal-v0's does when its
  test runner cannot run), the env unable to start.

A judge that scores the episodes after they ran (:func:`agent_gym.judges.judge_trajectories` with an
LLM judge, :class:`judge_faults.ScriptedJudge`) fails for one of them: down, timed out or answering
unparseably; the episode ends ``JUDGE_ERROR``.

A healthy server plays the task's reference solution (the env's oracle), so the episodes are
deterministic; a "wrong" server plays it but answers wrongly (reward variance within a group).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from judge_faults import ScriptedJudge

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.tool_use import ToolUseEnv
from agent_gym.errors import SandboxError
from agent_gym.integrations.verl import VerlServerPolicy
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric, judge_trajectories
from agent_gym.memory import MemoryConfig, MemorySummary
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus

ENV_ID = "conformance/FaultyToolUse-v0"
SERVER_FAULTS = ("down", "lost", "slow", "abort", "wrong")
ENV_FAULTS = ("env_error", "tool_runner", "grader", "reset")


class FaultyToolUse(ToolUseEnv):
    """ToolUse-v0 with one injected fault (``fault=None`` behaves as ToolUse-v0).

    Args:
        fault: ``"env_error"`` (``step`` raises from step ``at``), ``"tool_runner"`` (the runner fails
            running the calls of step ``at`` or later), ``"grader"`` (the answer cannot be graded: the
            episode ends ``ENV_ERROR``), ``"reset"`` (the env cannot start) or None.
        at: The step (0-based) an ``env_error`` or ``tool_runner`` fault starts at.
        only: The ids of the tasks the fault applies to (None: all).
        **kwargs: ToolUse-v0's arguments.
    """

    def __init__(self, fault: str | None = None, at: int = 1, only: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if fault is not None and fault not in ENV_FAULTS:
            raise ValueError(f"fault: expected one of {ENV_FAULTS} or None, got {fault!r}")
        self.only = None if only is None else {str(i) for i in only}
        self.configured = fault
        self.fault = fault
        self.at = at
        self._grading_failed = False
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._grading_failed = False
        self._steps = 0
        observation, info = super().reset(seed=seed, options=options)
        chosen = self.only is None or str(info["task"].get("id")) in self.only
        self.fault = self.configured if chosen else None
        if self.fault == "reset" and options is not None:
            raise SandboxError("the sandbox could not start: its image is gone")
        return observation, info

    def step(self, action: Any) -> Any:
        self._steps += 1
        if self.fault == "env_error" and self._steps > self.at:
            raise RuntimeError("the env's state store went away")
        observation, reward, terminated, truncated, info = super().step(action)
        if self._grading_failed and (terminated or truncated):
            info["status"] = EpisodeStatus.ENV_ERROR
            info["end_reason"] = "judge_unavailable"
            info["error"] = "the judge could not grade the answer (unavailable)"
            terminated, truncated = False, True
        return observation, reward, terminated, truncated, info

    def run_tool_calls(self, parsed: Any, info: dict[str, Any]) -> None:
        if self.fault == "tool_runner" and parsed.tool_calls and self._steps > self.at:
            raise SandboxError("the tool runner's processes are gone")
        super().run_tool_calls(parsed, info)

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        if self.fault == "grader":
            self._grading_failed = True
            return 0.0
        return super().score_answer(task, answer)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=FaultyToolUse)


@dataclasses.dataclass
class Output:
    """What verl's server manager returns (``TokenOutput``'s fields)."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str = "completed"


def oracle_turns(tasks: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``question -> [assistant text of each turn]`` of each task's reference solution."""
    env = gym.make("agent_gym/ToolUse-v0")
    turns: dict[str, list[str]] = {}
    try:
        for task in tasks:
            env.reset(options={"task": dict(task)})
            texts, done = [], False
            while not done:
                texts.append(env.unwrapped.oracle_action())
                _, _, terminated, truncated, _ = env.step(texts[-1])
                done = terminated or truncated
            turns[str(task["question"])] = texts
    finally:
        env.close()
    return turns


class OracleServer:
    """A server manager (verl's ``generate(request_id, *, prompt_ids, sampling_params)``) playing the oracle.

    Each session's turn ``k`` is the oracle's turn ``k`` of the task whose question the prompt holds,
    tokenized, with the end-of-turn id; a fault changes that.

    Args:
        tokenizer: The model's tokenizer.
        turns: :func:`oracle_turns`.
        fault: ``"down"`` (every request fails), ``"lost"`` (requests fail from turn ``at``), ``"slow"``
            (turn ``at`` never returns), ``"abort"`` (turn ``at`` is aborted after a few ids), ``"wrong"``
            (the answer is wrong) or None.
        at: The turn (0-based) a ``lost``, ``slow`` or ``abort`` fault starts at.
        only: The questions a ``down`` fault applies to (None: all).
    """

    def __init__(self, tokenizer: Any, turns: Mapping[str, list[str]], fault: str | None = None, at: int = 1,
                 only: set[str] | None = None) -> None:
        if fault is not None and fault not in SERVER_FAULTS:
            raise ValueError(f"fault: expected one of {SERVER_FAULTS} or None, got {fault!r}")
        self.tokenizer = tokenizer
        self.turns = dict(turns)
        self.fault = fault
        self.at = at
        self.only = only
        self.eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls: dict[str, int] = {}
        self.questions: dict[str, str] = {}  # the session's question (a summary may drop it from later prompts)

    def _text(self, request_id: str, prompt_ids: Sequence[int], turn: int) -> str:
        if request_id not in self.questions:
            prompt = self.tokenizer.decode(list(prompt_ids))
            found = [q for q in self.turns if q in prompt]
            assert found, "no known question in the first prompt"
            self.questions[request_id] = found[0]
        texts = self.turns[self.questions[request_id]]
        text = texts[min(turn, len(texts) - 1)]
        if self.fault == "wrong" and text.startswith("<answer>"):
            return "<answer>0</answer>"
        return text

    async def generate(self, request_id: str, *, prompt_ids: Sequence[int], sampling_params: Mapping[str, Any],
                       **kwargs: Any) -> Output:
        turn = self.calls.get(request_id, 0)
        self.calls[request_id] = turn + 1
        if self.fault == "lost" and turn >= self.at:
            raise ConnectionError("connection refused: the inference server is down")
        if self.fault == "slow" and turn >= self.at:
            await asyncio.sleep(3600)
        text = self._text(request_id, prompt_ids, turn)
        faulty = self.only is None or self.questions[request_id] in self.only
        if self.fault == "down" and faulty:
            raise ConnectionError("connection refused: the inference server is down")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.eot]
        ids = ids[: int(sampling_params["max_tokens"])]
        if self.fault == "abort" and turn >= self.at:
            return Output(ids[:3], [-0.5] * 3, "aborted")
        return Output(ids, [-0.25 - 0.001 * i for i in range(len(ids))])


def summary_memory() -> MemorySummary:
    """A memory that summarizes before every turn past the first (each episode fans out into segments)."""
    config = MemoryConfig(use_summary=True, max_prompt_length=160, max_summary_length=8, before_raw_message=1,
                          end_raw_message=-1, summary_system_prompt="Summarize in {max_summary_length} tokens.")
    return MemorySummary(config, chat_client=lambda messages, *, max_tokens: "notes so far")


def run(tokenizer: Any, turns: Mapping[str, list[str]], task: Mapping[str, Any], *, samples: int = 1,
        server_fault: str | None = None, at: int = 1, env_fault: str | None = None, seed: int = 0,
        **options: Any) -> list[Any]:
    """``samples`` episodes of ``task`` with the given faults (``collect``, the policy on an :class:`OracleServer`)."""
    server = OracleServer(tokenizer, turns, server_fault, at)
    policy = VerlServerPolicy(server, tokenizer, {"temperature": 1.0}, max_response_length=2048, max_model_len=8192)
    try:
        return collect(ENV_ID, policy, tasks=[dict(task)], samples_per_task=samples, max_steps=5, seed=seed,
                       env_kwargs={"fault": env_fault, "at": at} if env_fault else None, progress=False,
                       **options)
    finally:
        policy.close()


@dataclasses.dataclass
class Episode:
    """One episode of the batch: its failure kind ("" for a healthy one) and the trajectory."""

    kind: str
    trajectory: Any

    @property
    def failed(self) -> bool:
        return bool(self.kind)


FAILURE_KINDS = ("server_down", "server_lost", "env_error", "tool_runner", "timeout", "grader", "server_abort",
                 "judge", "lost_after_fanout")
"""Every failure kind of :func:`build_batch`, in batch order."""


def build_batch(tokenizer: Any, tasks: Sequence[Mapping[str, Any]]) -> list[list[Episode]]:
    """Groups of three episodes of one task each: one per failure kind, in :data:`FAILURE_KINDS` order.

    The first group is three episodes whose server was down before their first turn; each other
    group is one failed episode, one that solved the task and one that answered wrongly (its
    reward differs). The last group's episodes fan out into several segments (memory summaries),
    the failed one losing its server after two segments.

    Args:
        tokenizer: The tokenizer the policy renders with.
        tasks: Nine ToolUse tasks, the last with a three-turn solution.
    """
    turns = oracle_turns(tasks)
    plans: list[tuple[str, dict[str, Any]]] = [
        ("server_down", {"server_fault": "down"}),
        ("server_lost", {"server_fault": "lost"}),
        ("env_error", {"env_fault": "env_error"}),
        ("tool_runner", {"env_fault": "tool_runner"}),
        ("timeout", {"server_fault": "slow", "episode_timeout": 1.0}),
        ("grader", {"env_fault": "grader"}),
        ("server_abort", {"server_fault": "abort"}),
        ("judge", {}),
        ("lost_after_fanout", {"server_fault": "lost", "at": 2, "memory": summary_memory}),
    ]
    groups = []
    for g, ((kind, fault), task) in enumerate(zip(plans, tasks, strict=True)):
        extra = {"memory": fault["memory"]} if "memory" in fault else {}
        if kind == "server_down":
            failed = run(tokenizer, turns, task, samples=3, seed=100 * g, **fault)
            groups.append([Episode(kind, t) for t in failed])
            continue
        (failed,) = run(tokenizer, turns, task, seed=100 * g, **fault)
        (solved,) = run(tokenizer, turns, task, seed=100 * g + 1, **extra)
        (wrong,) = run(tokenizer, turns, task, seed=100 * g + 2, server_fault="wrong", **extra)
        if kind == "judge":  # the judge fails for one episode (every request: down, timeout or malformed)
            judge_trajectories([failed], Rubric([JudgeCriterion("correct", LLMJudge(ScriptedJudge(fault_rate=1.0)))]))
            judge_trajectories([solved, wrong], Rubric([JudgeCriterion("correct", LLMJudge(ScriptedJudge()))]))
        groups.append([Episode(kind, failed), Episode("", solved), Episode("", wrong)])
    return groups
