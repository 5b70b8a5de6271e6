"""The opt-in ``delegate(task)`` tool: a parent agent spawns a subagent inside its episode.

``DelegateWrapper(env, policy, spec)`` wraps any :class:`~agent_gym.env.core.AgentEnv`
(inside the :class:`~agent_gym.wrappers.TrajectoryWrapper` that records the episode):
every episode gets a ``delegate`` tool beside its own (in the episode's tool schemas,
and described in the system message when the env has ``tools_in_prompt``). A call runs
a sub-episode (:func:`~agent_gym.subagents.runner.run_subagent`) with the spec's prompt,
tools and policy; its answer is the tool's output (an observation of the parent: mask
0), and its segments go to the step's ``info["agent_segments"]``, which the recording
wrapper adds to the parent's trajectory with their lineage. The step's
``info["subagents"]`` lists the sub-episodes it ran (session id, status, steps, sampled
tokens): their steps are not the parent's steps, and their segments' ``first_step`` /
``last_step`` index the sub-episode's own steps. Limits on depth, count and sampled
tokens refuse a call with an error observation; a subagent that fails or hangs is one too. The
wrapper holds one :class:`~agent_gym.subagents.runner.SubagentRunner` for its lifetime: the
sub-episodes reuse its env through ``reset`` (closed with the wrapper).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from agent_gym.env.core import AgentEnv
from agent_gym.errors import ToolErrorKind
from agent_gym.subagents.runner import SubagentRunner, SubagentSpec
from agent_gym.tools import ToolResult

__all__ = ["DelegateTool", "DelegateWrapper"]



class DelegateTool:
    """The ``delegate`` tool of one :class:`DelegateWrapper` (never raises).

    Args:
        owner: The wrapper whose episode the calls belong to.
        name: The tool name.
    """

    def __init__(self, owner: DelegateWrapper, name: str = "delegate") -> None:
        self.owner = owner
        self._name = name

    @property
    def name(self) -> str:
        """The tool name."""
        return self._name

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema: one string argument, ``task``."""
        spec = self.owner.subagent
        return {
            "type": "function",
            "function": {
                "name": self._name,
                "description": f"Hand a self-contained task to a {spec.role} agent and get its answer back.",
                "parameters": {
                    "type": "object",
                    "properties": {"task": {"type": "string", "description": "What the agent should find or do."}},
                    "required": ["task"],
                },
            },
        }

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Run a subagent on ``arguments["task"]``."""
        task = arguments.get("task") if isinstance(arguments, Mapping) else None
        if not isinstance(task, str) or not task.strip():
            return ToolResult.failure(ToolErrorKind.BAD_ARGUMENTS, "delegate: expected a non-empty 'task' string")
        return self.owner.delegate(task)


class _EpisodeToolsWithDelegate:
    """An env's ``episode_tools`` hook with the ``delegate`` tool added to the tools it gives an episode.

    Set on the env (an instance attribute over its method), so ``reset`` puts the tool in the
    episode's schemas and, with ``tools_in_prompt``, describes it in the system message.
    """

    def __init__(self, hook: Callable[[dict[str, Any]], Any], tool: DelegateTool) -> None:
        self.hook, self.tool = hook, tool

    def __call__(self, task: dict[str, Any]) -> list[Any] | None:
        items = self.hook(task)
        if items is None:  # the env's own tools, which include the tool
            return None
        return [*[t for t in items if getattr(t, "name", None) != self.tool.name], self.tool]


class DelegateWrapper(gym.Wrapper):
    """Gives an ``AgentEnv`` the ``delegate`` tool (see the module docs).

    The ``delegate`` tool joins the env's own tools (:meth:`~agent_gym.env.core.AgentEnv.add_env_tools`)
    and the tools an env's ``episode_tools`` gives an episode.

    Args:
        env: The env (an ``AgentEnv``, possibly wrapped; not yet recorded).
        policy: The policy subagents use when ``spec.policy`` is None (the parent's).
        spec: The subagent; keyword arguments build one when None.
        depth: This env's depth (0 for the episode's own agent).
        tool_name: The tool's name.
        **spec_fields: :class:`SubagentSpec` fields (with ``spec=None``).
    """

    accepts_episode_id = True
    """The recording wrapper hands this wrapper the episode's id (``options["episode_id"]``)."""

    def __init__(self, env: gym.Env, policy: Any, spec: SubagentSpec | None = None, *, depth: int = 0,
                 tool_name: str = "delegate", **spec_fields: Any) -> None:
        super().__init__(env)
        self.subagent = spec if spec is not None else SubagentSpec(**spec_fields)
        self.policy = policy
        self.depth = depth
        self.tool = DelegateTool(self, tool_name)
        self._episode_id = ""
        self._count = 0
        self._tokens = 0
        self._pending: list[dict[str, Any]] = []
        self._runs: list[dict[str, Any]] = []
        nest = self._nest if self.depth + 2 <= self.subagent.max_depth else None
        self.runner = SubagentRunner(self.subagent, policy, nest)  # its env, kept between sub-episodes
        base: Any = self.env.unwrapped
        if self.tool.name not in base.tools:  # a wrapper over a wrapper that already added it
            base.add_env_tools([self.tool])
        if type(base).episode_tools is not AgentEnv.episode_tools:  # the env gives episodes tools of their own
            base.episode_tools = _EpisodeToolsWithDelegate(base.episode_tools, self.tool)

    @property
    def spawned(self) -> int:
        """Subagents spawned in the current episode."""
        return self._count

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the env (its episode tools include ``delegate``)."""
        options = dict(options or {})
        episode_id = options.pop("episode_id", None)
        obs, info = self.env.reset(seed=seed, options=options or None)
        self._episode_id = str(episode_id or info.get("episode_id") or "episode")
        self._count = self._tokens = 0
        self._pending, self._runs = [], []
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env; the subagents the step ran go to ``info["agent_segments"]`` and ``info["subagents"]``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._runs:
            info = dict(info)
            if self._pending:
                info["agent_segments"] = [*info.get("agent_segments", []), *self._pending]
            info["subagents"] = [*info.get("subagents", []), *self._runs]
            self._pending, self._runs = [], []
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the subagents' env, then the env."""
        self.runner.close()
        super().close()

    def _nest(self, env: Any) -> DelegateWrapper:
        """A subagent's env that may delegate in turn (one level deeper)."""
        return DelegateWrapper(env, self.policy, self.subagent, depth=self.depth + 1, tool_name=self.tool.name)

    def delegate(self, task: str) -> ToolResult:
        """Run one subagent on ``task`` (the tool's body); limits and failures are error observations."""
        spec = self.subagent
        if self.depth + 1 > spec.max_depth:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, f"delegate: depth limit {spec.max_depth} reached")
        if self._count >= spec.max_count:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR,
                                      f"delegate: at most {spec.max_count} subagents per episode")
        if spec.max_tokens is not None and self._tokens >= spec.max_tokens:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR,
                                      f"delegate: the subagents' token budget ({spec.max_tokens}) is spent")
        self._count += 1
        session_id = f"{self._episode_id}/{spec.role}-{self._count}"
        run = self.runner.run(task, session_id)
        self._tokens += run.sampled_tokens
        if run.segments:
            self._pending.append({"segments": run.segments, "spawned": True})
        self._runs.append({"role": spec.role, "session_id": session_id, "status": run.status, "steps": run.steps,
                           "segments": len(run.segments), "sampled_tokens": run.sampled_tokens})
        if run.answer is None:
            return ToolResult.failure(ToolErrorKind.TOOL_ERROR, run.error or "delegate: the subagent failed")
        return ToolResult(run.answer)
