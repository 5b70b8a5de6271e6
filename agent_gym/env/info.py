"""The keys of the ``info`` dicts that ``reset`` and ``step`` return, declared in one place.

:class:`StepInfo` names every key an env of this package may put into the ``info`` of ``reset``
or ``step``: :class:`~agent_gym.env.core.AgentEnv`'s own, those of the built-in envs
(:mod:`agent_gym.envs`) and of the multi-agent wrappers (:mod:`agent_gym.subagents`). Each env
sets a subset; no key is set by every step. :data:`INFO_KEYS` is the set of the names. A new key
is declared here first, with one line saying what it holds and who sets it (the tests check
that every key the registered envs return is declared).

Keys that the recording and rollout layers add on top (``trajectory``, ``memory``,
``policy_tools``, ``long_tail``) belong to those layers and are not env keys.
"""

from __future__ import annotations

from typing import Any, TypedDict

from agent_gym.types import EpisodeStatus

__all__ = ["INFO_KEYS", "StepInfo"]


class StepInfo(TypedDict, total=False):
    """The ``info`` of ``reset`` and ``step`` of an agent_gym env (every key optional)."""

    # AgentEnv: reset
    task: dict[str, Any]
    """reset: a copy of the episode's task."""
    tools: list[dict[str, Any]]
    """reset, and a step that changed the episode's tools: their schemas (``[]`` when ``tools_in_prompt``)."""
    tools_in_prompt: bool
    """reset: whether the system message describes the tools (then ``tools`` is ``[]``)."""
    episode_id: str
    """reset: the episode's id, ``"<task id>-<8 hex digits>"``."""

    # AgentEnv: step
    toolcall_reward: float
    """Every step: the step's tool-use shaping, paid from the episode's budget."""
    res_reward: float
    """Every step: the step's outcome reward (the answer's or the end grade's score times ``rewards.correct``)."""
    tool_calls: list[dict[str, Any]]
    """Every step: one record per call, ``{"name", "arguments", "ok", "error", "kind", "output"}``."""
    error: str
    """A step with error observations (malformed or failed calls, no action): the errors joined with ``"; "``."""
    error_kinds: list[str]
    """With ``error``: the :class:`~agent_gym.errors.ToolErrorKind` value of each joined error."""
    parse_errors: list[str]
    """A message with malformed tool-call blocks: the parser's description of each."""
    status: EpisodeStatus
    """The last step: how the episode ended."""
    end_reason: str
    """The last step: why (``"answer"``, ``"max_steps"``, ``"policy_length"``, ``"submit"``, ...)."""

    # Rubric grading (agent_gym.judges: judged envs, and judge_trajectories on recorded episodes)
    rubric: dict[str, Any]
    """The last step of a judged episode: each criterion's score, the outcome, the shaping, the failure (kind and
    error, None when every criterion scored) and the judge's usage (calls, cache hits, tokens, seconds)."""

    # RAG-v0
    em: float
    """RAG, the answering step: exact match of the answer against the gold answers."""
    f1: float
    """RAG, the answering step: token F1 of the answer against the gold answers."""
    retrieved_ids: list[str]
    """RAG, reset and every step: the ids of the documents the searches returned so far."""
    gold_retrieved: bool | None
    """RAG, reset and every step: whether every gold document was retrieved (None: the task names none)."""

    # Conversation-v0
    turn: int
    """Conversation, reset and every step: the user turn the step belongs to."""
    num_turns: int
    """Conversation, reset and every step: the scripted user turns of the task."""
    turn_ended: bool
    """Conversation: the step ended a user turn (a reply without a tool call, or a hand-over)."""
    turn_score: float
    """Conversation, a scored turn: 1.0 when the state, the outputs and the expectation all matched, else 0.0."""
    turn_passed: bool
    """Conversation, a scored turn: ``turn_score == 1.0``."""
    state_diff: list[str]
    """Conversation, a scored turn: how the state differs from the reference solution's."""
    missing_outputs: list[str]
    """Conversation, a scored turn: expected strings missing from the assistant's replies."""
    expectation: str | None
    """Conversation, a scored turn: the kind of the turn's extra expectation (None: none)."""
    expectation_problems: list[str]
    """Conversation, a scored turn: how the turn missed its expectation."""
    turn_scores: list[float]
    """Conversation, the last step: the score of each scored turn."""
    success: bool
    """Conversation, the last step: every expected turn was scored and passed."""

    # Terminal-v0 and SWE-v0
    tests: dict[str, Any]
    """Terminal, the last step: the test run (``outcome``, ``passed``, ``total``, ``resolved``, ...)."""
    swe: dict[str, Any]
    """SWE, the last step: the grading of the patch (test results, ``patch_bytes``, ...)."""

    # Web-v0
    web: dict[str, Any]
    """The page's ``raw_reward`` and ``page_reason``, a site's ``site_score``, ``answer``, ``blocked_requests`` and
    ``browser_error`` (last step; set by Web-v0)."""
    screenshot: dict[str, Any]
    """The viewport as an OpenAI ``image_url`` content part (reset and every step, with ``screenshots=True`` or
    ``"info"``; Web-v0; with ``"observation"`` it rides on the observation's newest message instead)."""

    # Multi-agent wrappers (agent_gym.subagents)
    agent_segments: list[dict[str, Any]]
    """Subagents (a step) and solver/judge (reset): the segments of the other agents run meanwhile."""
    subagents: list[dict[str, Any]]
    """Subagents: one record per subagent the step ran."""
    solver_scores: list[float]
    """Solver/judge, reset: whether each solver's candidate was correct (1.0 or 0.0)."""
    role_rewards: dict[str, float]
    """Solver/judge, the last step: the reward of each role."""

    # OpenEnv (a remote env's own keys come with it)
    openenv_url: str
    """OpenEnv, reset: the address of the remote env."""
    metadata: dict[str, Any]
    """OpenEnv, a step whose observation has no ``info``: the observation's ``metadata``."""


INFO_KEYS: frozenset[str] = frozenset(StepInfo.__annotations__)
"""The name of every key of :class:`StepInfo`."""
