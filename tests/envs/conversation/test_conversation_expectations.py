"""Conversation turns whose right move is to ask or to refuse: the reply and the state are graded."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agent_gym.env.spaces import SAMPLE_CHARSET
from agent_gym.envs.conversation import ConversationEnv, builtin_tasks
from agent_gym.envs.conversation.expectations import check_expectation, reply_problem

# Replies that neither ask about anything nor refuse (what a policy gaming the grader would try).
NON_REPLIES = ["ok, sure thing", "Done.", "<answer>yes</answer>", "Anything else?", ""]


def _call(method: str, /, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": method, "arguments": arguments}) + "</tool_call>"


def _task(task_id: str) -> dict:
    return next(t for t in builtin_tasks() if t["id"] == task_id)


def _expect_turns() -> list[tuple[str, int]]:
    return [(t["id"], i) for t in builtin_tasks() for i, turn in enumerate(t["turns"])
            if isinstance(turn, dict) and turn.get("expect")]


def _reach_turn(env: ConversationEnv, turn: int) -> None:
    """Reset and play the oracle until user turn ``turn`` is the current one."""
    env.reset(seed=0)
    while turn > 0:
        _, _, terminated, truncated, info = env.step(env.oracle_action())
        assert not (terminated or truncated)
        if info.get("turn_ended") and info["turn"] == turn - 1:
            return


def _end_turn(env: ConversationEnv, *actions: str) -> dict:
    """Step ``actions``; return the info of the step that ended the turn."""
    for action in actions:
        _, _, _, _, info = env.step(action)
    assert info.get("turn_ended"), info
    return info


def test_every_ask_and_refuse_turn_of_the_shipped_tasks_has_an_expectation():
    turns = _expect_turns()
    assert len({task_id for task_id, _ in turns}) == 78
    for task in builtin_tasks():
        for turn, calls, outputs in zip(task["turns"], task["solution"], task["expected_outputs"], strict=True):
            expect = turn.get("expect") if isinstance(turn, dict) else None
            assert calls or outputs or expect, (task["id"], turn)  # no turn that any reply passes
    kinds = {_task(task_id)["turns"][i]["expect"]["kind"] for task_id, i in turns}
    assert kinds == {"clarify", "refuse"}


def test_replies_that_neither_ask_nor_refuse_score_zero_on_every_such_turn():
    rng = np.random.default_rng(0)
    chars = list(SAMPLE_CHARSET)
    for task_id, turn in _expect_turns():
        env = ConversationEnv(tasks=[_task(task_id)])
        for reply in [*NON_REPLIES, "".join(rng.choice(chars, size=120).tolist())]:
            _reach_turn(env, turn)
            info = _end_turn(env, reply)
            assert info["turn"] == turn and not info["turn_passed"], (task_id, reply)
            assert info["res_reward"] == 0.0 and info["expectation_problems"], (task_id, reply)
        env.close()


def test_the_oracle_meets_every_expectation():
    for task_id, turn in _expect_turns():
        env = ConversationEnv(tasks=[_task(task_id)])
        _reach_turn(env, turn)
        while True:
            _, _, _, _, info = env.step(env.oracle_action())
            if info.get("turn_ended"):
                break
        expect = _task(task_id)["turns"][turn]["expect"]
        assert info["turn_passed"] and info["expectation"] == expect["kind"], (task_id, info)
        assert info["expectation_problems"] == [] and info["res_reward"] > 0
        env.close()


def test_a_question_about_the_missing_detail_passes_and_other_questions_fail():
    env = ConversationEnv(tasks=[_task("fs-0002")])  # two drafts in docs: ask which one
    for reply, passed in [("Which draft do you mean?", True),
                          ("<think>Two drafts.</think>Sure, which one should I delete?", True),
                          ("I will delete the draft.", False),  # names the detail but asks nothing
                          ("Is there anything else I can do for you?", False),  # a question, not about the draft
                          ("<think>Which draft?</think>Done.", False)]:  # the thought is not the reply
        env.reset(seed=0)
        info = _end_turn(env, reply)
        assert info["turn_passed"] is passed, (reply, info["expectation_problems"])
        assert info["expectation"] == "clarify"
    env.reset(seed=0)
    info = _end_turn(env, "Done.")
    assert info["expectation_problems"] == ["the reply asks no question; it should ask which of the two drafts "
                                            "to delete"]


def test_a_turn_that_performs_the_action_fails_even_when_it_asks():
    task = _task("fs-0002")
    draft = task["turns"][1].split()[-1].rstrip(".")  # "The one called draft_x.txt."
    env = ConversationEnv(tasks=[task])
    env.reset(seed=0)
    _, _, _, _, acted = env.step(_call("cd", folder="docs") + _call("rm", file_name=draft))
    assert [call["ok"] for call in acted["tool_calls"]] == [True, True]
    info = _end_turn(env, "Which draft did you mean?")
    assert not info["turn_passed"] and info["res_reward"] == 0.0 and info["state_diff"]
    assert any(p.startswith("the state must not change on this turn") for p in info["expectation_problems"])


def test_look_ups_that_leave_the_state_as_it_was_are_allowed():
    env = ConversationEnv(tasks=[_task("orders-0001")])  # two pending orders: ask which one
    env.reset(seed=0)
    customer = env.task["initial_state"]["OrderService"]["orders"]["O-1"]["customer"]
    info = _end_turn(env, _call("find_orders", customer=customer), "You have O-1 and O-4 pending: which order?")
    assert info["turn_passed"] and info["expectation_problems"] == []
    fs = ConversationEnv(tasks=[_task("fs-0002")])
    fs.reset(seed=0)
    info = _end_turn(fs, _call("cd", folder="docs") + _call("ls") + _call("cd", folder=".."), "Which draft?")
    assert info["turn_passed"], info["expectation_problems"]


@pytest.mark.parametrize(("task_id", "reply", "passed"), [
    ("orders-0002", "Sorry, I can't cancel O-3 because it has already shipped.", True),
    ("orders-0002", "Sorry, I can't do that.", False),  # no reason
    ("orders-0002", "Order O-3 has shipped.", False),  # no refusal
    ("calendar-0003", "I'm afraid that slot is taken: it overlaps your other meeting.", True),
    ("fs-0004", "I cannot remove projects, the folder isn't empty.", True),
    ("orders-0003", "Unfortunately it is the only item in the order, so it cannot be removed.", True),
])
def test_refusals_must_refuse_and_give_the_reason(task_id, reply, passed):
    env = ConversationEnv(tasks=[_task(task_id)])
    env.reset(seed=0)
    info = _end_turn(env, reply)
    assert info["expectation"] == "refuse" and info["turn_passed"] is passed, info["expectation_problems"]


def test_a_refusal_after_doing_what_was_refused_fails():
    task = _task("fs-0004")  # delete the non-empty projects folder: refuse
    env = ConversationEnv(tasks=[task])
    env.reset(seed=0)
    name = next(n for n in task["initial_state"]["FileSystem"]["root"]["projects"])
    info = _end_turn(env, _call("cd", folder="projects") + _call("rm", file_name=name) + _call("cd", folder=".."),
                     _call("rm", file_name="projects"), "Sorry, I can't: the folder is not empty.")
    assert not info["turn_passed"] and "FileSystem.root['projects']" in info["expectation_problems"][-1]


def test_turns_without_an_expectation_keep_the_old_grading():
    task = _task("fs-0002")
    old = {**task, "turns": [t["content"] if isinstance(t, dict) else t for t in task["turns"]]}
    env = ConversationEnv(tasks=[old])
    env.reset(seed=0)
    assert env.oracle_action() == "Done."
    info = _end_turn(env, "ok, sure thing")
    assert info["turn_passed"] and info["expectation"] is None and info["expectation_problems"] == []


def test_simulated_users_are_not_graded_on_expectations():
    class User:
        def act(self, messages, *, session_id, tools=None):
            return "Thanks ###STOP###"

    task = _task("fs-0002")
    env = ConversationEnv(tasks=[{**task, "turns": task["turns"][:1], "solution": [[]], "expected_outputs": [[]]}],
                          user=User())
    env.reset(seed=0)
    _, _, terminated, _, info = env.step("Done.")  # the user may have given the detail before being asked
    assert terminated and info["success"] and info["expectation"] is None


def test_reply_matching_is_normalised_and_matches_where_words_start():
    refuse = check_expectation({"kind": "refuse", "reason": "it overlaps", "terms": ["overlap", "O-1"]})
    assert refuse["reply"] == "Sorry, I can't do that: it overlaps."
    assert reply_problem(refuse, "CAN’T — OVERLAPPING!") is None
    assert reply_problem(refuse, "I cannot change order o 1.") is None
    assert reply_problem(refuse, "I cannot; it is nonoverlapping.") is not None  # not where a word starts
    clarify = check_expectation({"kind": "clarify", "slot": "the date", "terms": ["date"]})
    assert clarify["reply"] == "Could you tell me the date?" and reply_problem(clarify, "Which dates？") is None


@pytest.mark.parametrize(("expect", "message"), [
    ({"kind": "ask", "slot": "x", "terms": ["x"]}, "'kind': expected one of ['clarify', 'refuse']"),
    ({"kind": "clarify", "terms": ["x"]}, "'slot': expected a non-empty str"),
    ({"kind": "refuse", "reason": "r", "terms": []}, "'terms': expected a non-empty list"),
    ({"kind": "refuse", "reason": "r", "terms": ["?!"]}, "'terms': expected a non-empty list"),
    ({"kind": "clarify", "slot": "x", "terms": ["x"], "reason": "r"}, "got unknown ['reason']"),
    ({"kind": "clarify", "slot": "the day", "terms": ["date"]}, "does not meet the expectation"),
    ({"kind": "refuse", "reason": "r", "terms": ["r"], "reply": "Fine."}, "does not meet the expectation"),
    ("clarify", "expected a dict with 'kind'"),
])
def test_bad_expectations_are_rejected_at_load_naming_the_turn(expect, message):
    task = {"id": "t-1", "classes": ["FileSystem"], "turns": ["hello", {"content": "delete it", "expect": expect}],
            "solution": [[], []]}
    with pytest.raises(ValueError) as caught:
        ConversationEnv(tasks=[task])
    assert "tasks[0] (id 't-1'): field 'turns[1].expect'" in str(caught.value) and message in str(caught.value)
    with pytest.raises(ValueError, match=r"field 'turns\[0\]': expected keys among \['content', 'expect', "):
        ConversationEnv(tasks=[{**task, "turns": [{"content": "hi", "expects": {}}, "x"]}])
