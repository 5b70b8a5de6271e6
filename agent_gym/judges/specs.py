"""Rubrics named on a command line: an env's rule grader, an LLM judge at an address, or a factory to import.

Used by ``agent-gym serve-reward`` and ``agent-gym judge-check``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.judges.llm import LLMJudge
from agent_gym.judges.rubric import JudgedEpisode, Rubric, RuleCriterion

__all__ = ["EMBEDDED", "default_judge", "env_rule", "import_rubric", "rule_grader"]

EMBEDDED = "embedded"
"""The judge spec naming the embedded model, judged in-process by its verdict probabilities."""


def rule_grader(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """``(env, grade)``: a registered env (unwrapped) and ``grade(task, answer) -> score`` by its ``score_answer``.

    Raises:
        ConfigError: ``env_id`` is not a registered agent_gym env.
    """
    import gymnasium as gym

    from agent_gym import AgentEnv
    from agent_gym.envs import register_envs

    register_envs()
    if env_id not in gym.registry:
        raise ConfigError(f"env: expected a registered env id, got {env_id!r}")
    env = gym.make(env_id, **dict(env_kwargs or {})).unwrapped
    if not isinstance(env, AgentEnv):
        env.close()
        raise ConfigError(f"env: {env_id} is not an AgentEnv (its grader is not known)")

    def grade(task: Mapping[str, Any], answer: str) -> float:
        return float(env.score_answer(dict(task), answer))

    return env, grade


def env_rule(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, name: str = "rule",
             weight: float = 1.0) -> tuple[Any, RuleCriterion]:
    """``(env, criterion)``: a rubric criterion scoring the final answer with ``env_id``'s rule grader."""
    env, grade = rule_grader(env_id, env_kwargs)

    def rule(episode: JudgedEpisode) -> float:
        try:
            return grade(episode.task, episode.answer)
        except (KeyError, TypeError, ValueError):  # a task the grader cannot read scores nothing
            return 0.0

    return env, RuleCriterion(name, rule, weight)


def import_rubric(spec: str) -> Rubric:
    """The rubric made by ``"package.module:factory"`` (a callable returning a :class:`Rubric`, or a Rubric).

    Raises:
        ConfigError: The spec does not name one.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"rubric: expected 'package.module:factory', got {spec!r}")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"rubric: cannot import {spec!r}: {exc}") from exc
    rubric = value() if callable(value) and not isinstance(value, Rubric) else value
    if not isinstance(rubric, Rubric):
        raise ConfigError(f"rubric: {spec!r} gave {type(rubric).__name__}, expected a Rubric")
    return rubric


def default_judge(servers: Sequence[str] | str, *, tokenizer: Any = None, model: str | None = None,
                  max_tokens: int = 256, timeout: float = 60.0, max_retries: int = 2) -> Any:
    """An :class:`LLMJudge` at ``servers``; a tokenizer given as a path is loaded (token-exact calls).

    ``servers`` = ``"embedded"`` (alone) gives the embedded model's in-process
    :class:`~agent_gym.judges.probability.ProbabilityJudge` instead (offline, no server; the other
    arguments do not apply to it).
    """
    names = [servers] if isinstance(servers, str) else list(servers)
    if names == [EMBEDDED]:
        from agent_gym.judges.probability import embedded_judge

        return embedded_judge()
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    return LLMJudge.from_server(servers, tokenizer=tokenizer, model=model, max_tokens=max_tokens, timeout=timeout,
                                max_retries=max_retries)
