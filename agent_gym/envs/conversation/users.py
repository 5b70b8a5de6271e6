"""The simulated user of a conversation: any agent_gym policy playing the customer.

The user policy sees the dialogue with the roles swapped: a system message with its
persona and goal, the assistant's replies as ``user`` messages and its own earlier
messages as ``assistant`` messages (tool calls and tool results are not shown). It ends
the conversation by writing the stop marker (default ``###STOP###``). Its text enters the
agent's conversation as a ``user`` message, so a :class:`~agent_gym.TrajectoryWrapper`
records it as observation tokens (mask 0), never as the agent's response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.types import FinishReason, PolicyOutput

__all__ = ["DEFAULT_STOP_MARKER", "SimulatedUser", "UserReply"]

DEFAULT_STOP_MARKER = "###STOP###"

_GREETING = "Hello! How can I help you today?"


@dataclass(frozen=True)
class UserReply:
    """What the simulated user said.

    Attributes:
        text: The message for the assistant (the stop marker removed; may be empty).
        stop: Whether the user ended the conversation.
        error: Why the user policy failed (None when it answered).
    """

    text: str
    stop: bool
    error: str | None = None


class SimulatedUser:
    """A user played by a policy, with a persona and goal taken from the task.

    Args:
        policy: Any agent_gym policy (``act(messages, session_id=..., tools=None)``), e.g. a
            :class:`~agent_gym.VLLMPolicy` on another server.
        stop_marker: The text with which the user ends the conversation.
        system_prompt: Template of the user's system message; ``{persona}``, ``{goal}`` and
            ``{stop_marker}`` are filled in from the task (``task["user"]``, else the scripted turns).
    """

    default_system_prompt = (
        "You are playing a user talking to a customer-service assistant. Stay in character and write only the "
        "user's next message, short and natural.\n\nPersona: {persona}\n\nYour goal: {goal}\n\n"
        "Give the assistant the information it asks for when your goal contains it. When your goal is reached, "
        "or the assistant cannot help, end the conversation by writing {stop_marker}."
    )

    def __init__(self, policy: Any, *, stop_marker: str = DEFAULT_STOP_MARKER,
                 system_prompt: str | None = None) -> None:
        if not callable(getattr(policy, "act", None)):
            raise TypeError(f"policy: expected an agent_gym policy with act(messages, session_id=...), "
                            f"got {type(policy).__name__}")
        if not isinstance(stop_marker, str) or not stop_marker.strip():
            raise ValueError(f"stop_marker: expected a non-empty str, got {stop_marker!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt: expected str or None, got {type(system_prompt).__name__}")
        self.policy = policy
        self.stop_marker = stop_marker
        self.system_prompt = self.default_system_prompt if system_prompt is None else system_prompt

    def system_message(self, task: Mapping[str, Any]) -> str:
        """The user's system message for ``task``."""
        user = task.get("user") or {}
        persona = user.get("persona", "A customer who is polite and brief.")
        goal = user.get("goal") or " Then: ".join(t["content"] for t in task["turns"])
        return self.system_prompt.format(persona=persona, goal=goal, stop_marker=self.stop_marker)

    def view(self, task: Mapping[str, Any], dialogue: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """The user's conversation: roles swapped, opened by the assistant's greeting.

        Args:
            task: The task.
            dialogue: ``(speaker, text)`` pairs, speaker ``"user"`` or ``"assistant"``, oldest first.
        """
        messages = [{"role": "system", "content": self.system_message(task)},
                    {"role": "user", "content": _GREETING}]
        for speaker, text in dialogue:
            messages.append({"role": "assistant" if speaker == "user" else "user", "content": text})
        return messages

    def reply(self, task: Mapping[str, Any], dialogue: Sequence[tuple[str, str]], session_id: str) -> UserReply:
        """Ask the policy for the user's next message; never raises for a failing policy."""
        try:
            output = self.policy.act(self.view(task, dialogue), session_id=session_id, tools=None)
        except Exception as exc:  # noqa: BLE001 - a failing user ends the episode with a status
            return UserReply("", True, f"user policy raised {type(exc).__name__}: {exc}")
        if isinstance(output, PolicyOutput):
            if output.finish_reason == FinishReason.ERROR:
                return UserReply("", True, f"user policy failed: {output.text[:200]}")
            text = output.text
        else:
            text = str(output)
        text = _strip_thinking(text)
        if self.stop_marker in text:
            return UserReply(text.split(self.stop_marker, 1)[0].strip(), True)
        return UserReply(text.strip(), False)

    def close_session(self, session_id: str) -> None:
        """Let the policy forget the user's session."""
        close = getattr(self.policy, "close_session", None)
        if callable(close):
            try:
                close(session_id)
            except Exception:  # noqa: BLE001 - releasing must not fail an episode
                pass


def _strip_thinking(text: str) -> str:
    start, end = text.find("<think>"), text.find("</think>")
    if start != -1 and end > start:
        return text[:start] + text[end + len("</think>"):]
    return text
