"""Dynamic sampling: groups judged by outcome (never shaping), infra failures outside the variance, slots kept."""

from __future__ import annotations

import pytest
from batch_fakes import ScriptedOutcomePolicy, tool_use_tasks

from agent_gym.errors import ConfigError
from agent_gym.report import Report
from agent_gym.rollout import DynamicSampling, EnvSource, RolloutStream, TaskSampler, collect
from agent_gym.rollout.dynamic_sampling import judge_group
from agent_gym.types import EpisodeStatus

ENV_ID = "agent_gym/ToolUse-v0"
TASKS = tool_use_tasks(5)
PLANS = {  # per task: the behaviour of each of three siblings, and the verdict it must get
    TASKS[0]["id"]: (("tool_wrong", "wrong", "wrong"), "too_hard"),  # differs only in shaping
    TASKS[1]["id"]: (("tool_right", "right", "right"), "too_easy"),  # differs only in shaping
    TASKS[2]["id"]: (("right", "right", "raise"), "too_easy"),  # the infra failure's 0 is no outcome
    TASKS[3]["id"]: (("right", "wrong", "raise"), "kept"),  # learnable, infra failure or not
    TASKS[4]["id"]: (("right", "raise", "raise"), "infra"),  # one valid member: nothing to compare
}


def _plan(task, sample):
    return PLANS[task["id"]][0][sample]


def _groups(trajectories, size=3):
    return [trajectories[i:i + size] for i in range(0, len(trajectories), size)]


def test_groups_are_judged_by_their_valid_members_outcomes_never_by_shaping():
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    episodes = collect(ENV_ID, policy, tasks=TASKS, samples_per_task=3, n_parallel=6, max_steps=3, progress=False)
    for group in _groups(episodes):
        expected = PLANS[group[0].task["id"]][1]
        assert judge_group(group) == expected, group[0].task["id"]
        assert judge_group(group, outcome="success") == expected
    shaped = _groups(episodes)[0]  # same outcome, different shaped totals
    assert len({t.trajectory_reward for t in shaped}) == 2 and len({t.metrics["res_reward"] for t in shaped}) == 1
    assert {t.status for t in _groups(episodes)[4]} == {EpisodeStatus.ENV_DONE, EpisodeStatus.POLICY_ERROR}


def test_collect_samples_until_enough_informative_groups_and_counts_the_dropped():
    dynamic = DynamicSampling(max_groups_factor=2.0)
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    episodes = collect(ENV_ID, policy, tasks=TASKS, samples_per_task=3, n_parallel=6, max_steps=3, progress=False,
                       dynamic_sampling=dynamic, seed=4)
    # only the learnable task is informative: 5 wanted, 10 groups sampled at most -> 2 kept
    assert [t.task["id"] for t in episodes] == [TASKS[3]["id"]] * 6
    assert [t.idx for t in episodes] == list(range(6))
    assert len({t.group_id for t in episodes}) == 2
    stats = dynamic.stats.as_dict()
    assert stats == {"groups": 10, "kept": 2, "too_easy": 4, "too_hard": 2, "infra": 2, "infra_episodes": 8,
                     "cancelled": 0, "cancelled_episodes": 0, "tokens_saved": 0, "audited": 0, "wrong_cancels": 0,
                     "batches": 1, "surplus": 0, "carried": 0, "carry_stale": 0, "surplus_dropped": 0,
                     "dropped": 8}
    text = Report.from_trajectories(episodes, filtered=stats).to_text()
    assert "Dynamic sampling" in text and "too easy" in text
    state = dynamic.state_dict()
    again = DynamicSampling()
    again.load_state_dict(state)
    assert again.stats == dynamic.stats


def test_collect_without_dropped_groups_returns_every_group():
    dynamic = DynamicSampling()
    policy = ScriptedOutcomePolicy(TASKS, lambda task, sample: ("right", "wrong")[sample])
    episodes = collect(ENV_ID, policy, tasks=TASKS[:3], samples_per_task=2, n_parallel=6, max_steps=3,
                       progress=False, dynamic_sampling=dynamic)
    assert [t.task["id"] for t in episodes[::2]] == [t["id"] for t in TASKS[:3]]
    assert dynamic.stats.groups == 3 and dynamic.stats.dropped == 0


def test_the_stream_drops_uninformative_groups_and_gives_their_slots_back():
    # one group in the staleness window at a time: a dropped group that kept its place would
    # stop the stream; one that kept its slot would leave the next group waiting for ever
    dynamic = DynamicSampling()
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    tasks = [TASKS[0], TASKS[1], TASKS[2], TASKS[4], TASKS[3], TASKS[1], TASKS[3]]
    with RolloutStream(ENV_ID, policy, tasks, samples_per_task=3, concurrency=3, max_staleness=0,
                       groups_per_update=1, max_steps=3, dynamic_sampling=dynamic) as stream:
        first = stream.get(timeout=120)
        stream.update_weights()  # no servers: the version moves, the window lets one more group in
        second = stream.get(timeout=120)
    assert [g.task["id"] for g in (first, second)] == [TASKS[3]["id"]] * 2
    stats = stream.stats
    assert (stats.filtered_too_easy, stats.filtered_too_hard, stats.filtered_infra) == (3, 1, 1)
    assert stats.filtered == 5 and stats.infra_episodes == 5 and stats.handed == 2 and stats.started == 7
    assert policy.max_active <= 3
    assert dynamic.stats.kept == 2


def _primed_sampler(task):
    """A sampler over one task whose pass rate is 1 after a real group all answered right."""
    sampler = TaskSampler([EnvSource(ENV_ID, [task])], seed=0)
    policy = ScriptedOutcomePolicy([task], lambda t, sample: "right")
    sampler.observe(sampler.sample(), collect(ENV_ID, policy, tasks=[task], samples_per_task=2, max_steps=3,
                                               progress=False))
    assert sampler.pass_rate(f"{ENV_ID}/{task['id']}") == 1.0
    return sampler


def test_early_cancel_stops_the_unfinished_siblings_once_the_finished_agree():
    task = TASKS[1]
    sampler = _primed_sampler(task)
    dynamic = DynamicSampling(early_cancel=0.05, min_finished=2)
    # two siblings answer at once, two would take ten minutes: only a cancel ends the group in time
    policy = ScriptedOutcomePolicy([task], lambda t, sample: ("right", "right", "slow_right", "slow_right")[sample],
                                   slow_s=600.0)
    with RolloutStream(None, policy, sampler=sampler, max_groups=1, samples_per_task=4, concurrency=4,
                       max_steps=3, dynamic_sampling=dynamic) as stream:
        assert stream.get(timeout=120) is None
    assert stream.stats.cancelled == 1 and stream.stats.filtered_too_easy == 1
    stats = dynamic.stats
    assert (stats.cancelled, stats.cancelled_episodes, stats.too_easy, stats.kept) == (1, 2, 1, 0)
    assert stats.tokens_saved >= 0 and stats.audited == 0
    assert sampler.metrics()[ENV_ID]["episodes"] == 2 + 2  # the primer's and the two finished, not the cancelled


def test_early_cancel_in_collect_stops_the_unfinished_siblings_too():
    task = TASKS[1]
    sampler = _primed_sampler(task)
    dynamic = DynamicSampling(early_cancel=0.05, min_finished=2, max_groups_factor=1.0)
    policy = ScriptedOutcomePolicy([task], lambda t, sample: ("right", "slow_right", "right", "slow_right")[sample],
                                   slow_s=600.0)
    episodes = collect(None, policy, sampler=sampler, num_episodes=1, samples_per_task=4, n_parallel=4, max_steps=3,
                       progress=False, dynamic_sampling=dynamic)
    assert episodes == []  # the one group sampled was dropped as too easy before its slow siblings ended
    stats = dynamic.stats
    assert (stats.groups, stats.cancelled, stats.cancelled_episodes, stats.too_easy) == (1, 1, 2, 1)
    assert sampler.metrics()[ENV_ID]["episodes"] == 2 + 2


def test_an_audited_cancel_runs_the_group_to_the_end_and_counts_a_wrong_decision():
    task = TASKS[1]
    sampler = _primed_sampler(task)
    dynamic = DynamicSampling(early_cancel=0.05, min_finished=2, cancel_audit=1.0)
    policy = ScriptedOutcomePolicy([task], lambda t, sample: ("right", "right", "slow_right", "slow_wrong")[sample],
                                   slow_s=0.2)
    with RolloutStream(None, policy, sampler=sampler, max_groups=1, samples_per_task=4, concurrency=4,
                       max_steps=3, dynamic_sampling=dynamic) as stream:
        group = stream.get(timeout=120)
    assert group is not None and len(group.trajectories) == 4  # informative after all: kept
    assert (dynamic.stats.audited, dynamic.stats.wrong_cancels, dynamic.stats.cancelled) == (1, 1, 0)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="outcome"):
        DynamicSampling(outcome="trajectory_reward")
    with pytest.raises(ConfigError, match="min_valid"):
        DynamicSampling(min_valid=0)
    with pytest.raises(TypeError, match="dynamic_sampling"):
        RolloutStream(ENV_ID, None, [], dynamic_sampling=True)
    with pytest.raises(ConfigError, match="state"):
        DynamicSampling().load_state_dict({"kept": "many"})
