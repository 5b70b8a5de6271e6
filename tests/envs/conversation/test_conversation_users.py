"""Simulated users: a scripted user that stops, a failing one, a reference-server user under TrajectoryWrapper."""

from __future__ import annotations

import pytest

from agent_gym import TrajectoryWrapper
from agent_gym.envs.conversation import ConversationEnv, SimulatedUser, builtin_tasks
from agent_gym.types import EpisodeStatus, PolicyOutput


def _task(task_id: str) -> dict:
    return next(t for t in builtin_tasks() if t["id"] == task_id)


class ScriptedUser:
    """Says the task's later turns in order, then the stop marker; records what it was shown."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        self.seen: list[list[dict]] = []
        self.closed: list[str] = []

    def act(self, messages, *, session_id, tools=None):
        self.seen.append([dict(m) for m in messages])
        return PolicyOutput(text=self.lines.pop(0) if self.lines else "Thanks! ###STOP###")

    def close_session(self, session_id):
        self.closed.append(session_id)


def test_simulated_user_runs_to_its_stop_marker_and_the_whole_reference_is_checked():
    task = _task("orders-0001")  # ask which order, then cancel it
    user = ScriptedUser([t if isinstance(t, str) else t["content"] for t in task["turns"][1:]])
    env = ConversationEnv(tasks=[task], user=user)
    env.reset(seed=0)
    rewards, done = [], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        rewards.append(info["res_reward"])
        done = terminated or truncated
    assert terminated and info["end_reason"] == "user_stop" and info["status"] == EpisodeStatus.ENV_DONE
    assert info["success"] and info["turn_scores"] == [1.0] and sum(rewards) == pytest.approx(1.0)
    view = user.seen[0]
    assert view[0]["role"] == "system" and "###STOP###" in view[0]["content"]
    assert [m["role"] for m in view[1:]] == ["user", "assistant", "user"]  # greeting, its opening, the reply
    assert view[2]["content"] == task["turns"][0]["content"]
    assert view[3]["content"] == task["turns"][0]["expect"]["reply"]  # the oracle asks which order
    env.reset(seed=0)
    assert user.closed  # the previous episode's user session was released


def test_simulated_user_without_action_fails_the_final_check():
    task = _task("orders-0000")
    env = ConversationEnv(tasks=[task], user=ScriptedUser([]))
    env.reset(seed=0)
    _, _, terminated, _, info = env.step("Cancelled!")
    assert terminated and info["end_reason"] == "user_stop" and not info["success"]
    assert any("'cancelled', got 'pending'" in line for line in info["state_diff"])


def test_turn_limit_and_failing_user_policy():
    chatty = ScriptedUser(["more"] * 20)
    env = ConversationEnv(tasks=[_task("fs-0000")], user=chatty, max_user_turns=3)
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = env.step("hello")
        done, steps = terminated or truncated, steps + 1
    assert truncated and info["end_reason"] == "user_turn_limit" and steps == 3
    assert info["status"] == EpisodeStatus.MAX_STEPS

    class Broken:
        def act(self, messages, *, session_id, tools=None):
            raise ConnectionError("server down")

    env = ConversationEnv(tasks=[_task("fs-0000")], user=SimulatedUser(Broken(), stop_marker="<END>"))
    env.reset(seed=0)
    _, _, _, truncated, info = env.step("hello")
    assert truncated and info["status"] == EpisodeStatus.ENV_ERROR and "server down" in info["error"]
    with pytest.raises(TypeError, match="policy"):
        SimulatedUser(object())


@pytest.mark.timeout(300)
def test_reference_server_user_is_observation_not_response(reference_server, start_server, qwen_tokenizer):
    """The user is the tiny random model (it never writes the stop marker: the turn limit ends the episode)."""
    from agent_gym.policy import SamplingParams, VLLMPolicy

    agent_server = start_server(fake_tokens=5)  # fixed short replies that end with a stop token
    agent = VLLMPolicy([str(agent_server)], qwen_tokenizer, SamplingParams(max_tokens=12))
    user_policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SamplingParams(max_tokens=10, seed=2))
    try:
        env = TrajectoryWrapper(ConversationEnv(tasks=[_task("calendar-0000")], user=user_policy, max_user_turns=3,
                                                max_steps=12))
        obs, info = env.reset(seed=0)
        session, tools = info["episode_id"], info["tools"]
        sampled: list[int] = []
        done = False
        while not done:
            out = agent.act(obs, session_id=session, tools=tools)
            sampled.extend(out.token_ids)
            obs, _, terminated, truncated, info = env.step(out)
            done = terminated or truncated
            tools = info.get("tools", tools)
    finally:
        agent.close()
        user_policy.close()
    assert info["end_reason"] == "user_turn_limit" and info["status"] == EpisodeStatus.MAX_STEPS
    trajectory = info["trajectory"]
    masks = trajectory.response_masks.tolist()
    tokens = trajectory.response_tokens.tolist()
    assert [t for t, m in zip(tokens, masks, strict=True) if m == 1] == sampled  # only the agent's own ids
    user_texts = [m["content"] for m in env.unwrapped.messages[2:] if m["role"] == "user"]
    assert user_texts  # the simulated user spoke at least once
    runs, current = [], []  # contiguous stretches of observation tokens
    for token, mask in zip(tokens, masks, strict=True):
        if mask == 0:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    runs.append(current)
    observed = [qwen_tokenizer.decode(run) for run in runs if run]
    for text in user_texts:
        assert any(text in part for part in observed), text
