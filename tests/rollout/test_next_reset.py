"""The runner's next-episode hint: an env with ``expect_reset`` is told the episode it runs next; others are not."""

from __future__ import annotations

from typing import Any

from hinted_envs import HintedEnv, HintedEnvFactory, count_hints
from rollout_fakes import ScriptedPolicy, make_add_env, make_tasks, strip_timings

from agent_gym.rollout import EpisodeRunner, plan_episodes
from agent_gym.rollout.next_reset import SpecQueue, reset_hook, reset_options
from agent_gym.utils.runtime import run_sync


def _run(hinted: bool, specs: list[Any], n_parallel: int) -> tuple[list[Any], HintedEnvFactory]:
    envs = HintedEnvFactory(hinted)
    with EpisodeRunner(envs, ScriptedPolicy(delay=0.01), n_parallel=n_parallel) as runner:
        results = run_sync(lambda: runner.run(specs))
    return results, envs


def test_hinted_envs_are_told_their_next_episode_and_the_results_do_not_change():
    specs = plan_episodes(make_tasks(6), None, samples_per_task=3, seed=4)
    plain, _ = _run(False, specs, 3)
    hinted, envs = _run(True, specs, 3)
    assert [strip_timings(t.to_dict()) for t in hinted] == [strip_timings(t.to_dict()) for t in plain]
    told, right = count_hints(envs, reset_after_each=True)
    assert told >= len(specs) - 2 * 3  # every episode but the last ones of each worker was hinted
    assert right >= told - 3  # and ran next on its env (a worker with nothing left may take another's claim)


def test_envs_without_the_hook_get_their_episodes_in_queue_order():
    queue = SpecQueue(5)
    specs = plan_episodes(make_tasks(5), None)
    plain = make_add_env()
    assert reset_hook(plain) is None
    order = []
    for worker in ("a", "b", "a", "b", "a"):
        index = queue.next(worker)
        order.append(index)
        queue.hinter(worker, specs, specs[index])(plain)  # a no-op: nothing claimed, nothing called
    assert order == [0, 1, 2, 3, 4] and queue.next("a") is None and queue.empty()


def test_a_claim_is_run_by_its_worker_or_taken_by_an_idle_one():
    specs = plan_episodes(make_tasks(4), None, seed=9)
    env = HintedEnv()
    queue = SpecQueue(4)
    assert queue.next("a") == 0
    queue.hinter("a", specs, specs[0])(env)  # claims 1 for a, tells the env
    assert env.events == [("hint", specs[1].seed, specs[1].task)] and reset_options(specs[1]) == {"task": specs[1].task}
    queue.hinter("a", specs, specs[0])(env)  # one claim per worker
    assert len(env.events) == 1
    assert queue.next("b") == 2 and queue.next("a") == 1 and queue.next("b") == 3
    queue.hinter("b", specs, specs[3])(env)  # nothing left to claim
    assert len(env.events) == 1
    queue = SpecQueue(2)
    assert queue.next("a") == 0
    queue.hinter("a", specs, specs[0])(env)
    assert not queue.empty() and queue.next("b") == 1 and queue.next("a") is None and queue.empty()


def test_no_claim_for_an_episode_on_another_env():
    first, second = plan_episodes(make_tasks(2), None)
    other = type(second)(**{**second.__dict__, "env_kwargs": {"max_steps": 2}})
    queue = SpecQueue(2)
    env = HintedEnv()
    assert queue.next("a") == 0
    queue.hinter("a", [first, other], first)(env)
    assert env.events == [] and queue.next("b") == 1
