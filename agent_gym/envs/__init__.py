"""Built-in environments and their Gymnasium registration.

``register_envs()`` registers every built environment id (it runs when
``agent_gym`` is imported). Entry points are strings, so importing the package
does not import the environments themselves.

Each env counts its own steps (``max_steps``, truncating with status MAX_STEPS), so
the ids register no ``max_episode_steps``: there is one step limit, and
``gym.make(id, max_steps=N)`` sets it. The ids' passive checker is
:class:`~agent_gym.envs.passive_checker.PassiveEnvChecker` (Gymnasium's, surviving a
first ``reset`` that raises).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym

from agent_gym.envs.passive_checker import checker_spec

__all__ = ["ENV_INFOS", "EnvInfo", "register_envs"]


@dataclass(frozen=True)
class EnvInfo:
    """What ``register_envs`` registers for one id.

    Attributes:
        id: The Gymnasium id.
        entry_point: ``"module:Class"``.
        description: One line shown by ``agent-gym list``.
        nondeterministic: True for envs whose steps depend on the outside world.
    """

    id: str
    entry_point: str
    description: str
    nondeterministic: bool = False


ENV_INFOS: tuple[EnvInfo, ...] = (
    EnvInfo(
        id="agent_gym/ToolUse-v0",
        entry_point="agent_gym.envs.tool_use.env:ToolUseEnv",
        description="Arithmetic, unit, date and inventory-lookup questions solved with tool calls (480 tasks).",
    ),
    EnvInfo(
        id="agent_gym/RAG-v0",
        entry_point="agent_gym.envs.rag.env:RAGEnv",
        description="Questions about a fictional world answered with search/open tools over 2,024 documents "
                    "(640 tasks; deterministic with the default local BM25 index, not with a retrieval server).",
    ),
    EnvInfo(
        id="agent_gym/RAGExplain-v0",
        entry_point="agent_gym.envs.rag.explain_env:RAGExplainEnv",
        description="Free-text explanations of RAG-v0's fictional world (240 tasks, train/test splits) graded by a "
                    "rubric: stated facts (a rule) and a judge (the embedded model in-process, or a server).",
    ),
    EnvInfo(
        id="agent_gym/Conversation-v0",
        entry_point="agent_gym.envs.conversation.env:ConversationEnv",
        description="Multi-turn user conversations over stateful tools (file system, shop, calendar; 180 tasks), "
                    "each user turn scored by the state its tool calls leave behind.",
    ),
    EnvInfo(
        id="agent_gym/Terminal-v0",
        entry_point="agent_gym.envs.terminal.env:TerminalEnv",
        description="Shell tasks in a bubblewrap sandbox with a persistent bash session, graded by their tests "
                    "(27 tasks; Terminal-Bench and Harbor task directories load too).",
        nondeterministic=True,
    ),
    EnvInfo(
        id="agent_gym/SWE-v0",
        entry_point="agent_gym.envs.swe.env:SWEEnv",
        description="Repository repair tasks: fix a seeded bug in a small Python library with bash and an editor; "
                    "the patch is graded by the hidden tests in a clean sandbox (SWE-bench instances load too).",
        nondeterministic=True,
    ),
    EnvInfo(
        id="agent_gym/Web-v0",
        entry_point="agent_gym.envs.web.env:WebEnv",
        description="Web tasks in a real headless Chromium, offline: MiniWoB++ pages rewarded by the page itself and "
                    "three seeded multi-page sites graded server-side (click, type, select, ... on snapshot refs).",
        nondeterministic=True,
    ),
)
"""Every environment agent_gym registers."""


def register_envs() -> None:
    """Register every id of ``ENV_INFOS`` with Gymnasium (idempotent)."""
    for info in ENV_INFOS:
        if info.id in gym.registry:
            continue
        gym.register(
            id=info.id,
            entry_point=info.entry_point,
            nondeterministic=info.nondeterministic,
            disable_env_checker=True,  # the checker below replaces Gymnasium's
            additional_wrappers=(checker_spec(),),
        )
