"""AsyncPolicyBase: sync act over aact, also inside a running event loop."""

from __future__ import annotations

import asyncio
import threading

from agent_gym.policy import AsyncPolicyBase, Policy
from agent_gym.types import PolicyOutput


class EchoPolicy(AsyncPolicyBase):
    def __init__(self) -> None:
        super().__init__()
        self.loops: set[int] = set()
        self.closed: list[str] = []

    async def aact(self, messages, *, session_id, tools=None):
        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        return PolicyOutput(text=messages[-1]["content"].upper())

    def close_session(self, session_id):
        self.closed.append(session_id)


def test_protocol_and_act_outside_loop():
    policy = EchoPolicy()
    assert isinstance(policy, Policy)
    assert policy.act([{"role": "user", "content": "hi"}], session_id="s").text == "HI"
    assert policy.act([{"role": "user", "content": "yo"}], session_id="s").text == "YO"
    assert len(policy.loops) == 1  # one private loop reused across calls
    policy.close()
    assert policy.act([{"role": "user", "content": "again"}], session_id="s").text == "AGAIN"
    policy.close()


def test_act_inside_running_loop():
    """Like a Jupyter cell: the calling thread already runs an event loop."""
    policy = EchoPolicy()

    async def cell():
        return policy.act([{"role": "user", "content": "nb"}], session_id="s")

    assert asyncio.run(cell()).text == "NB"
    policy.close()


def test_act_from_many_threads():
    policy = EchoPolicy()
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(policy.act([{"role": "user", "content": f"m{i}"}],
                                                                       session_id=str(i)).text))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"M{i}" for i in range(8))
    with policy:
        pass
