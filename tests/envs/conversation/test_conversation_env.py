"""Conversation-v0: oracle on every shipped task, state diffs, turn flow, limits, faults, parallel episodes."""

from __future__ import annotations

import collections
import json
import pickle
import time
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.conversation import ConversationEnv, builtin_tasks
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus, PolicyOutput

ENV_ID = "agent_gym/Conversation-v0"


def _call(method: str, /, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": method, "arguments": arguments}) + "</tool_call>"


def _task(task_id: str) -> dict:
    return next(t for t in builtin_tasks() if t["id"] == task_id)


def _play_oracle(env: ConversationEnv, index: int) -> tuple[float, dict, list[dict]]:
    env.reset(options={"task_index": index})
    total, infos, done = 0.0, [], False
    while not done:
        _, _, terminated, truncated, info = env.step(env.oracle_action())
        total += info["res_reward"]
        infos.append(info)
        done = terminated or truncated
    return total, info, infos


def test_check_env_and_pickle():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make(ENV_ID)
        check_env(env.unwrapped)
    env.reset(seed=3)
    env.step(env.unwrapped.oracle_action())
    clone = pickle.loads(pickle.dumps(env.unwrapped))
    assert clone.states() == env.unwrapped.states()


def test_shipped_tasks_cover_three_domains_and_the_required_kinds():
    tasks = builtin_tasks()
    assert len(tasks) >= 150
    domains = collections.Counter(t["domain"] for t in tasks)
    assert len(domains) >= 3 and min(domains.values()) >= 50
    assert {len(t["turns"]) for t in tasks} == {1, 2, 3, 4, 5}
    assert any(isinstance(turn, dict) and turn.get("new_tools") for t in tasks for turn in t["turns"])
    kinds = {t["kind"] for t in tasks}
    assert {"ask", "refuse", "transfer", "new_tool", "conflict"} <= kinds
    assert any(calls == [] for t in tasks for calls in t["solution"])  # turns whose right action is no call


def test_every_shipped_task_is_solved_by_its_oracle_with_full_reward():
    env = ConversationEnv()
    reasons = collections.Counter()
    for index in range(len(env.tasks)):
        total, info, infos = _play_oracle(env, index)
        assert info["success"], (env.tasks[index]["id"], [i.get("state_diff") for i in infos])
        assert total == pytest.approx(1.0)
        assert info["status"] == EpisodeStatus.ENV_DONE
        assert info["turn_scores"] == [1.0] * len(env.tasks[index]["turns"]) or info["end_reason"] == "transfer"
        assert all(call["ok"] for i in infos for call in i["tool_calls"])
        reasons[info["end_reason"]] += 1
    assert set(reasons) == {"last_turn", "transfer"}


def test_answering_without_tools_fails_the_state_check_with_a_readable_diff():
    env = ConversationEnv()
    env.reset(options={"task": _task("orders-0000")})
    _, reward, terminated, truncated, info = env.step("Your order O-1 is cancelled.")
    assert info["turn_ended"] and not info["turn_passed"] and info["turn_score"] == 0.0
    assert info["res_reward"] == 0.0
    assert "OrderService.orders['O-1']['status']: expected 'cancelled', got 'pending'" in info["state_diff"]
    assert any(line.startswith("OrderService.products[") and "stock" in line for line in info["state_diff"])


def test_turn_flow_next_user_message_rewards_and_final_info():
    task = _task("calendar-0000")  # create an event, then invite one more person
    env = ConversationEnv(tasks=[task])
    obs, info = env.reset(seed=0)
    assert info["turn"] == 0 and info["num_turns"] == len(task["turns"])
    assert [m["role"] for m in obs] == ["system", "user"]
    obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    assert obs[-1] == {"role": "tool", "content": "E-3"}
    assert "turn_ended" not in info and info["turn"] == 0 and info["res_reward"] == 0.0
    assert info["toolcall_reward"] == pytest.approx(0.1)
    obs, reward, terminated, truncated, info = env.step("Booked it.")
    assert info["turn_ended"] and info["turn_passed"] and info["state_diff"] == []
    assert info["res_reward"] == pytest.approx(1 / len(task["turns"]))
    assert obs[-1] == {"role": "user", "content": task["turns"][1]}
    assert not (terminated or truncated)
    # the second turn: answer without acting
    obs, reward, terminated, truncated, info = env.step("Sure, done!")
    assert info["turn"] == 1 and not info["turn_passed"]
    assert any("attendees" in line for line in info["state_diff"])


def test_solution_replay_is_cumulative_so_a_missed_turn_keeps_later_turns_scorable():
    task = _task("fs-0001")  # read a file, then copy it
    env = ConversationEnv(tasks=[task])
    env.reset(seed=0)
    env.step(_call("cd", folder="docs"))
    _, _, _, _, info = env.step("I could not read it.")  # state right, expected output missing
    assert not info["turn_passed"] and info["state_diff"] == [] and info["missing_outputs"]
    while True:
        _, _, terminated, truncated, info = env.step(env.oracle_action())
        if info.get("turn_ended") and info["turn"] == 1:
            assert info["turn_passed"]
        if terminated or truncated:
            break
    assert info["turn_scores"][0] == 0.0 and not info["success"]


def test_tools_that_arrive_mid_conversation():
    task = _task("fs-0003")  # find arrives at turn 1
    assert task["kind"] == "new_tool"
    env = ConversationEnv(tasks=[task])
    _, info = env.reset(seed=0)
    assert "find" not in [s["function"]["name"] for s in info["tools"]]
    _, _, _, _, info = env.step(_call("find", name="x"))
    assert info["tool_calls"][0]["ok"] is False and "unknown tool 'find'" in info["error"]
    assert info["tool_calls"][0]["kind"] == "unknown_tool"
    _, _, _, _, info = env.step("<tool_call>{not json</tool_call>")
    assert len(info["parse_errors"]) == 1 and info["tool_calls"] == []
    env.reset(seed=0)
    env.step(env.oracle_action())
    _, _, _, _, info = env.step(env.oracle_action())  # ends turn 0: the next user message brings find
    assert "find" in [s["function"]["name"] for s in info["tools"]]
    _, _, _, _, info = env.step(env.oracle_action())
    assert info["tool_calls"][0]["ok"] and "projects/" in info["tool_calls"][0]["output"]


def test_new_tools_are_described_in_the_user_message_when_tools_in_prompt():
    env = ConversationEnv(tasks=[_task("fs-0003")], tools_in_prompt=True)
    env.reset(seed=0)
    env.step(env.oracle_action())
    obs, _, _, _, info = env.step(env.oracle_action())
    assert info["tools"] == [] and "New tools are available" in obs[-1]["content"] and "find" in obs[-1]["content"]


def test_transfer_tool_ends_the_conversation():
    task = _task("orders-0003")
    env = ConversationEnv(tasks=[task])
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(_call("transfer_to_human", reason="now") + _call("list_products"))
    assert terminated and info["end_reason"] == "transfer" and info["status"] == EpisodeStatus.ENV_DONE
    assert "skipped: the episode ended (transfer)" in info["tool_calls"][1]["error"]
    assert info["turn_scores"] == [0.0] and not info["success"]  # transferred too early: turn 0 wanted no call


def test_limits_per_turn_and_per_episode_truncate():
    env = ConversationEnv(tasks=[_task("fs-0000")], max_tool_calls_per_turn=3, max_tool_calls_per_step=8)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(_call("pwd") * 5)
    assert truncated and not terminated and info["end_reason"] == "tool_call_limit"
    assert info["status"] == EpisodeStatus.MAX_STEPS
    assert [c["ok"] for c in info["tool_calls"]] == [True, True, True, False, False]
    env = ConversationEnv(tasks=[_task("fs-0000")], max_steps=2)
    env.reset(seed=0)
    env.step(_call("pwd"))
    _, _, terminated, truncated, info = env.step(_call("ls"))
    assert truncated and info["end_reason"] == "max_steps" and info["success"] is False
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("hello")


def test_policy_output_finish_reasons():
    env = ConversationEnv(tasks=[_task("fs-0000")])
    env.reset(seed=0)
    _, _, _, truncated, info = env.step(PolicyOutput(text="<tool_call>{", finish_reason="length"))
    assert truncated and info["status"] == EpisodeStatus.TRUNCATION and info["end_reason"] == "policy_length"


def test_random_text_never_raises():
    env = gym.make(ENV_ID)
    env.action_space.seed(0)
    for seed in range(40):
        env.reset(seed=seed)
        done = False
        while not done:
            action = env.action_space.sample()
            _, reward, terminated, truncated, info = env.step(action)
            assert isinstance(reward, float)
            done = terminated or truncated
    junk = ['<tool_call>{"name": "cd", "arguments": {"folder": 3}}</tool_call>', "<tool_call>not json</tool_call>",
            '<tool_call>{"name": "rm", "arguments": {"file_name": "' + "x" * 10000 + '"}}</tool_call>',
            "<answer>done</answer>", ""]
    env.reset(seed=1)
    for text in junk:
        _, _, terminated, truncated, _ = env.step(text)
        if terminated or truncated:
            env.reset(seed=1)


class _Session:
    """A conversation policy: write a file named after the session, read it back, list the folder, reply."""

    def act(self, messages, *, session_id, tools=None):
        name = session_id.replace("/", "_") + ".txt"
        tool_messages = 0
        for message in reversed(messages):
            if message["role"] == "user":
                break
            tool_messages += message["role"] == "tool"
        if messages[-1]["role"] == "user":
            return _call("write", file_name=name, content=session_id)
        if tool_messages == 1:
            time.sleep(0.002)  # let other episodes interleave between the write and the read
            return _call("cat", file_name=name) + _call("ls")
        return "Done."

    async def aact(self, messages, *, session_id, tools=None):
        return self.act(messages, session_id=session_id, tools=tools)

    def close_session(self, session_id):
        pass


def test_parallel_episodes_of_one_task_have_independent_states():
    task = dict(_task("fs-0004"))  # one turn after another in the root folder
    task = {**task, "turns": task["turns"][:1], "solution": [[]], "expected_outputs": [[]]}
    batch = collect(lambda: ConversationEnv(tasks=[task]), _Session(), tasks=[task], num_episodes=64,
                    n_parallel=8, progress=False, seed=5)
    assert len(batch) == 64
    ids = set()
    for trajectory in batch:
        steps = trajectory.steps
        assert trajectory.status == EpisodeStatus.ENV_DONE and len(steps) == 3
        written, listing = steps[2].observation.split("\n", 1)
        files = [n for n in json.loads(listing) if n.endswith(".txt") and n != "todo.txt"]
        assert len(files) == 1 and files[0] == written.replace("/", "_") + ".txt"  # no other episode's file
        ids.add(written)
    assert len(ids) == 64


class _BareCalendar:
    """A class named like a shipped one but without its methods."""


def test_tasks_are_checked_against_the_env_class_map_even_after_a_default_env():
    # The shipped tasks are validated once per env class and cached; an env with another class
    # map must still check them against its own classes, whichever env was built first.
    ConversationEnv().close()
    with pytest.raises(ValueError, match=r"tasks\[\d+\] .*Calendar"):
        ConversationEnv(classes={"Calendar": _BareCalendar})
    ConversationEnv().close()  # and the default env still builds from the shipped tasks
