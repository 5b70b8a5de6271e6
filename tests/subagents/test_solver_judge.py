"""The solver-judge multi-agent episode under ``collect``, and the training contract's (task, role) groups."""

from __future__ import annotations

import pytest

from agent_gym.integrations.contract import (
    RewardAssignment,
    group_advantages,
    own_segments,
    training_segments,
)
from agent_gym.integrations.slime import episode_samples, reward_post_process
from agent_gym.parsers import ParsedResponse
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.subagents import SolverJudgeEnv
from agent_gym.types import Segment, Step
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

TASKS = [{"id": f"t{i}", "question": f"What is {i} + 1?", "ground_truth": str(i + 1)} for i in range(4)]
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=6, logprobs=0, seed=7,
                          stop_token_ids=list(range(0, 151643, 3)))


class NumberJudge:
    """The judge's format for the random tiny model: the number of sampled characters picks a candidate."""

    def parse(self, text):
        return ParsedResponse(text=text, answer=str(1 + len(text) % 2), content=text)


def test_solver_judge_under_collect(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING, api="vllm_generate")

    def make_env():
        return SolverJudgeEnv(policy, tasks=TASKS, n_solvers=2, solver_max_steps=2, parser=NumberJudge())

    try:
        episodes = collect(make_env, policy, tasks=TASKS, samples_per_task=2, n_parallel=8, seed=0,
                           progress=False)
    finally:
        policy.close()
    assert len(episodes) == 8 and len({e.rollout_id for e in episodes}) == 8
    for episode in episodes:
        assert episode.status in ("ENV_DONE", "TRUNCATION"), episode.steps[-1].info  # the judge may run out of tokens
        roles = [s.role for s in episode.segments]
        assert roles[0] == "judge" and roles.count("solver") >= 2, roles
        judge = episode.segments[0]
        assert judge.role_reward == episode.trajectory_reward  # the judge's reward: its pick was correct
        assert all(s.parent_segment == -1 and s.spawn_step == -1 for s in episode.segments)
        segments = training_segments(episode, reward_assignment="role")
        assert {s.group_key for s in segments} == {f"{episode.task['id']}/judge", f"{episode.task['id']}/solver"}
        assert [s.reward for s in segments] == [s.role_reward for s in episode.segments]
        assert own_segments(segments)[-1].role == "judge"
    # GRPO advantages by (task, role), each (rollout, role) counted once
    items = [(s.group_key, s.advantage_id, s.reward, s.masked)
             for e in episodes for s in training_segments(e, reward_assignment="role")]
    advantages = group_advantages(items)
    assert len(advantages) == 24  # 8 rollouts x (a judge and two solvers)


def _episode(rollout_id: str, task_id: str, judge: float, solvers: list[float]) -> object:
    builder = TrajectoryBuilder(rollout_id, task={"id": task_id}, role="judge")
    builder.assembler.add_turn(0, [1, 2], [3], [-0.5])
    for score in solvers:
        builder.add_child([Segment([4], [5, 6], [1, 1], [-0.1, -0.2], role="solver", role_reward=score)],
                          spawned=False)
    builder.set_role_rewards({"judge": judge})
    builder.steps.append(Step(reward=judge, done=True))
    return builder.build("ENV_DONE", conversation=[])


def test_reward_assignments_and_weights_per_role():
    episode = _episode("r1", "t", 1.0, [0.0, 1.0])
    by = {a: training_segments(episode, reward_assignment=a) for a in RewardAssignment}
    assert [s.reward for s in by[RewardAssignment.ROLE]] == [1.0, 0.0, 1.0]
    assert [s.reward for s in by[RewardAssignment.EPISODE]] == [1.0, 1.0, 1.0]
    assert [s.reward for s in by[RewardAssignment.SPLIT]] == pytest.approx([1 / 3] * 3)
    assert [s.loss_weight for s in by[RewardAssignment.ROLE]] == [1.0, 0.5, 0.5]
    assert [(s.own, s.advantage_id) for s in by[RewardAssignment.ROLE]] == [
        (True, "r1/judge#0"), (False, "r1/solver#1"), (False, "r1/solver#2")]


def test_slime_samples_group_by_task_and_role():
    from types import SimpleNamespace

    samples = []
    for rollout, (judge, solvers) in enumerate([(1.0, [1.0, 1.0]), (0.0, [0.0, 0.0])]):
        episode = _episode(f"r{rollout}", "t", judge, solvers)
        template = SimpleNamespace(group_index=0, index=rollout, rollout_id=rollout, metadata={}, tokens=[],
                                   response_length=0, loss_mask=None, rollout_log_probs=None, reward=None,
                                   status=None, response="")
        samples += episode_samples(template, episode, env_id="solver-judge", reward_assignment="role")
    assert [s.metadata["role"] for s in samples] == ["judge", "solver", "solver"] * 2
    assert len({s.rollout_id for s in samples[:3]}) == 1
    args = SimpleNamespace(grpo_std_normalization=False, rewards_normalization=True)
    raw, centred = reward_post_process(args, samples)
    assert raw == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert centred == pytest.approx([0.5, 0.5, 0.5, -0.5, -0.5, -0.5])


@pytest.mark.parametrize("source", ["batch", "jsonl", "parquet"])
def test_the_report_shows_success_per_role(source, tmp_path):
    from agent_gym.export import write_jsonl, write_parquet
    from agent_gym.report.file_summary import FileSummary
    from agent_gym.report.load import load_file, stats_from_trajectories

    episodes = [_episode("r1", "t", 1.0, [0.0, 1.0]), _episode("r2", "t", 0.0, [0.0, 0.0])]
    if source == "batch":
        summary = FileSummary("batch", stats_from_trajectories(episodes, "batch"))
    else:
        path = tmp_path / f"episodes.{source}"
        (write_jsonl if source == "jsonl" else write_parquet)(episodes, path)
        summary = FileSummary(source, load_file(path).episodes)
    roles = summary.role_success()
    assert list(roles) == ["judge", "solver"]
    assert roles["judge"]["success_rate"] == 0.5 and roles["judge"]["episodes"] == 2
    assert roles["solver"]["successes"] == 1  # a role succeeds in an episode when one of its agents did
    from agent_gym.report.summary import Report

    text = Report([summary]).to_text()
    assert "By role" in text and "judge" in text.split("By role")[1]
