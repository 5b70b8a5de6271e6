"""RolloutStream's next-episode hints: groups laid out ahead, claimed for envs with expect_reset, none for others."""

from __future__ import annotations

from typing import Any

import pytest
from hinted_envs import HintedEnv, HintedEnvFactory, count_hints
from rollout_fakes import ScriptedPolicy, make_tasks, strip_timings

from agent_gym.errors import AgentGymError
from agent_gym.rollout import RolloutStream, plan_episodes
from agent_gym.rollout.next_reset import LaterEpisodes, SpecQueue
from agent_gym.rollout.stream_plan import GroupPlan


def _stream(hinted: bool, tasks: Any, samples: int = 2, concurrency: int = 4) -> tuple[list[Any], HintedEnvFactory]:
    envs = HintedEnvFactory(hinted)
    with RolloutStream(envs, ScriptedPolicy(delay=0.01), tasks, samples_per_task=samples,
                       concurrency=concurrency, seed=30) as stream:
        groups = list(stream)
    return groups, envs


def _by_task(groups: list[Any]) -> list[Any]:
    return sorted((strip_timings(t.to_dict()) for g in groups for t in g.trajectories),
                  key=lambda r: (r["task"]["id"], r["rollout_id"] if "rollout_id" in r else r["idx"]))


def test_a_stream_tells_each_env_the_episode_it_runs_next():
    tasks = make_tasks(12)
    groups, envs = _stream(True, tasks)
    assert sorted(g.task["id"] for g in groups) == sorted(t["id"] for t in tasks)
    told, right = count_hints(envs)
    episodes = 2 * len(tasks)
    # every episode but the last ones (no next episode) was told its successor, and it ran on the env told
    assert told >= episodes - 2 * 4
    assert right >= told - 4
    # the k-th task's group resets with seed + k, whichever order the groups started in
    for group in groups:
        k = next(i for i, t in enumerate(tasks) if t["id"] == group.task["id"])
        assert {t.group_id.split("-")[0] for t in group.trajectories} == {str(30 + k)}


def test_a_stream_over_envs_without_the_hook_is_unchanged():
    tasks = make_tasks(8)
    plain, envs = _stream(False, tasks)
    assert not any(hasattr(env, "events") for env in envs.built)
    hinted, _ = _stream(True, tasks)
    assert _by_task(plain) == _by_task(hinted)


@pytest.mark.parametrize("hinted", [True, False])
def test_a_task_that_cannot_be_laid_out_is_reported_and_the_others_come_back(hinted):
    tasks = [*make_tasks(2), "not a task", *make_tasks(4)[2:]]
    groups, errors = [], []
    with RolloutStream(HintedEnvFactory(hinted), ScriptedPolicy(delay=0.01), tasks, samples_per_task=2,
                       concurrency=4) as stream:
        while True:
            try:
                group = stream.get(timeout=120)
            except AgentGymError as exc:
                errors.append(exc)
                continue
            if group is None:
                break
            groups.append(group)
    assert sorted(g.task["id"] for g in groups) == ["add-0", "add-1", "add-2", "add-3"]
    assert len(errors) == 1 and isinstance(errors[0].__cause__, TypeError)
    assert "expected dict" in str(errors[0].__cause__)


def test_a_generator_of_tasks_is_read_one_group_at_a_time_and_gets_no_hints_across_groups():
    read: list[str] = []

    def tasks():
        for task in make_tasks(6):
            read.append(task["id"])
            yield task

    plan = GroupPlan(tasks(), None, samples_per_task=2, seed=0, ahead=8)
    first = plan.next()
    assert first is not None and read == ["add-0"] and len(plan.later) == 0
    groups, envs = _stream(True, tasks(), concurrency=2)
    assert len(groups) == 6
    for env in envs.built:  # a hint only within a group (n_parallel 2 = its size: none)
        assert [e for e in env.events if e[0] == "hint"] == []


def test_the_plan_starts_first_a_group_whose_claimed_envs_are_idle():
    plan = GroupPlan(make_tasks(8), None, samples_per_task=2, seed=0, ahead=6)
    first = plan.next()
    assert first is not None and first.task["id"] == "add-0" and len(plan.later) == 6  # groups 1 to 3 laid out
    busy, idle = HintedEnv(), HintedEnv()
    for env in (busy, busy, idle, idle):  # add-0's envs claim add-1 (one of them still running), then add-2
        plan.later.claim(env, first.specs[0])
    assert [e[2]["id"] for e in idle.events] == ["add-2", "add-2"]
    plan.later.claim(idle, plan_episodes(make_tasks(1, offset=7), None, seed=50)[0])  # another group's: add-3
    chosen = plan.next(lambda env: env is idle)
    assert chosen is not None and chosen.task["id"] == "add-2"  # all its episodes claimed by idle envs
    assert plan.later.claimant(chosen.specs[0]) is idle and plan.later.claimant(chosen.specs[1]) is idle
    # add-3 is claimed in part only, add-1 by a busy env: the first laid out starts
    assert [plan.next(lambda env: env is idle).task["id"] for _ in range(2)] == ["add-1", "add-3"]


def test_no_claim_while_each_waiting_episode_has_a_worker_of_its_own_then_a_later_one():
    specs = plan_episodes(make_tasks(2), None, seed=3)
    first, second = plan_episodes(make_tasks(2, offset=5), None, seed=8)
    later = LaterEpisodes()
    later.add([first])
    later.add([second])
    queue, env = SpecQueue(2, workers=2), HintedEnv()
    assert queue.next("a") == 0
    queue.hinter("a", specs, specs[0], later)(env)  # "b" runs episode 1: a later episode is claimed instead
    assert env.events == [("hint", first.seed, first.task)] and queue.next("b") == 1
    other = type(second)(**{**second.__dict__, "env_kwargs": {"max_steps": 2}})
    later.add([other])
    later.started([second])  # started elsewhere: no longer offered
    queue.hinter("b", specs, specs[1], later)(env)  # the next later episode runs on other env kwargs: not claimed
    assert len(env.events) == 1 and len(later) == 2  # the claim (not started) and ``other``
    assert later.claimant(first) is env and later.claimant(first) is None


def test_the_episodes_of_one_run_claim_those_of_one_later_run():
    x0, x1, y0, y1 = plan_episodes(make_tasks(2), None, samples_per_task=2, seed=1)
    p_specs = plan_episodes(make_tasks(1, offset=3), None, samples_per_task=2, seed=20)
    q_specs = plan_episodes(make_tasks(1, offset=4), None, samples_per_task=2, seed=21)
    later = LaterEpisodes()
    later.add(p_specs)
    later.add(q_specs)
    envs = {name: HintedEnv() for name in ("x0", "y0", "x1", "y1")}
    for name, current in (("x0", x0), ("y0", y0), ("x1", x1), ("y1", y1)):  # the runs' episodes start interleaved
        later.claim(envs[name], current)
    assert later.envs_of(p_specs) == [envs["x0"], envs["x1"]]  # all of X's envs: free together when X ends
    assert later.envs_of(q_specs) == [envs["y0"], envs["y1"]]
