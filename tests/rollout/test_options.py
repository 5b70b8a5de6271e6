"""RolloutOptions (the one description of the runner settings) and tools that change mid-episode."""

from __future__ import annotations

import pytest
from rollout_fakes import ScriptedPolicy, make_add_env, make_tasks

from agent_gym.errors import ConfigError
from agent_gym.rollout import RolloutOptions, collect, collect_async
from agent_gym.rollout.options import OPTION_DEFAULTS, OptionDefault, explicit_changes
from agent_gym.rollout.planning import plan_episodes
from agent_gym.rollout.runner import EpisodeRunner
from agent_gym.types import EpisodeStatus
from agent_gym.utils.runtime import run_sync


def test_defaults_and_overrides():
    options = RolloutOptions()
    assert (options.n_parallel, options.gamma, options.backend, options.seed, options.progress) == (8, 1.0, "local", 0,
                                                                                                     True)
    changed = RolloutOptions.build(options, n_parallel=2, gamma=0.5)
    assert (changed.n_parallel, changed.gamma) == (2, 0.5)
    assert options.n_parallel == 8  # frozen: build returns a copy
    assert RolloutOptions.build(options) is options
    assert changed.replace(seed=4).seed == 4
    assert RolloutOptions(env_kwargs={"a": 1}).env_kwargs == {"a": 1}


@pytest.mark.parametrize(
    "changes, error, words",
    [
        ({"n_parallel": 0}, ConfigError, "n_parallel: expected an int >= 1, got 0"),
        ({"n_parallel": 2.0}, TypeError, "n_parallel: expected int"),
        ({"samples_per_task": 0}, ConfigError, "samples_per_task"),
        ({"gamma": 1.5}, ConfigError, "gamma"),
        ({"episode_timeout": 0}, ConfigError, "episode_timeout"),
        ({"episode_timeout": "5"}, TypeError, "episode_timeout"),
        ({"max_steps": 0}, ConfigError, "max_steps"),
        ({"backend": "spark"}, ConfigError, "backend: expected one of 'local', 'ray', 'ray_sharded', got 'spark'"),
        ({"seed": "1"}, TypeError, "seed"),
        ({"progress": 1}, TypeError, "progress"),
        ({"on_episode": 3}, TypeError, "on_episode"),
        ({"env_kwargs": [1]}, TypeError, "env_kwargs"),
        ({"ray_address": 5}, TypeError, "ray_address"),
    ],
)
def test_bad_values_are_named(changes, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        RolloutOptions(**changes)
    with pytest.raises(error):
        collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(1), **{"progress": False, **changes})


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="collect\\(\\) got an unexpected keyword argument 'n_paralel'"):
        collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(1), n_paralel=2)
    with pytest.raises(TypeError, match="options: expected RolloutOptions"):
        collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(1), options={"n_parallel": 2})


def test_collect_takes_an_options_object_and_keyword_overrides():
    options = RolloutOptions(samples_per_task=2, progress=False, seed=7)
    result = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(2), options=options, n_parallel=1)
    assert [t.idx for t in result] == [0, 1, 2, 3]
    assert [t.group_id for t in result] == [s.group_id for s in plan_episodes(make_tasks(2), None, 2, 7)]


def test_episode_runner_takes_options_or_keywords():
    runner = EpisodeRunner(make_add_env, ScriptedPolicy(), RolloutOptions(n_parallel=3), gamma=0.5)
    assert runner.n_parallel == 3 and runner.options.gamma == 0.5
    try:
        result = run_sync(lambda: runner.run(plan_episodes(make_tasks(3), None)))
    finally:
        runner.close()
    assert [t.status for t in result] == [EpisodeStatus.ENV_DONE] * 3
    with pytest.raises(TypeError, match="EpisodeRunner\\(\\) got an unexpected keyword argument 'progres'"):
        EpisodeRunner(make_add_env, ScriptedPolicy(), progres=False)


@pytest.mark.parametrize("function", [collect, collect_async], ids=["collect", "collect_async"])
def test_every_option_is_an_explicit_keyword_with_its_default(function):
    import dataclasses
    import inspect

    parameters = inspect.signature(function).parameters
    fields = {f.name: f.default for f in dataclasses.fields(RolloutOptions)}
    keywords = {name: p for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert set(fields) | {"tasks", "num_episodes", "options", "sampler", "dynamic_sampling"} == set(keywords)
    for name, default in fields.items():
        assert repr(keywords[name].default) == repr(default), name  # what help() shows
    assert f"n_parallel: int = {fields['n_parallel']}" in str(inspect.signature(function, eval_str=True))


def test_a_keyword_passed_at_its_default_value_still_overrides_options():
    options = RolloutOptions(n_parallel=2, gamma=0.5, progress=False)
    changes = explicit_changes(n_parallel=8, gamma=OPTION_DEFAULTS.gamma, progress=OPTION_DEFAULTS.progress)
    assert changes == {"n_parallel": 8}
    built = RolloutOptions.build(options, **changes)
    assert (built.n_parallel, built.gamma, built.progress) == (8, 0.5, False)
    with pytest.raises(ValueError, match="expected a RolloutOptions field"):
        OptionDefault("n_paralel")
