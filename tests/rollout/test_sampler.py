"""TaskSampler: env mixtures (each episode with its own env's tools), pass rates over valid samples, bands, state."""

from __future__ import annotations

import collections
import json

import pytest
from batch_fakes import ScriptedOutcomePolicy, tool_use_tasks

from agent_gym.errors import ConfigError
from agent_gym.rollout import Curriculum, EnvSource, RolloutStream, TaskSampler, collect

TOOL_USE = "agent_gym/ToolUse-v0"
RAG = "agent_gym/RAG-v0"
TASKS = tool_use_tasks(12)  # three of each family: arithmetic, units, dates, lookup
BY_FAMILY = {"arithmetic": "right", "dates": "wrong", "units": "raise", "lookup": ("right", "wrong")}


def _by_family(task, sample):
    if task is None:  # a RAG question: answered (wrongly) at once
        return "wrong"
    plan = BY_FAMILY[task["family"]]
    return plan if isinstance(plan, str) else plan[sample % 2]


def _rag_tasks(n):
    from agent_gym.envs.rag.tasks import builtin_tasks

    return list(builtin_tasks()[:n])


def _mixture(seed=0, curriculum=None):
    return TaskSampler([EnvSource(TOOL_USE, TASKS, weight=3.0), EnvSource(RAG, _rag_tasks(4), weight=1.0)],
                       curriculum=curriculum, seed=seed)


def test_a_mixture_gives_each_episode_only_its_own_envs_tools_and_metrics_per_env():
    sampler = _mixture(seed=3)
    policy = ScriptedOutcomePolicy(TASKS, _by_family)
    episodes = collect(None, policy, sampler=sampler, num_episodes=10, samples_per_task=2, n_parallel=4,
                       max_steps=3, progress=False)
    assert len(episodes) == 20
    tools = {TOOL_USE: {"calculator", "convert_units", "date_add", "date_diff", "weekday", "lookup_item"},
             RAG: {"search", "open"}}
    envs = collections.Counter(t.env_id for t in episodes)
    assert set(envs) == {TOOL_USE, RAG}
    for trajectory in episodes:
        assert policy.tools_seen[trajectory.rollout_id] == tools[trajectory.env_id]
    metrics = sampler.metrics()
    assert {name: int(row["episodes"]) for name, row in metrics.items()} == dict(envs)
    assert sum(row["groups"] for row in metrics.values()) == 10
    assert metrics[RAG]["success_rate"] == 0.0


def test_draws_follow_the_weights_and_repeat_with_the_seed():
    first = [_mixture(seed=7).sample().key for _ in range(1)]
    draws = _mixture(seed=7).sample_many(400)
    again = _mixture(seed=7).sample_many(400)
    assert [d.key for d in draws] == [d.key for d in again] and draws[0].key == first[0]
    assert [d.key for d in _mixture(seed=8).sample_many(400)] != [d.key for d in draws]
    share = sum(d.source == TOOL_USE for d in draws) / len(draws)
    assert 0.65 < share < 0.85  # weight 3 : 1


def test_a_seeded_collect_with_a_sampler_repeats():
    def run():
        sampler = TaskSampler([EnvSource(TOOL_USE, TASKS)], curriculum=Curriculum(), seed=11)
        policy = ScriptedOutcomePolicy(TASKS, _by_family)
        episodes = collect(None, policy, sampler=sampler, num_episodes=6, samples_per_task=2, n_parallel=4,
                           max_steps=3, progress=False, seed=5)
        return [(t.rollout_id, t.task["id"], t.status, t.metrics["res_reward"]) for t in episodes], sampler.state_dict()

    assert run() == run()


def test_pass_rates_count_valid_samples_only_and_bands_steer_the_draws():
    curriculum = Curriculum(too_easy=0.9, too_hard=0.1, easy_weight=0.0, hard_weight=0.0, learnable_weight=1.0,
                            unseen_weight=0.0)
    sampler = TaskSampler([EnvSource(TOOL_USE, TASKS)], curriculum=curriculum, seed=1)
    policy = ScriptedOutcomePolicy(TASKS, _by_family)
    # every task once, as a plain list: the sampler observes groups handed to it
    episodes = collect(TOOL_USE, policy, tasks=TASKS, samples_per_task=2, n_parallel=4, max_steps=3,
                       progress=False)
    draws = {d.task["id"]: d for d in (sampler.sample() for _ in range(200))}  # all unseen: drawn uniformly
    assert set(draws) == {t["id"] for t in TASKS}
    for i, task in enumerate(TASKS):
        sampler.observe(draws[task["id"]], episodes[2 * i:2 * i + 2])
    bands = {t["family"]: sampler.band_of(f"{TOOL_USE}/{t['id']}") for t in TASKS}
    assert bands == {"arithmetic": "too_easy", "dates": "too_hard", "units": "unseen", "lookup": "learnable"}
    units = next(t for t in TASKS if t["family"] == "units")
    assert sampler.pass_rate(f"{TOOL_USE}/{units['id']}") is None  # infra failures only: no rate
    assert {d.task["family"] for d in sampler.sample_many(50)} == {"lookup"}  # the only band of weight > 0
    row = sampler.metrics()[TOOL_USE]
    assert row["infra"] == 6 and row["valid"] == 18 and row["tasks_learnable"] == 3


def test_state_round_trips_through_json():
    sampler = _mixture(seed=2, curriculum=Curriculum(min_samples=2))
    policy = ScriptedOutcomePolicy(TASKS, _by_family)
    collect(None, policy, sampler=sampler, num_episodes=6, samples_per_task=2, n_parallel=4, max_steps=3,
            progress=False)
    state = json.loads(json.dumps(sampler.state_dict()))
    restored = _mixture(seed=99, curriculum=Curriculum(min_samples=2))
    restored.load_state_dict(state)
    assert restored.state_dict() == sampler.state_dict()
    assert restored.metrics() == sampler.metrics()
    assert [d.key for d in restored.sample_many(50)] == [d.key for d in sampler.sample_many(50)]
    with pytest.raises(ConfigError, match="state"):
        restored.load_state_dict({"format": 1, "rng": "lost"})


def test_the_stream_draws_from_the_sampler_and_labels_groups_with_their_source():
    sampler = _mixture(seed=5)
    policy = ScriptedOutcomePolicy(TASKS, _by_family)
    with RolloutStream(None, policy, sampler=sampler, max_groups=6, samples_per_task=2, concurrency=4,
                       max_steps=3) as stream:
        groups = list(stream)
    assert len(groups) == 6 and stream.stats.started == 6
    for group in groups:
        assert {t.env_id for t in group.trajectories} == {group.source}
    assert sum(row["groups"] for row in sampler.metrics().values()) == 6


def test_arguments_are_checked():
    with pytest.raises(ConfigError, match="at least one"):
        TaskSampler([])
    with pytest.raises(ConfigError, match="taken"):
        TaskSampler([EnvSource(TOOL_USE, TASKS), EnvSource(TOOL_USE, TASKS)])
    with pytest.raises(ConfigError, match="repeat"):
        TaskSampler([EnvSource(TOOL_USE, [TASKS[0], TASKS[0]])])
    with pytest.raises(ConfigError, match="too_hard"):
        Curriculum(too_easy=0.2, too_hard=0.5)
    with pytest.raises(ConfigError, match="tasks or a sampler"):
        collect(TOOL_USE, None, tasks=TASKS, sampler=_mixture(), num_episodes=1)
    with pytest.raises(ConfigError, match="tasks or a sampler"):
        RolloutStream(TOOL_USE, None)


def test_a_groups_pass_rate_does_not_depend_on_the_order_its_siblings_finished_in():
    task = TASKS[0]
    policy = ScriptedOutcomePolicy([task], lambda t, sample: "wrong" if sample == 3 else "right")
    episodes = collect(TOOL_USE, policy, tasks=[task], samples_per_task=4, max_steps=3, progress=False)
    assert [t.metrics["res_reward"] > 0 for t in episodes] == [True, True, True, False]
    rates = []
    for order in (episodes, episodes[::-1], episodes[1:] + episodes[:1]):
        sampler = TaskSampler([EnvSource(TOOL_USE, [task])], curriculum=Curriculum(alpha=0.3), seed=0)
        draw = sampler.sample()
        sampler.observe(draw, order)
        first = sampler.pass_rate(draw.key)
        sampler.observe(draw, order[::-1])
        rates.append((first, sampler.pass_rate(draw.key)))
    # the first group sets the rate to its success share; the next moves it as 4 samples of 0.75 would
    assert rates[0][0] == pytest.approx(0.75)
    assert all(r == pytest.approx(rates[0]) for r in rates)
    sampler = TaskSampler([EnvSource(TOOL_USE, [task])], curriculum=Curriculum(alpha=0.3), seed=0)
    draw = sampler.sample()
    sampler.observe(draw, episodes[3:])  # one failure: rate 0
    sampler.observe(draw, episodes[:3])  # three successes: 1 - 0.7 ** 3 of the way to 1
    assert sampler.pass_rate(draw.key) == pytest.approx(1 - 0.7 ** 3)
