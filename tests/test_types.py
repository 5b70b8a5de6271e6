import json
import math

import pytest
import torch

from agent_gym.errors import ConfigError, TrajectoryError
from agent_gym.types import (
    METRIC_KEYS,
    EpisodeStatus,
    PolicyOutput,
    Segment,
    Step,
    StepTrajectory,
    Trajectory,
    compute_mc_return,
)


def make_traj(**overrides):
    kwargs = dict(
        prompt_tokens=torch.tensor([7, 8, 9]),
        response_tokens=torch.tensor([10, 11, 12]),
        response_masks=torch.tensor([1, 1, 1]),
    )
    kwargs.update(overrides)
    return Trajectory(**kwargs)


def make_step_traj(**overrides):
    kwargs = dict(
        prompt_tokens=torch.tensor([1, 2]),
        response_tokens=torch.tensor([3, 4, 5]),
        response_masks=torch.tensor([1, 0, 1]),
        response_logprobs=torch.tensor([-0.5, 0.0, -0.25]),
        trajectory_reward=1.5,
        chat_completions=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        rollout_id="abc",
        group_id="g",
        status="ENV_DONE",
        task={"id": "t1", "question": "q", "ground_truth": "42", "extra": [1, 2]},
        steps=[
            Step(
                chat_completions=[{"role": "user", "content": "hi"}],
                thought="t",
                action="a",
                observation="q",
                model_response="yo",
                info={"tool_calls": [{"name": "x"}]},
                reward=1.5,
                done=True,
                mc_return=1.5,
            )
        ],
        segments=[Segment([1, 2], [3, 4, 5], [1, 0, 1], [-0.5, 0.0, -0.25], 0, 0)],
    )
    kwargs.update(overrides)
    return StepTrajectory(**kwargs)


def test_seed_defaults():
    t = make_traj()
    assert t.idx == 0
    assert t.trajectory_reward == 0.0
    assert t.chat_completions == []
    assert set(t.metrics) == set(METRIC_KEYS)
    assert all(v == 0 for v in t.metrics.values())


def test_seed_example_metrics_are_completed():
    # The seed's own example passes five of the seven keys.
    t = make_traj(metrics={"steps": 1, "reward_time": 2.0, "env_time": 3.0, "llm_time": 4.0, "total_time": 9.0})
    assert set(t.metrics) == set(METRIC_KEYS)
    assert t.metrics["res_reward"] == 0.0


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"prompt_tokens": "1 2 3"}, "prompt_tokens: expected torch.Tensor"),
        (
            {"response_tokens": torch.tensor([1.0, float("nan"), 2.0]), "response_masks": torch.tensor([1, 1, 1])},
            "expected an integer dtype",
        ),
        ({"response_masks": torch.tensor([1.0, float("inf"), 1.0])}, "expected an integer dtype"),
        ({"response_logprobs": [0.0, float("nan"), 0.0]}, "NaN or Inf"),
        ({"response_logprobs": torch.zeros(1, 3)}, "response_logprobs: expected a 1-D sequence"),
        ({"idx": -1}, "idx: expected an int >= 0"),
        ({"idx": 1.5}, "idx: expected an int >= 0"),
        ({"metrics": {"steps": 1, "bogus": 2}}, "unknown keys"),
        ({"metrics": {"steps": float("nan")}}, "finite number"),
        ({"chat_completions": [{"role": "user", "content": 3}]}, "expected str keys and values"),
        ({"chat_completions": ["hello"]}, r"chat_completions\[0\]: expected dict"),
        ({"trajectory_reward": float("inf")}, "finite"),
        ({"trajectory_reward": "1"}, "expected float or int"),
        ({"response_masks": torch.tensor([1, 1])}, "expected length 3"),
        ({"status": "WHATEVER"}, "status: expected one of"),
    ],
)
def test_trajectory_validation(overrides, match):
    with pytest.raises(TrajectoryError, match=match):
        make_traj(**overrides)


def test_step_trajectory_requires_steps():
    with pytest.raises(TrajectoryError, match="non-empty"):
        make_step_traj(steps=[])
    with pytest.raises(TrajectoryError, match="expected Step"):
        make_step_traj(steps=[{"thought": "x"}])


def test_step_validation():
    with pytest.raises(TrajectoryError, match="reward"):
        Step(reward=float("nan"))
    with pytest.raises(TrajectoryError, match="chat_completions"):
        Step(chat_completions=[{"role": "user", "content": None}])


def test_json_round_trip():
    original = make_step_traj()
    text = json.dumps(original.to_dict())
    restored = StepTrajectory.from_dict(json.loads(text))
    assert restored == original
    assert torch.equal(restored.response_tokens, original.response_tokens)
    assert restored.steps[0].info == {"tool_calls": [{"name": "x"}]}
    assert restored.segments[0] == original.segments[0]
    assert restored.task == original.task
    assert restored != make_step_traj(trajectory_reward=2.0)


def test_from_dict_rejects_unknown_keys():
    data = make_traj().to_dict()
    data["surprise"] = 1
    with pytest.raises(TrajectoryError, match="unknown keys"):
        Trajectory.from_dict(data)


def test_policy_output_validation_and_round_trip():
    out = PolicyOutput(text="hi", prompt_token_ids=[1], token_ids=[2, 3], logprobs=[-0.1, -0.2])
    assert PolicyOutput.from_dict(out.to_dict()) == out
    with pytest.raises(ValueError, match="one per token id"):
        PolicyOutput(text="hi", token_ids=[1, 2], logprobs=[0.0])
    with pytest.raises(ValueError, match="finish_reason"):
        PolicyOutput(text="hi", finish_reason="done")
    with pytest.raises(TypeError, match="expected str"):
        PolicyOutput(text=None)


def test_segment_lengths_checked():
    with pytest.raises(TrajectoryError, match="equal length"):
        Segment([1], [2, 3], [1], [0.0, 0.0])


def test_mc_return_gamma_one():
    steps = [Step(reward=r) for r in (0.1, -0.5, 1.0)]
    assert compute_mc_return(steps, 1.0) == pytest.approx([0.6, 0.5, 1.0])
    assert [s.mc_return for s in steps] == pytest.approx([0.6, 0.5, 1.0])


def test_mc_return_gamma_half():
    steps = [Step(reward=r) for r in (0.1, -0.5, 1.0)]
    # G2 = 1.0; G1 = -0.5 + 0.5 * 1.0 = 0.0; G0 = 0.1 + 0.5 * 0.0 = 0.1
    assert compute_mc_return(steps, 0.5) == pytest.approx([0.1, 0.0, 1.0])


@pytest.mark.parametrize(
    "gamma, error",
    [(-0.1, ConfigError), (1.5, ConfigError), (math.nan, ConfigError), ("1", TypeError), (True, TypeError)],
)
def test_mc_return_rejects_bad_gamma(gamma, error):
    with pytest.raises(error, match="gamma"):
        compute_mc_return([Step()], gamma)


def test_status_values():
    assert {s.value for s in EpisodeStatus} == {
        "ENV_DONE",
        "MAX_STEPS",
        "TRUNCATION",
        "PROMPT_TRUNCATION",
        "TIMEOUT",
        "ENV_ERROR",
        "POLICY_ERROR",
        "JUDGE_ERROR",
    }


@pytest.mark.parametrize("field", ["prompt_tokens", "response_tokens", "response_masks"])
@pytest.mark.parametrize(
    "value, match",
    [
        ([1.5], "expected integer token ids, got 1.5"),
        ([1.0], "expected integer token ids, got 1.0"),  # integer-valued floats are rejected too
        ([1, 2.5], "expected integer token ids, got 2.5"),
        (torch.tensor([1.0]), "expected an integer dtype, got torch.float32"),
        (torch.tensor([1], dtype=torch.float64), "expected an integer dtype"),
        (torch.tensor([[1]]), r"expected a 1-D sequence of token ids, got shape \(1, 1\)"),
        ([[1], [2]], "expected a 1-D sequence of token ids"),
        (torch.tensor(3), r"expected a 1-D sequence of token ids, got shape \(\)"),
        (["a"], "expected a flat sequence of integer token ids"),
        ([2**70], "expected a flat sequence of integer token ids"),
        ("1 2", "expected torch.Tensor or list"),
    ],
)
def test_token_fields_hold_1d_integer_ids(field, value, match):
    # The other fields keep a valid shape and length, so the field's own check is the one that fails.
    n = len(value) if isinstance(value, (list, torch.Tensor)) and getattr(value, "ndim", 1) == 1 else 1
    kwargs = {"prompt_tokens": [1], "response_tokens": [1] * n, "response_masks": [1] * n, field: value}
    with pytest.raises(TrajectoryError, match=f"Trajectory.{field}: {match}"):
        Trajectory(**kwargs)
    with pytest.raises(TrajectoryError, match=f"Segment.{field}: {match}"):
        Segment(**kwargs, response_logprobs=[0.0] * n)


def test_token_fields_accept_integer_sequences_and_dtypes():
    np = pytest.importorskip("numpy")
    t = Trajectory(
        prompt_tokens=(1, 2),
        response_tokens=torch.tensor([3, 4], dtype=torch.int32),
        response_masks=[True, False],
    )
    assert t.prompt_tokens.dtype == torch.long and t.prompt_tokens.tolist() == [1, 2]
    assert t.response_tokens.dtype == torch.long and t.response_tokens.tolist() == [3, 4]
    assert t.response_masks.tolist() == [1, 0]
    assert Trajectory(
        prompt_tokens=list(np.arange(3)), response_tokens=[], response_masks=[]
    ).prompt_tokens.tolist() == [
        0,
        1,
        2,
    ]
    same = torch.tensor([5, 6])
    assert Trajectory(prompt_tokens=same, response_tokens=[], response_masks=[]).prompt_tokens is same
    with pytest.raises(TrajectoryError, match="response_tokens: expected integer token ids, got True"):
        Trajectory(prompt_tokens=[1], response_tokens=[True], response_masks=[1])


def test_message_images_are_optional_and_records_keep_text():
    from agent_gym.messages import image_part
    from agent_gym.types import Message

    assert Message.__required_keys__ == {"role", "content"} and Message.__optional_keys__ == {"images"}
    shown = {"role": "user", "content": "page", "images": [image_part(b"\x89PNG")]}
    step = Step(chat_completions=[{"role": "system", "content": "s"}, shown])
    assert step.chat_completions == [{"role": "system", "content": "s"}, {"role": "user", "content": "page"}]
    assert "images" in shown  # the given message is not changed
    plain = [{"role": "user", "content": "x"}]
    assert Step(chat_completions=plain).chat_completions is plain  # nothing to drop: no copy
