"""An agent_gym env as a TRL ``environment_factory``: its tools as methods, for TRL's own tool loop.

``GRPOTrainer(environment_factory=cls)`` builds instances of ``cls``, calls ``reset(**row)`` before
each rollout and exposes every public method but ``reset`` and ``get_reward`` as a tool (its schema
from the type hints and Google docstring), and ``get_reward()`` becomes a reward function.
:func:`environment_factory` builds that class for a registered env id:

* one method per tool of the env (:attr:`~agent_gym.AgentEnv.tool_schemas`), with the parameters,
  types and descriptions of the tool's schema; a call steps the env with that one tool call (so
  it is checked, run, limited and rewarded exactly as in an agent_gym episode) and returns the
  tool message's content;
* ``answer(answer)``: gives the final answer (the env scores it as an ``<answer>`` message) and ends
  the episode;
* ``reset(**row)``: starts an episode on the row's task (``task``: the task dict or its JSON, or
  ``task_id``: the id of one of the env's tasks);
* ``get_reward()``: the episode's return so far (tool-call shaping plus the answer's score).

:func:`environment_dataset` writes the matching rows: ``prompt`` (the env's system and user messages
for the task, the system message told to answer with the ``answer`` tool) and ``task``.

**Which envs it fits.** Envs whose only replies are tool results, so that TRL's loop (generate,
run the tool calls, repeat until a message has none) is the episode, and whose episodes all offer
the same tools (TRL fixes the tool list when the trainer is built; the class takes the tools of one
episode): ToolUse-v0, RAG-v0 and Terminal-v0 (``bash`` and ``submit``; its sandbox starts at each
``reset``). It does not fit Conversation-v0 (a simulated user answers messages without tool calls,
which end TRL's loop) nor envs whose tools change from episode to episode or during one. Each tool
call is one env step (TRL may put several calls in one message; the env would count them as one
step), so ``max_steps`` bounds the calls.

**Failures.** An env that raises (at ``reset`` for a reason other than a rejected task, or in a
step: a tool runner, a server, the grader) or that ends the episode with an infrastructure status
(``ENV_ERROR``, ``TIMEOUT``) ends the episode as masked (:attr:`AgentEnvironment.masked`):
``get_reward()`` is None, so TRL leaves it out of its group's baseline with advantage 0. TRL itself
cannot mask the row's ids; build the trainer with :func:`masking_trainer` (``masking_trainer(GRPOTrainer)``)
so none of them reaches the loss.

TRL parses the model's tool calls with the tokenizer's ``response_template``; for a tokenizer TRL
does not recognise (agent_gym's embedded tiny agent among them) set it first, e.g.
``tokenizer.response_template = trl.chat_template_utils.qwen3_template`` for the Hermes
``<tool_call>`` format. This route re-tokenizes tool results the way TRL does; for agent_gym's
token-exact samples use :func:`agent_gym.integrations.trl.rollout_func`.
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Optional, Union

from agent_gym.errors import ConfigError, MissingExtraError
from agent_gym.integrations.contract import INFRA_FAILURE_STATUSES
from agent_gym.types import EpisodeStatus

__all__ = ["ANSWER_INSTRUCTION", "AgentEnvironment", "environment_dataset", "environment_factory", "masking_trainer"]

ANSWER_INSTRUCTION = (
    "Give the final answer by calling the answer tool (its argument is the answer only) instead of writing "
    "<answer>...</answer>."
)
"""Appended to the env's system message by :func:`environment_dataset`."""

_RESERVED = ("reset", "get_reward", "answer")
_JSON_TYPES: dict[str, Any] = {"string": str, "number": float, "integer": int, "boolean": bool,
                               "array": list, "object": dict, "null": type(None)}
_RETURNS = re.compile(r"\n*\s*Returns:\s*(.*)\Z", re.DOTALL)


def environment_factory(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    tasks: Sequence[Mapping[str, Any]] | None = None,
) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` driving ``env_id`` (see the module doc).

    Args:
        env_id: A registered env id (``"agent_gym/ToolUse-v0"``).
        env_kwargs: Extra ``gym.make`` keyword arguments.
        max_steps: The env's step limit (each tool call and the answer is a step).
        tasks: The env's tasks (``gym.make(..., tasks=...)``); rows may name them by ``task_id``.

    Returns:
        A subclass of :class:`AgentEnvironment`; each instance owns one env.

    Raises:
        ConfigError: ``env_id`` is not registered, or a tool's name or parameter cannot be a method.
    """
    import gymnasium as gym

    kwargs = dict(env_kwargs or {})
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if tasks is not None:
        kwargs["tasks"] = [dict(t) for t in tasks]
    try:
        probe = gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(f"env_id: {env_id!r} is not a registered env ({exc})") from None
    try:
        # the tools of an episode (an env may give each episode its own, e.g. a sandbox's bash): one reset shows them
        probe.reset(seed=0)
        unwrapped: Any = probe.unwrapped
        schemas = unwrapped.tool_schemas
    finally:
        probe.close()
    namespace: dict[str, Any] = {
        "__doc__": f"The tools of {env_id} for TRL's environment_factory (one env per instance).",
        "env_id": env_id,
        "env_kwargs": kwargs,
    }
    for schema in schemas:
        function = schema.get("function", schema)
        name = str(function.get("name", ""))
        taken = name in _RESERVED or hasattr(AgentEnvironment, name) or name in namespace
        if taken or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            raise ConfigError(f"tools: {env_id}'s tool {name!r} cannot be a method of the environment class")
        namespace[name] = _tool_method(name, function)
    class_name = "".join(part for part in re.split(r"[^0-9A-Za-z]", env_id.rsplit("/", 1)[-1]) if part) or "Env"
    return type(f"{class_name}Environment", (AgentEnvironment,), namespace)


def environment_dataset(
    env_id: str,
    tasks: Sequence[Mapping[str, Any]] | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    instruction: str = ANSWER_INSTRUCTION,
) -> Any:
    """A ``datasets.Dataset`` for :func:`environment_factory`: ``prompt``, ``task`` and ``task_id`` per task.

    Args:
        env_id: The env id.
        tasks: Task dicts (None: the env's own tasks).
        env_kwargs: Extra ``gym.make`` keyword arguments.
        instruction: Appended to the system message (how to give the final answer); "" for none.

    Returns:
        The dataset; ``prompt`` is the env's first observation (system and user messages), ``task``
        the task's JSON (None for a task JSON cannot hold, found by ``task_id``).

    Raises:
        MissingExtraError: ``datasets`` is not installed.
        ValueError: The env rejects a task.
    """
    try:
        from datasets import Dataset
    except ImportError:
        raise MissingExtraError("datasets", "trl") from None
    import gymnasium as gym

    env = gym.make(env_id, **dict(env_kwargs or {}))
    unwrapped: Any = env.unwrapped
    rows = []
    try:
        for task in (unwrapped.tasks if tasks is None else tasks):
            observation, _ = env.reset(options={"task": dict(task)})
            messages = [{"role": m["role"], "content": m["content"]} for m in observation]
            if instruction and messages and messages[0]["role"] == "system":
                messages[0]["content"] = f"{messages[0]['content']}\n\n{instruction}"
            rows.append({"prompt": messages, "task": _task_json(task), "task_id": str(task.get("id", ""))})
    finally:
        env.close()
    return Dataset.from_list(rows)


def _task_json(task: Mapping[str, Any]) -> str | None:
    """The task's JSON, or None when it holds values JSON cannot (``reset`` then finds it by ``task_id``)."""
    try:
        return json.dumps(dict(task), sort_keys=True)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------- the class
class AgentEnvironment:
    """Base of the classes :func:`environment_factory` builds: one agent_gym env driven by TRL's tool loop.

    Subclasses set :attr:`env_id` and :attr:`env_kwargs` and add one method per tool. Public
    functions of this class are what TRL sees: ``reset``, ``get_reward`` and the ``answer`` tool.

    Attributes:
        env_id: The env id (class attribute).
        env_kwargs: ``gym.make`` keyword arguments (class attribute).
        env: This instance's env.
        reward: The episode's return so far.
        done: Whether the episode has ended.
        status: The episode's status once it ended ("" before).
        masked: Whether the episode failed for infrastructure reasons (the env raised, or it ended
            with a status of :data:`~agent_gym.integrations.contract.INFRA_FAILURE_STATUSES`):
            ``get_reward`` is then None and :func:`masking_trainer` leaves its ids out of the loss.
        failure: Why it failed, or None.
    """

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = {}

    def __init__(self) -> None:
        import gymnasium as gym

        if not self.env_id:
            raise ConfigError("AgentEnvironment: build the class with environment_factory(env_id)")
        self.env: Any = gym.make(self.env_id, **dict(self.env_kwargs))
        self.reward = 0.0
        self.done = False
        self.status = ""
        self.masked = False
        self.failure: str | None = None

    def reset(self, **row: Any) -> str | None:
        """Start an episode on the row's task (``task``: dict or JSON, or ``task_id``).

        Args:
            **row: The dataset row TRL passes (``prompt``, ``task``, ``task_id``, ...).

        Returns:
            None: the row's prompt already holds the question.

        An env that cannot start for another reason (it raised something else) leaves the
        episode over and masked: its tools answer with an error and ``get_reward`` is None.

        Raises:
            ConfigError: The row names no task, or the env rejects it.
        """
        task = self._task_of(row)
        self.reward = 0.0
        self.done = False
        self.status = ""
        self.masked = False
        self.failure = None
        try:
            self.env.reset(options={"task": task})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"row: {self.env_id} rejects the task {task.get('id', '?')!r}: {exc}") from None
        except Exception as exc:  # the env could not start (a sandbox, a server): not the model's doing
            self._fail(f"env.reset raised {type(exc).__name__}: {exc}")
        return None

    def get_reward(self) -> float | None:
        """The episode's return so far: tool-call shaping plus the answer's score once given.

        Returns:
            The sum of the env's step rewards since ``reset``; None for an episode that failed for
            infrastructure reasons, which TRL leaves out of its group's baseline (advantage 0).
        """
        return None if self.masked else float(self.reward)

    def answer(self, answer: str) -> str:
        """Give the final answer; this ends the episode.

        Args:
            answer: The final answer only (a number, date, name, ...), without explanation.

        Returns:
            A confirmation.
        """
        return self._step(f"<answer>{answer}</answer>") or "Answer recorded."

    def _task_of(self, row: Mapping[str, Any]) -> dict[str, Any]:
        task = row.get("task")
        if isinstance(task, str):
            try:
                task = json.loads(task)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"row['task']: expected a task's JSON ({exc})") from None
        if isinstance(task, Mapping):
            return dict(task)
        task_id = row.get("task_id")
        if task_id is not None:
            for candidate in self.env.unwrapped.tasks:
                if str(candidate.get("id")) == str(task_id):
                    return dict(candidate)
            raise ConfigError(f"row['task_id']: {task_id!r} is not a task of {self.env_id}")
        raise ConfigError("row: expected a 'task' (dict or JSON) or 'task_id' column; build the dataset with "
                          "agent_gym.integrations.trl.environment_dataset")

    def _step(self, text: str) -> str:
        """Step the env with one assistant message; return what the env added after it."""
        if self.done:
            return "Error: the episode is over; no more tool calls are run."
        if self.env.unwrapped.task is None:
            return "Error: no episode; reset() was not called."
        before = len(self.env.unwrapped.messages)
        try:
            observation, reward, terminated, truncated, info = self.env.step(text)
        except Exception as exc:  # a tool runner, a server or the grader failed: not the model's doing
            self._fail(f"env.step raised {type(exc).__name__}: {exc}")
            return "Error: the environment failed; the episode is over."
        self.reward += float(reward)
        added = [m["content"] for m in observation[before + 1:]]
        if terminated or truncated:
            self.done = True
            self.status = str(info.get("status", ""))
            if self.status in INFRA_FAILURE_STATUSES:
                self.masked = True
                self.failure = str(info.get("error") or info.get("end_reason") or self.status)
            if truncated:
                added.append(f"(The episode ended: {info.get('end_reason') or self.status}.)")
        return "\n".join(str(a) for a in added)

    def _fail(self, reason: str) -> None:
        """End the episode as an infrastructure failure (``ENV_ERROR``, masked)."""
        self.done = True
        self.status = EpisodeStatus.ENV_ERROR.value
        self.masked = True
        self.failure = reason


def masking_trainer(trainer_class: type) -> type:
    """A subclass of TRL's ``GRPOTrainer`` (or of a subclass of it) that leaves failed episodes out of the loss.

    TRL's tool loop builds the token sequences of an ``environment_factory`` run itself and gives an
    environment no way to mask its row: an episode whose env failed (:attr:`AgentEnvironment.masked`)
    gets reward None from ``get_reward`` (out of the group's baseline, advantage 0), but its ids
    would still count in TRL's loss normaliser and, with ``beta > 0``, in its KL term. The subclass
    zeroes the loss mask of those rows after TRL scored the batch (and recounts the ids the loss
    is normalised by), so none of their ids reaches the loss.

    Args:
        trainer_class: ``trl.GRPOTrainer`` or a subclass.

    Returns:
        ``Masking<name>``, a subclass to build instead of ``trainer_class``.

    Example:
        >>> from trl import GRPOTrainer  # doctest: +SKIP
        >>> trainer = masking_trainer(GRPOTrainer)(model=..., environment_factory=environment_factory(env_id),
        ...                                        ...)  # doctest: +SKIP
    """
    if not isinstance(trainer_class, type) or not hasattr(trainer_class, "_generate_and_score_completions"):
        raise TypeError(f"trainer_class: expected trl.GRPOTrainer or a subclass, got {trainer_class!r}")

    class Masking(trainer_class):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            output = super()._generate_and_score_completions(inputs)
            environments = list(getattr(self, "environments", None) or [])
            failed = [i for i, e in enumerate(environments) if getattr(e, "masked", False)]
            if not failed:
                return output
            completion_mask = output["completion_mask"]
            if len(environments) != completion_mask.shape[0]:
                raise RuntimeError(f"masking_trainer: {len(environments)} environments for "
                                   f"{completion_mask.shape[0]} rows; this TRL version scores batches differently")
            key = "tool_mask" if output.get("tool_mask") is not None else "completion_mask"
            mask = output[key].clone()
            mask[failed] = 0
            output[key] = mask
            loss_mask = completion_mask * output["tool_mask"] if key == "tool_mask" else mask
            output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
            return output

    Masking.__name__ = Masking.__qualname__ = f"Masking{trainer_class.__name__}"
    Masking.__doc__ = f"{trainer_class.__name__} whose loss leaves out the rows of failed agent_gym episodes."
    return Masking


def _tool_method(name: str, function: Mapping[str, Any]) -> Callable[..., str]:
    """A method calling the env's tool ``name``, its signature and docstring from the tool's schema."""
    from agent_gym.parsers import format_tool_call

    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_lines = []
    for pname, prop in properties.items():
        if not pname.isidentifier() or keyword.iskeyword(pname) or pname == "self":
            raise ConfigError(f"tools: parameter {pname!r} of {name!r} cannot be a Python parameter")
        annotation = _annotation(prop)
        default = inspect.Parameter.empty if pname in required else prop.get("default")
        if pname not in required and default is None:
            annotation = Optional[annotation]  # noqa: UP045 - a runtime object for transformers' schema
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=annotation))
        annotations[pname] = annotation
        description = " ".join(str(prop.get("description") or pname).split())
        arg_lines.append(f"    {pname}: {description}")
    # required parameters first, as Python wants them before those with defaults (keyword-only: any order)
    params[1:] = sorted(params[1:], key=lambda p: p.default is not inspect.Parameter.empty)
    annotations["return"] = str
    text = str(function.get("description") or name)
    returns = "The tool's output, or an error message."
    match = _RETURNS.search(text)
    if match:
        text, returns = text[: match.start()].rstrip(), " ".join(match.group(1).split())
    doc = text + ("\n\nArgs:\n" + "\n".join(arg_lines) if arg_lines else "") + f"\n\nReturns:\n    {returns}\n"

    def method(self: Any, **arguments: Any) -> str:
        arguments = {k: v for k, v in arguments.items() if v is not None or k in required}
        return self._step(format_tool_call(name, arguments))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


def _annotation(prop: Mapping[str, Any]) -> Any:
    """The Python type of a JSON schema property (``Literal`` for an enum, ``Union`` for ``anyOf``)."""
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    variants = prop.get("anyOf") or prop.get("oneOf")
    if variants:
        types = tuple(_annotation(v) for v in variants)
        return types[0] if len(types) == 1 else Union[types]  # noqa: UP007 - built at runtime
    kind = prop.get("type", "string")
    if isinstance(kind, list):
        types = tuple(_JSON_TYPES.get(k, str) for k in kind)
        return types[0] if len(types) == 1 else Union[types]  # noqa: UP007
    return _JSON_TYPES.get(kind, str)
