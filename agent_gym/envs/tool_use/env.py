"""``ToolUseEnv`` (``agent_gym/ToolUse-v0``): solve small tasks that need tools."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.env.core import AgentEnv
from agent_gym.envs.tool_use.builtin_tools import BUILTIN_TOOLS
from agent_gym.envs.tool_use.tasks import shared_builtin_tasks
from agent_gym.grading import answer_matches
from agent_gym.grading import infer_answer_type as _infer_type

__all__ = ["ToolUseEnv"]

class ToolUseEnv(AgentEnv):
    """Answer questions that need a calculator, unit conversion, date arithmetic or a table lookup.

    ## Description
    480 built-in tasks (see :mod:`agent_gym.envs.tool_use.tasks`) in four families:
    arithmetic, units, dates and lookups in a generated inventory table. Each
    task has a reference solution that ``oracle_action()`` plays turn by turn.
    The tools are stateless functions shared by every episode.

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``): optional ``<think>...</think>``,
    then either one or more ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    blocks or a final ``<answer>...</answer>``.

    ## Observation Space
    The conversation so far: a tuple of ``{"role", "content"}`` dicts (system, user,
    assistant, tool). Tool results (or error messages) come back as ``tool`` messages,
    one per call; a message with neither a call nor an answer gets a ``user`` nudge.

    ## Rewards
    ``res_reward`` = 1.0 for a correct answer (numbers within the task's tolerance,
    compared exactly as the decimals written, so a difference equal to the tolerance is
    inside: see :func:`~agent_gym.grading.numbers_close`; dates and weekdays compared as
    such, strings normalised), else 0.
    ``toolcall_reward`` = +0.1 for a step with a successful, non-repeated call;
    -0.1 per malformed call, unknown tool, invalid arguments, tool error, timeout or
    oversized output; -0.1 for a message with no call and no answer; paid from the
    episode's budget: bonuses up to 0.1 and penalties down to -0.3 per episode, so
    the first useful step earns the whole bonus and more calls earn nothing (see
    :class:`~agent_gym.env.rewards.RewardConfig`; configurable with ``rewards``).
    ``reward`` is their sum; a correct answer always returns more than any episode
    without one.

    ## Starting State
    A task drawn uniformly with the env's seeded RNG (or ``options["task"]``, checked like
    constructor tasks, or ``options["task_index"]``). The observation is the system message
    (tool descriptions appended when ``tools_in_prompt``) and the question as a user message;
    ``info`` has ``task``, ``tools`` (the six schemas; ``[]`` when ``tools_in_prompt``),
    ``tools_in_prompt`` and ``episode_id``.

    ## Episode End
    Terminated with status ENV_DONE when an ``<answer>`` is given. Truncated with
    status MAX_STEPS after ``max_steps`` messages (default 10; the only step limit, so
    ``gym.make("agent_gym/ToolUse-v0", max_steps=20)`` is all it takes for longer episodes),
    TRUNCATION / PROMPT_TRUNCATION / POLICY_ERROR for a ``PolicyOutput`` whose
    ``finish_reason`` is ``length`` / ``prompt_truncation`` / ``error``. The last step's
    ``info`` has ``status`` and ``end_reason``.

    ## Arguments
    * ``tasks``: your own task dicts (``id``, ``question``, ``ground_truth``, and optionally
      ``answer_type``, ``tolerance``, ``solution``); default: the 480 built-in tasks.
    * ``tools``: tools or plain functions; default: calculator, convert_units, date_add,
      date_diff, weekday and lookup_item (``agent_gym.envs.tool_use.BUILTIN_TOOLS``).
    * ``max_steps``, ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser`` (the model's formats by vLLM's names),
      ``tool_time_limit``, ``max_tool_output_chars``, ``max_tool_calls_per_step``,
      ``render_mode``: see :class:`~agent_gym.env.core.AgentEnv`.

    ## Version History
    * v0: one step limit (``max_steps``; the id registers no ``max_episode_steps``) and
      ``info["end_reason"]``; a task given as ``options["task"]`` is checked like constructor
      tasks (``answer_type``, numeric ``ground_truth``) instead of failing to score; first version.

    Example:
        >>> import gymnasium as gym, agent_gym
        >>> env = gym.make("agent_gym/ToolUse-v0", render_mode="ansi")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
    """

    default_system_prompt = (
        "You are a careful assistant that solves tasks with tools. Do not compute, convert or recall facts in "
        "your head: use the tools for every calculation, unit conversion, date computation and inventory lookup. "
        "You may think inside <think>...</think> first. Call tools with <tool_call> blocks; each result comes "
        "back in a tool message. When you have the result, reply with the final answer only, inside "
        "<answer>...</answer>."
    )

    own_calls_block = False
    """The tasks are generated in process and answers graded by comparison: nothing here blocks."""

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Check the common task keys, then each ``answer_type`` and numeric ``ground_truth``."""
        checked = super().validate_tasks(tasks)
        for i, task in enumerate(checked):
            kind = task.get("answer_type")
            if kind is not None and kind not in ("number", "date", "weekday", "string"):
                raise ValueError(f"tasks[{i}]: expected 'answer_type' among number, date, weekday, string, "
                                 f"got {kind!r}")
            if kind == "number" or (kind is None and _infer_type(task["ground_truth"]) == "number"):
                try:
                    float(task["ground_truth"])
                except (TypeError, ValueError):
                    raise ValueError(f"tasks[{i}]: expected a numeric 'ground_truth', "
                                     f"got {task['ground_truth']!r}") from None
        return checked

    def default_tasks(self) -> tuple[dict[str, Any], ...]:
        """The 480 built-in tasks (one shared, read-only tuple, validated once per process)."""
        return shared_builtin_tasks()

    def default_tools(self) -> Sequence[Callable[..., Any]]:
        """The built-in tool functions."""
        return BUILTIN_TOOLS

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """1.0 if the answer matches the ground truth (see :func:`answer_matches`), else 0.0."""
        try:
            tolerance = float(task.get("tolerance", 1e-6))
            return 1.0 if answer_matches(answer, task["ground_truth"], task.get("answer_type"), tolerance) else 0.0
        except (TypeError, ValueError, OverflowError):
            return 0.0
