"""TrajectoryWrapper: record an episode as a ``StepTrajectory`` with exact tokens.

The wrapper sits outermost around any agent_gym env. It records one ``Step``
per ``step()`` (all seed fields), computes Monte Carlo returns, assembles the
token tensors from the policy's own prompt and sampled ids, tracks timings,
and at the end of the episode puts the ``StepTrajectory`` in
``info["trajectory"]``. With ``memory`` set, the observation handed to the
policy is the memory's prompt view instead of the whole conversation, and every
step info (and the reset info) has ``info["memory"]``: the memory's summary counters
(``summaries``, ``failed_summaries``, ``summarized``; see
:func:`~agent_gym.wrappers.prompt_view.memory_info`), so a summary call that failed is
counted where a trainer or a report reads the steps.

Images an env attached to its messages (``images``, see :mod:`agent_gym.messages`) reach
the policy on the messages its view ends with unchanged; the recorded conversation, the
memory and every ``chat_completions`` keep role/content only.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from agent_gym.checks import check_gamma
from agent_gym.messages import IMAGES_KEY, attach_images
from agent_gym.parsers import HermesToolCallParser
from agent_gym.types import EpisodeStatus, PolicyOutput, Step, StepTrajectory
from agent_gym.wrappers.blocking import calls_can_block_of, inner_env_behind_plain_wrappers
from agent_gym.wrappers.prompt_view import FullConversation, PromptView, make_prompt_view, memory_info
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

__all__ = ["TrajectoryWrapper"]


def _plain(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """Keep only role/content of each message, as strings."""
    return [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in messages]


class TrajectoryWrapper(gym.Wrapper):
    """Records every step and emits a ``StepTrajectory`` at the end of the episode.

    Actions may be plain strings or ``PolicyOutput``s. With ``PolicyOutput``s that
    carry token ids, the trajectory's tokens are exactly the ids the policy sent
    and sampled: each turn's prompt must extend the previous prompt plus the
    sampled ids (checked every turn; a break starts a new segment). With plain
    strings and a ``tokenizer``, the conversation is rendered with the chat
    template and the response text re-tokenized; the trajectory then has
    ``retokenized=True``.

    The trajectory's ``sampling`` is the ``PolicyOutput.sampling`` record of the
    episode's first turn that has one (the ``logprobs_mode`` and the sampling
    parameters that shaped the distribution); {} with string actions.

    Args:
        env: The environment (an agent_gym env, possibly already wrapped).
        gamma: Discount factor for ``mc_return``, in [0, 1].
        memory: None (the policy sees the whole conversation), a
            ``MemoryConfig``, or a callable returning a fresh memory object per
            episode (anything with ``add(messages)`` and ``get_prompt_messages()``).
        tokenizer: A Hugging Face tokenizer with a chat template, used only for
            string actions (or ``PolicyOutput``s without token ids).

    Example:
        >>> import gymnasium as gym, agent_gym
        >>> env = agent_gym.TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0"))
        >>> obs, info = env.reset(seed=0)
        >>> while True:
        ...     obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        ...     if terminated or truncated:
        ...         break
        >>> info["trajectory"].trajectory_reward > 0
        True
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        gamma: float = 1.0,
        memory: Any = None,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(env)
        self.gamma = check_gamma(gamma)
        self.tokenizer = tokenizer
        self._parser = getattr(env.unwrapped, "parser", None) or HermesToolCallParser()
        self._lock = threading.Lock()
        self._chat_tokens: Any = None
        self._view_factory: Callable[[], PromptView] = make_prompt_view(memory, tokenizer=tokenizer)
        # The env asked whether its calls may block (None: the memory or a wrapper may, whatever the env says).
        self._blocking_probe = inner_env_behind_plain_wrappers(env) if memory is None else None
        spec = getattr(env, "spec", None)
        self._env_id: str = str(getattr(spec, "id", "") or "")
        self._reset_state()

    # ------------------------------------------------------------------ state
    def _reset_state(self, rollout_id: str = "", task: Any = None) -> None:
        previous = getattr(self, "_episode", None)
        if self._chat_tokens is not None and previous is not None and previous.rollout_id:
            self._chat_tokens.close(previous.rollout_id)
        self._view: PromptView | None = None
        role = getattr(self.env.unwrapped, "agent_role", "")
        self._episode = TrajectoryBuilder(rollout_id, gamma=self.gamma, env_id=self._env_id, task=task,
                                          role=role if isinstance(role, str) else "")
        self._steps = self._episode.steps  # the builder's list, appended to step by step
        self._conversation: list[dict[str, str]] = []
        self._prompt_view: list[dict[str, str]] = []
        self._observation: Any = None
        self._policy_tools: list[dict] | None = None
        self._tools_in_prompt = False
        self._finished: StepTrajectory | None = None

    @property
    def rollout_id(self) -> str:
        """The current episode's id (also used as the policy session id)."""
        return self._episode.rollout_id

    @property
    def steps(self) -> list[Step]:
        """The steps recorded so far in the current episode."""
        return list(self._steps)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the env and start recording a new episode.

        Args:
            seed: Passed to the env.
            options: Passed to the env, except ``"episode_id"``: the id to give
                this episode (``rollout_id`` and the policy session id); a
                random one by default. Ids must be unique among the episodes a
                policy serves at the same time.

        Returns:
            The policy's view of the conversation and the env's info, plus
            ``episode_id`` and ``policy_tools`` (the tool schemas to pass to the
            policy, or None when the env describes its tools in the prompt).
        """
        options = dict(options or {})
        episode_id = options.pop("episode_id", None)
        if episode_id is not None and (not isinstance(episode_id, str) or not episode_id):
            raise ValueError(f'options["episode_id"]: expected a non-empty str, got {episode_id!r}')
        episode_id = episode_id or uuid.uuid4().hex
        # A failing env.reset leaves no episode to step, only one to finish under its id.
        self._reset_state(episode_id, options.get("task"))
        started = time.perf_counter()
        if getattr(self.env, "accepts_episode_id", False):  # e.g. a DelegateWrapper: its subagents' ids nest in it
            options["episode_id"] = episode_id
        obs, info = self.env.reset(seed=seed, options=options or None)
        reset_time = time.perf_counter() - started
        self._reset_state(episode_id, info.get("task"))
        self._episode.start = started
        self._episode.times["env_time"] += reset_time
        info = self._take_agents(info, -1)
        self._tools_in_prompt = bool(info.get("tools_in_prompt"))
        self._policy_tools = None if self._tools_in_prompt else (info.get("tools") or None)
        self._conversation = _plain(obs)
        self._view = self._view_factory()
        self._view.add(self._conversation)
        self._prompt_view = self._view_messages()
        self._observation = self._initial_observation()
        info = dict(info)
        info["episode_id"] = self._episode.rollout_id
        info["policy_tools"] = self._policy_tools
        memory = memory_info(self._view)
        if memory is not None:
            info["memory"] = memory
        return self._policy_view(obs), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env with ``action`` and record the step.

        Returns:
            The usual 5-tuple; the observation is the policy's view. When the
            episode ends, the observation is the whole conversation (no memory
            view, so no summary is written for a prompt no policy will see),
            ``info["trajectory"]`` holds the ``StepTrajectory`` and
            ``info["status"]`` its status. Every step info carries
            ``policy_tools``: the tool schemas for the policy's next turn. They
            change when the env's info has ``tools`` (the episode's tool set
            changed during the step); ``[]`` then means the tools were removed,
            and None means the env describes its tools in the prompt. With a
            memory, ``memory`` holds its summary counters (``failed_summaries``
            counts the summary calls that failed).
        """
        if self._view is None:
            raise gym.error.ResetNeeded("TrajectoryWrapper.step: call reset() before step()")
        if self._finished is not None:
            raise gym.error.ResetNeeded("TrajectoryWrapper.step: the episode has ended; call reset()")
        text = action.text if isinstance(action, PolicyOutput) else action
        step_index = len(self._steps)
        seen = list(self._prompt_view)

        started = time.perf_counter()
        obs, reward, terminated, truncated, info = self.env.step(action)
        with self._lock:
            if self._finished is not None:
                # finish() ended the episode while this step ran (e.g. a rollout timeout):
                # the returned trajectory must not change, so nothing is recorded.
                info["policy_tools"] = self._policy_tools
                return tuple(self._prompt_view), reward, terminated, truncated, info
            return self._record_step(step_index, action, text, seen, started, obs, reward, terminated, truncated, info)

    def _record_step(
        self,
        step_index: int,
        action: Any,
        text: Any,
        seen: list[dict[str, str]],
        started: float,
        obs: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Record the step the env just took; build the trajectory if it ended the episode."""
        times = self._episode.times
        times["env_time"] += time.perf_counter() - started
        times["reward_time"] += float(getattr(self.env.unwrapped, "last_reward_time", 0.0) or 0.0)
        token_info = self._record_tokens(step_index, action, seen)
        info = self._take_agents(info, step_index)

        # The env only appends to the conversation: convert just the new messages.
        new_messages = _plain(obs[len(self._conversation) :])
        self._conversation.extend(new_messages)
        done = bool(terminated or truncated)
        self._view.add(new_messages)  # type: ignore[union-attr]
        if done:
            # No policy sees this view: do not ask the memory for it (that could write a summary).
            self._prompt_view = list(self._conversation)
        else:
            self._prompt_view = self._view_messages()
        memory = memory_info(self._view)
        if memory is not None:  # the summary counters, failures included, where trainers and reports look
            info["memory"] = memory

        model_response = text if isinstance(text, str) else str(text)
        # Reuse the env's parse of this message when it used the same parser (AgentEnv keeps it).
        unwrapped = self.env.unwrapped
        parsed = getattr(unwrapped, "last_parsed", None)
        if parsed is None or parsed.text != model_response or getattr(unwrapped, "parser", None) is not self._parser:
            parsed = self._parser.parse(model_response)
        step_info = {k: v for k, v in info.items() if k != "trajectory"}
        step_info.update(token_info)
        if "tools" in info:
            # The env changed the episode's tools during this step: the next turns get the new list.
            self._policy_tools = None if self._tools_in_prompt else list(info["tools"] or [])
        self._steps.append(
            Step(
                chat_completions=seen,
                thought=parsed.thought or "",
                action=parsed.action_text,
                observation=self._observation,
                model_response=model_response,
                info=step_info,
                reward=float(reward),
                done=done,
            )
        )
        # What the env appended after the assistant message is the next step's observation.
        env_messages = [m for m in new_messages if m["role"] != "assistant"]
        self._observation = "\n".join(m["content"] for m in env_messages)

        if done:
            status = info.get("status") or (EpisodeStatus.ENV_DONE if terminated else EpisodeStatus.MAX_STEPS)
            trajectory = self._build(EpisodeStatus(str(status)))
            info = dict(info)
            info["status"] = EpisodeStatus(trajectory.status)
            info["trajectory"] = trajectory
        info["policy_tools"] = self._policy_tools
        return self._policy_view(obs), reward, terminated, truncated, info

    def finish(self, status: EpisodeStatus | str, error: str | None = None) -> StepTrajectory:
        """End the episode from outside (policy failure, timeout, env crash).

        Args:
            status: Why the episode ended.
            error: A message recorded on the last step's info.

        Returns:
            The ``StepTrajectory`` of the steps recorded so far (a single empty
            step when none were), carrying ``status``.
        """
        with self._lock:
            return self._finish(EpisodeStatus(str(status)), error)

    def _finish(self, status: EpisodeStatus, error: str | None) -> StepTrajectory:
        if self._finished is not None:
            return self._finished
        self._episode.end(error, context=self._prompt_view, observation=self._observation)
        return self._build(status)

    def calls_can_block(self) -> bool:
        """Whether ``reset`` or ``step`` may block.

        True with a memory (a summary may call a model), else as the wrapped env says
        (:func:`~agent_gym.wrappers.blocking.env_calls_can_block`; the wrapper stack is read once).
        """
        return calls_can_block_of(self._blocking_probe)

    def record_llm_time(self, seconds: float) -> None:
        """Add policy time measured outside a ``PolicyOutput`` (e.g. string policies)."""
        self._episode.times["llm_time"] += float(seconds)

    # ------------------------------------------------------------------ internals
    def _take_agents(self, info: dict[str, Any], step_index: int) -> dict[str, Any]:
        """Move other agents' segments and per-role rewards from the env's info into the episode.

        ``info["agent_segments"]``: one ``{"segments": [...], "spawned": bool}`` per agent
        run during the step (a subagent is spawned by this step's turn; a role that takes
        turns is not); ``info["role_rewards"]``: reward per role. Both leave the info.
        """
        if "agent_segments" not in info and "role_rewards" not in info:
            return info
        info = dict(info)
        for run in info.pop("agent_segments", None) or []:
            spawned = bool(run.get("spawned", True)) and step_index >= 0
            self._episode.add_child(run["segments"], spawn_step=step_index, spawned=spawned)
        rewards = info.pop("role_rewards", None)
        if rewards:
            self._episode.set_role_rewards(rewards)
            info["role_rewards"] = dict(rewards)
        return info

    def _policy_view(self, obs: Any) -> tuple[Any, ...]:
        """The prompt view, with the images of the env's messages it ends with (see :func:`attach_images`)."""
        if any(IMAGES_KEY in m for m in obs):
            return tuple(attach_images(self._prompt_view, obs))
        return tuple(self._prompt_view)

    def _view_messages(self) -> list[dict[str, str]]:
        """The policy's messages for the next turn, as fresh role/content dicts."""
        view = self._view
        if type(view) is FullConversation:
            return view.messages()  # copies of the messages _plain already made
        return _plain(view.messages())  # type: ignore[union-attr]

    def _initial_observation(self) -> Any:
        task = self._episode.task
        if isinstance(task, dict) and "question" in task:
            return task["question"]
        users = [m["content"] for m in self._conversation if m["role"] == "user"]
        return users[-1] if users else None

    def _record_tokens(self, step_index: int, action: Any, seen: list[dict[str, str]]) -> dict[str, Any]:
        """Add this turn's ids to the assembler and return what the step info keeps."""
        if isinstance(action, PolicyOutput):
            token_info = self._episode.add_output(step_index, action)
            if token_info:
                return token_info
            text = action.text
        else:
            text = action
        if self.tokenizer is None or not isinstance(text, str):
            return {}
        prompt_ids, sampled_ids = self._retokenize(seen, text)
        return self._episode.add_ids(step_index, prompt_ids, sampled_ids)

    def _retokenize(self, messages: list[dict[str, str]], text: str) -> tuple[list[int], list[int]]:
        """Render this turn's prompt with the chat token builder and re-tokenize ``text``."""
        if self._chat_tokens is None:
            from agent_gym.policy.chat_tokens import ChatTokenBuilder

            self._chat_tokens = ChatTokenBuilder(self.tokenizer, track_retokenization=False)
        plan = self._chat_tokens.prepare(self._episode.rollout_id, messages, self._policy_tools or None)
        sampled = list(self.tokenizer.encode(text, add_special_tokens=False))
        sampled.append(self._chat_tokens.eot_token_id)
        self._chat_tokens.commit(plan, sampled, text)
        return plan.prompt_ids, sampled

    def _build(self, status: EpisodeStatus) -> StepTrajectory:
        trajectory = self._episode.build(status, conversation=self._conversation)
        self._finished = trajectory
        return trajectory
