"""Session routing: stickiness, load balancing, failover along the hash ring."""

from __future__ import annotations

import pytest

from agent_gym.policy.routing import HashRing, SessionRouter, normalize_address

SERVERS = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]


def test_normalize_address():
    assert normalize_address("127.0.0.1:8000") == ("127.0.0.1:8000", "http://127.0.0.1:8000")
    assert normalize_address("http://host:9/v1/") == ("host:9", "http://host:9")
    assert normalize_address("https://h/prefix") == ("h", "https://h/prefix")
    for bad in ["", "  ", "http://"]:
        with pytest.raises(ValueError, match="IP:PORT"):
            normalize_address(bad)


def test_hash_ring_is_stable_and_complete():
    ring = HashRing(SERVERS)
    order = ring.preference("session-42")
    assert sorted(order) == sorted(SERVERS)
    assert HashRing(list(reversed(SERVERS))).preference("session-42") == order
    firsts = {ring.preference(f"s{i}")[0] for i in range(200)}
    assert firsts == set(SERVERS)


def test_sticky_and_least_loaded():
    router = SessionRouter(SERVERS)
    picks = [router.pick(f"s{i}") for i in range(30)]
    assert all(router.pick(f"s{i}") == picks[i] for i in range(30))  # sticky
    counts = {s: picks.count(s) for s in SERVERS}
    assert set(counts.values()) == {10}  # new sessions go to the least-loaded server
    router.release("s0")
    assert router.assigned("s0") is None
    assert router.pick("new") == picks[0]  # the server that lost a session is now least loaded


def test_failover_and_recovery():
    now = [0.0]
    router = SessionRouter(SERVERS, unhealthy_seconds=5.0, clock=lambda: now[0])
    first = router.pick("s")
    router.mark_unhealthy(first)
    second = router.pick("s")
    assert second != first
    assert router.pick("s") == second  # sticky on the new server
    now[0] = 10.0
    assert router.healthy(first)
    assert router.pick("s") == second  # no flapping back
    assert router.pick("s", exclude=[second]) != second


def test_all_unhealthy_uses_first_to_recover():
    now = [0.0]
    router = SessionRouter(SERVERS[:2], clock=lambda: now[0])
    router.mark_unhealthy(SERVERS[0], 5.0)
    router.mark_unhealthy(SERVERS[1], 1.0)
    assert router.pick("s") == SERVERS[1]


def test_in_flight_counts():
    router = SessionRouter(SERVERS[:1])
    router.begin(SERVERS[0])
    assert router.load()[SERVERS[0]] == (0, 1)
    router.end(SERVERS[0])
    assert router.load()[SERVERS[0]] == (0, 0)
    with pytest.raises(ValueError, match="at least one"):
        SessionRouter([])
