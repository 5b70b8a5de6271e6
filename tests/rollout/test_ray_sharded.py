"""The sharded Ray backend on one node: many episodes per shard, a shard killed mid-run, streams, placement."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from rollout_fakes import ScriptedPolicy, make_add_env, make_tasks, strip_timings

from agent_gym.rollout import RolloutStream, collect
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import plan_episodes
from agent_gym.rollout.shard_config import RayShards
from agent_gym.types import EpisodeStatus

HAS_RAY = importlib.util.find_spec("ray") is not None
pytestmark = [pytest.mark.skipif(not HAS_RAY, reason="the 'ray' extra is not installed (pip install 'agent-gym[ray]')"),
              pytest.mark.timeout(300)]

# Half a CPU each: two shards fit the suite's 2-CPU Ray instance beside anything else using it.
TWO_SHARDS = RayShards(shards=2, num_cpus=0.5)


@pytest.fixture(scope="module")
def ray_fakes(local_ray):
    import rollout_fakes
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(rollout_fakes)  # the test helpers are not importable in Ray workers
    return local_ray


def test_shards_match_the_local_backend_with_many_episodes_in_flight_each(ray_fakes):
    from agent_gym.rollout.sharded_runner import ShardedRunner

    tasks = make_tasks(8)
    local = collect(make_add_env, ScriptedPolicy(), tasks=tasks, samples_per_task=2, seed=5, progress=False)
    # 16 slow episodes over 2 shards of 8: every shard runs its 8 at once, on 8 envs of its own
    runner = ShardedRunner(make_add_env, ScriptedPolicy(delay=0.3), RolloutOptions(n_parallel=16), shards=TWO_SHARDS)

    async def main():
        try:
            out = await runner.run(plan_episodes(tasks, None, 2, 5))
            return out, await runner.shard_stats()
        finally:
            await runner.aclose()

    sharded, shards = asyncio.run(main())
    assert [strip_timings(t.to_dict()) for t in sharded] == [strip_timings(t.to_dict()) for t in local]
    assert len({s["pid"] for s in shards}) == 2
    assert sum(s["finished"] for s in shards) == 16
    assert max(s["env_builds"] for s in shards) > 1  # more than one episode in flight in a shard


def test_a_shard_killed_mid_run_gives_every_episode_back_once(ray_fakes):
    from agent_gym.rollout.sharded_runner import ShardedRunner

    # one runner re-runs the lost shard's episodes elsewhere, the other ends them ENV_ERROR; side by side, so
    # their shards start together
    runners = {mode: ShardedRunner(make_add_env, ScriptedPolicy(delay=0.05), RolloutOptions(),
                                   shards=RayShards(shards=2, num_cpus=0.25, episodes_per_shard=6, on_shard_loss=mode))
               for mode in ("rerun", "fail")}
    seen: dict[str, list[int]] = {mode: [] for mode in runners}

    def on_episode_of(mode):
        def on_episode(trajectory):
            seen[mode].append(trajectory.idx)
            if len(seen[mode]) == 10:
                ray_fakes.kill(runners[mode].handles[0])  # the shard dies with its episodes in flight
        return on_episode

    async def main():
        try:
            return await asyncio.gather(*(runner.run(plan_episodes(make_tasks(30), None, 1, 0),
                                                     on_episode=on_episode_of(mode))
                                          for mode, runner in runners.items()))
        finally:
            for runner in runners.values():
                await runner.aclose()

    rerun, fail = asyncio.run(main())
    for mode, out in (("rerun", rerun), ("fail", fail)):
        stats = runners[mode].stats
        assert sorted(t.idx for t in out) == list(range(30)) == sorted(seen[mode]), mode  # each once, none lost
        assert stats.shards_lost == 1 and stats.finished == 30, (mode, stats)
    assert runners["rerun"].stats.reruns >= 1  # they ran again on the other shard
    assert all(t.status == EpisodeStatus.ENV_DONE for t in rerun)
    failed = [t for t in fail if t.status == EpisodeStatus.ENV_ERROR]
    assert len(failed) == runners["fail"].stats.lost_failed >= 1
    assert all("ray shard lost" in str(t.to_dict()) for t in failed)
    assert all(t.status == EpisodeStatus.ENV_DONE for t in fail if t not in failed)


def test_rollout_stream_runs_its_groups_on_ray_shards(ray_fakes):
    tasks = make_tasks(6)
    with RolloutStream(make_add_env, ScriptedPolicy(), tasks, samples_per_task=2, concurrency=4,
                       backend="ray_sharded", ray_shards=TWO_SHARDS) as stream:
        groups = list(stream)
    assert sorted(g.task["id"] for g in groups) == sorted(t["id"] for t in tasks)
    assert all(len(g.trajectories) == 2 and all(t.status == EpisodeStatus.ENV_DONE for t in g.trajectories)
               for g in groups)


def test_no_node_with_the_shards_resources_ends_episodes_env_error(ray_fakes):
    layout = RayShards(shards=1, num_cpus=0, resources={"env_worker_absent": 1}, start_timeout=2.0)
    out = collect(make_add_env, ScriptedPolicy(), tasks=make_tasks(3), backend="ray_sharded", ray_shards=layout,
                  progress=False)
    assert [t.idx for t in out] == [0, 1, 2]
    assert all(t.status == EpisodeStatus.ENV_ERROR for t in out)
    assert "env_worker_absent" in str(out[0].to_dict())
