"""Conversation-v0 scoring against the customer-service benchmark's rule: expected outputs only in the replies to
the user, thousands separators ignored and other punctuation kept; strict state comparison on request."""

from __future__ import annotations

import json

import pytest

from agent_gym.envs.conversation import ConversationEnv
from agent_gym.envs.conversation.scoring import normalize_output, output_found, strict_equal


class Ledger:
    """A customer's account (the test's own tool class)."""

    def __init__(self, total: float = 8276.23, limit: float = 50.0) -> None:
        self.total = total
        self.limit = limit

    def get_total(self) -> float:
        """The account's total."""
        return self.total

    def set_limit(self, amount: int | float) -> str:
        """Set the spending limit."""
        self.limit = amount
        return "ok"


TASK = {
    "id": "ledger-0",
    "classes": ["Ledger"],
    "initial_state": {"Ledger": {"total": 8276.23, "limit": 50.0}},
    "turns": ["What is my total?", "Set my limit to 100."],
    "solution": [[{"name": "get_total", "arguments": {}}], [{"name": "set_limit", "arguments": {"amount": 100.0}}]],
    "expected_outputs": [["8276.23"], []],
}


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def first_turn(env, messages):
    env.reset(options={"task_index": 0})
    info = {}
    for message in messages:
        _, _, _, _, info = env.step(message)
    return info


def test_outputs_are_normalised_like_the_benchmark():
    assert output_found("8276.23", ["Your total is 8,276.23 dollars."])
    assert output_found("1234567", ["It is 1,234,567."])
    assert not output_found("8276.23", ["Your total is 8276-23."])
    assert not output_found("8276.23", ["Your total is 8276 23."])
    assert output_found("Sofia Rossi", ["the owner is SOFIA   ROSSI."])
    assert normalize_output("Ｔotal 1,000") == "total 1000"
    assert normalize_output("a,b and 12,34") == "a,b and 12,34"  # not a thousands separator


@pytest.mark.parametrize("reply, passed", [
    ("Your total is 8,276.23.", True),
    ("Your total is 8276.23.", True),
    ("Your total is 8276-23.", False),
    ("Here you go.", False),
])
def test_the_reply_to_the_user_is_checked(reply, passed):
    env = ConversationEnv(tasks=[TASK], classes={"Ledger": Ledger})
    info = first_turn(env, [call("get_total"), reply])
    assert info["turn_passed"] is passed and info["missing_outputs"] == ([] if passed else ["8276.23"])


def test_a_number_written_only_beside_a_tool_call_is_not_told_to_the_user():
    env = ConversationEnv(tasks=[TASK], classes={"Ledger": Ledger})
    info = first_turn(env, ["The total is 8276.23. " + call("get_total"), "Done."])
    assert not info["turn_passed"] and info["missing_outputs"] == ["8276.23"]


def test_strict_state_tells_100_from_100_0():
    assert strict_equal({"a": [1.0, "x"]}, {"a": [1.0, "x"]}) and not strict_equal({"a": 100}, {"a": 100.0})
    assert not strict_equal(True, 1) and strict_equal(None, None)
    for strict, passed in ((False, True), (True, False)):
        env = ConversationEnv(tasks=[TASK], classes={"Ledger": Ledger}, strict_state=strict)
        first_turn(env, [call("get_total"), "Your total is 8276.23."])
        env.step(call("set_limit", amount=100))
        _, _, _, _, info = env.step("Done.")
        assert info["turn_passed"] is passed, info["state_diff"]
        if strict:
            assert info["state_diff"] == ["Ledger.limit: expected 100.0 (float), got 100 (int)"]
