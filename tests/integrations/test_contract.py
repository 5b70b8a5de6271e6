import pytest
import torch

from agent_gym.integrations.contract import (
    RewardAssignment,
    failure_reason,
    group_advantages,
    is_infra_failure,
    neutral_rewards,
    training_segments,
)
from agent_gym.types import Segment, Step, StepTrajectory, Trajectory


def _segment(prompt, response, mask):
    return Segment(
        prompt_tokens=torch.tensor(prompt),
        response_tokens=torch.tensor(response),
        response_masks=torch.tensor(mask),
        response_logprobs=torch.tensor([-0.5 if m else 0.0 for m in mask]),
    )


def _episode(rollout_id, reward, *, segments=1, status="ENV_DONE", task_id="t1"):
    segs = [_segment([1, 2], [3, 4, 5], [1, 0, 1]) for _ in range(segments)]
    return StepTrajectory(
        prompt_tokens=segs[0].prompt_tokens,
        response_tokens=segs[0].response_tokens,
        response_masks=segs[0].response_masks,
        trajectory_reward=reward,
        rollout_id=rollout_id,
        group_id="g-unused",
        status=status,
        task={"id": task_id, "question": "q", "ground_truth": "a"},
        steps=[Step(reward=reward)],
        segments=segs,
    )


def test_episode_assignment_gives_full_reward_to_every_segment():
    segs = training_segments(_episode("r1", 1.0, segments=3))
    assert [s.reward for s in segs] == [1.0, 1.0, 1.0]
    assert [s.loss_weight for s in segs] == pytest.approx([1 / 3] * 3)
    assert {s.rollout_id for s in segs} == {"r1"}
    assert [s.index for s in segs] == [0, 1, 2] and segs[-1].is_last and not segs[0].is_last
    assert segs[0].response_mask == [1, 0, 1] and segs[0].response_logprobs == [-0.5, 0.0, -0.5]


def test_split_assignment_divides_by_segment_count():
    segs = training_segments(_episode("r1", 1.0, segments=4), reward_assignment="split")
    assert [s.reward for s in segs] == [0.25] * 4
    assert all(s.episode_reward == 1.0 for s in segs)


def test_unknown_assignment_is_a_clear_error():
    with pytest.raises(ValueError, match="reward_assignment: expected one of 'episode', 'split'"):
        training_segments(_episode("r1", 1.0), reward_assignment="mean")


def test_group_key_is_the_task_and_role():
    segs = training_segments(_episode("r1", 1.0, task_id="task-7"), role="judge")
    assert segs[0].group_key == "task-7/judge"
    assert RewardAssignment("episode") is RewardAssignment.EPISODE


@pytest.mark.parametrize("status,failed", [("ENV_ERROR", True), ("POLICY_ERROR", True), ("TIMEOUT", True),
                                           ("ENV_DONE", False), ("MAX_STEPS", False), ("TRUNCATION", False)])
def test_infrastructure_failures_are_masked(status, failed):
    episode = _episode("r1", 0.0, status=status)
    assert is_infra_failure(episode) is failed
    assert training_segments(episode)[0].masked is failed


def test_group_advantages_count_each_rollout_once_whatever_its_segments():
    # Rollout a fans out into three samples, b into one: both must count once in the mean.
    items = [("t", "a", 1.0, False)] * 3 + [("t", "b", 0.0, False)]
    adv = group_advantages(items)
    assert adv["a"] == pytest.approx(1.0, abs=1e-4) and adv["b"] == pytest.approx(-1.0, abs=1e-4)
    assert group_advantages(items, normalize_std=False) == pytest.approx({"a": 0.5, "b": -0.5})


def test_group_advantages_key_by_task_not_position_and_skip_masked():
    items = [("t1", "a", 1.0, False), ("t2", "b", 0.0, False), ("t1", "c", 0.0, False),
             ("t2", "d", 1.0, False), ("t1", "e", 5.0, True)]
    adv = group_advantages(items, normalize_std=False)
    assert adv == pytest.approx({"a": 0.5, "c": -0.5, "b": -0.5, "d": 0.5, "e": 0.0})


def test_group_advantages_refuse_inconsistent_rollout():
    with pytest.raises(ValueError, match="rollout 'a'"):
        group_advantages([("t", "a", 1.0, False), ("t", "a", 0.0, False)])


def test_neutral_rewards_keep_the_group_mean_of_the_rollouts_that_ran():
    items = [("t1", "a", 1.0, False), ("t1", "a", 1.0, False), ("t1", "b", 0.0, False), ("t1", "c", 0.0, True),
             ("t2", "d", 3.0, False), ("t3", "e", 0.0, True)]
    rewards = neutral_rewards(items)
    # a counts once (two segments): t1's mean over a and b is 0.5; t3 has no rollout that ran.
    assert rewards == pytest.approx({"a": 1.0, "b": 0.0, "c": 0.5, "d": 3.0, "e": 0.0})
    ran = [rewards[r] for r in ("a", "b")]
    assert sum(ran + [rewards["c"]]) / 3 == pytest.approx(sum(ran) / 2)  # the siblings' baseline is unchanged
    with pytest.raises(ValueError, match="rollout 'a'"):
        neutral_rewards([("t", "a", 1.0, False), ("t", "a", 0.5, False)])


def test_failure_reason_is_the_last_steps_error():
    episode = _episode("r1", 0.0, status="POLICY_ERROR")
    assert failure_reason(episode) is None
    episode.steps[-1].info["error"] = "policy raised ServerError: connection refused"
    assert failure_reason(episode) == "policy raised ServerError: connection refused"
    assert failure_reason(Trajectory(prompt_tokens=torch.tensor([1]), response_tokens=torch.tensor([2]),
                                     response_masks=torch.tensor([1]))) is None  # no steps at all
