"""Carry-over of dynamic sampling: surplus informative groups train in the next batch, stale ones are dropped."""

from __future__ import annotations

import pytest
from batch_fakes import ScriptedOutcomePolicy, tool_use_tasks

from agent_gym.errors import ConfigError
from agent_gym.report import Report
from agent_gym.rollout import DynamicSampling, RolloutStream, collect
from agent_gym.rollout.carry_over import CarryOver

ENV_ID = "agent_gym/ToolUse-v0"
TASKS = tool_use_tasks(3)
LEARN_A, LEARN_B, EASY = TASKS  # two learnable tasks (one right, one wrong answer) and an easy one


def _plan(task, sample):
    return "right" if task is EASY or task["id"] == EASY["id"] else ("right", "wrong")[sample]


def _collect(policy, tasks, dynamic, **kwargs):
    return collect(ENV_ID, policy, tasks=tasks, samples_per_task=2, n_parallel=4, max_steps=3, progress=False,
                   dynamic_sampling=dynamic, **kwargs)


def _surplus_batch(dynamic, policy):
    """A batch of 3 groups with one informative group beyond it.

    Round one runs the three tasks (two kept, share 2/3); round two samples ceil(1 / (2/3)) = 2 groups,
    cycling from the start of the list: two learnable ones, so one is surplus.
    """
    episodes = _collect(policy, [LEARN_A, LEARN_B, EASY], dynamic)
    assert len({t.group_id for t in episodes}) == 3
    assert (dynamic.stats.groups, dynamic.stats.kept, dynamic.stats.surplus) == (5, 4, 1)
    return episodes


def test_surplus_groups_are_dropped_and_counted_by_default():
    dynamic = DynamicSampling()
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    _surplus_batch(dynamic, policy)
    assert (dynamic.stats.surplus_dropped, dynamic.carried_held) == (1, 0)
    again = _collect(policy, [EASY, LEARN_A], dynamic)  # nothing carried: the batch is sampled afresh
    assert dynamic.stats.carried == 0 and dynamic.last_carried == []
    assert [t.task["id"] for t in again] == [LEARN_A["id"]] * 4  # two learnable groups, the easy one dropped


def test_a_surplus_group_is_carried_into_the_next_batch_with_its_version_and_staleness():
    dynamic = DynamicSampling(carry_over=4)
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    first = _surplus_batch(dynamic, policy)
    assert dynamic.carried_held == 1 and dynamic.stats.surplus_dropped == 0
    seen = []
    second = _collect(policy, [EASY], dynamic, on_episode=seen.append)
    # the carried group fills the one-group batch: nothing is sampled, the easy task never runs
    assert seen == [] and len(second) == 2 and [t.idx for t in second] == [0, 1]
    assert {t.task["id"] for t in second} == {LEARN_B["id"]}
    assert not {t.group_id for t in second} & {t.group_id for t in first}
    [carried] = dynamic.last_carried
    assert (carried.version, carried.staleness, carried.group_id) == (0, 1, second[0].group_id)
    stats = dynamic.stats.as_dict()
    assert (stats["batches"], stats["carried"], stats["carry_stale"], stats["groups"]) == (2, 1, 0, 5)
    text = Report.from_trajectories(second, filtered=stats).to_text()
    assert "carried" in text and "surplus" in text
    third = _collect(policy, [LEARN_A], dynamic)  # the buffer is empty again: sampled afresh
    # ceil(1 / share 4/5) = 2 groups for the one wanted: the second is carried under version 2
    assert dynamic.last_carried == [] and dynamic.stats.groups == 7 and len(third) == 2
    assert dynamic.stats.surplus == 2 and dynamic.carried_versions == [2]


def test_a_carried_group_older_than_the_staleness_bound_is_dropped_and_counted():
    dynamic = DynamicSampling(carry_over=4, carry_max_staleness=1)
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    policy.weight_version = 3  # the trainer labels its weights: the policy's version is the batch's
    _surplus_batch(dynamic, policy)
    policy.weight_version = 5  # two updates later
    episodes = _collect(policy, [LEARN_A], dynamic)
    assert dynamic.last_carried == [] and dynamic.carried_versions == [5]  # the new batch's own surplus
    assert (dynamic.stats.carry_stale, dynamic.stats.carried) == (1, 0)
    assert [t.task["id"] for t in episodes] == [LEARN_A["id"]] * 2  # sampled afresh under version 5


def test_without_a_weight_version_each_batch_counts_as_one_update():
    dynamic = DynamicSampling(carry_over=4, carry_max_staleness=0)  # only groups of the same batch
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    _surplus_batch(dynamic, policy)
    _collect(policy, [LEARN_A], dynamic)
    assert (dynamic.stats.carry_stale, dynamic.stats.carried, dynamic.stats.batches) == (1, 0, 2)


def test_a_full_buffer_drops_its_oldest_group():
    dynamic = DynamicSampling(carry_over=1, carry_max_staleness=None)
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    _surplus_batch(dynamic, policy)
    dynamic.carry([[object(), object()]], version=7)  # a newer surplus group: the older one goes
    assert dynamic.carried_held == 1 and dynamic.stats.surplus_dropped == 1 and dynamic.stats.surplus == 2
    assert dynamic.carried_versions == [7]


def test_a_carried_group_whose_id_a_fresh_group_reuses_gets_its_own():
    dynamic = DynamicSampling(carry_over=4)
    policy = ScriptedOutcomePolicy(TASKS, _plan)
    _surplus_batch(dynamic, policy)  # the surplus group is group 4 of seed 0, LEARN_B
    # the same seed again: carried group first, then fresh groups 0..4 of LEARN_B, group 4 with the same id
    episodes = _collect(policy, [LEARN_B] * 6, dynamic)
    ids = [t.group_id for t in episodes[::2]]
    assert len(set(ids)) == 6 and ids[0].endswith("@c1") and ids[0].removesuffix("@c1") in ids[1:]


def test_the_buffer_hands_out_oldest_first_and_drops_stale_groups():
    buffer = CarryOver(capacity=3, max_staleness=1)
    assert buffer.put([["a"], ["b"]], version=0) == 0
    assert buffer.put([["c"], ["d"]], version=1) == 1  # over capacity: "a" goes
    taken, stale = buffer.take(1, version=2)  # "b" is two versions old
    assert ([g.trajectories for g in taken], [g.staleness for g in taken], stale) == ([["c"]], [1], 1)
    assert len(buffer) == 1 and buffer.versions() == [1]
    assert buffer.clear() == 1 and len(buffer) == 0


def test_carry_over_options_are_checked():
    with pytest.raises(ConfigError, match="carry_over"):
        DynamicSampling(carry_over=-1)
    with pytest.raises(ConfigError, match="carry_max_staleness"):
        DynamicSampling(carry_over=2, carry_max_staleness=-1)
    with pytest.raises(ConfigError, match="carry_over"):
        RolloutStream(ENV_ID, None, [], dynamic_sampling=DynamicSampling(carry_over=2))


def test_restoring_the_counters_empties_the_buffer():
    dynamic = DynamicSampling(carry_over=4)
    _surplus_batch(dynamic, ScriptedOutcomePolicy(TASKS, _plan))
    state = dynamic.state_dict()
    dynamic.load_state_dict(state)
    assert dynamic.carried_held == 0 and dynamic.stats.surplus == 1 and dynamic.stats.batches == 1
