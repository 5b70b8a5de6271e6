"""verl adapter: the token-exact policy over ``server_manager.generate``, the output fields, and verl's own classes.

The policy and field tests need no verl: the server manager is a stand-in with verl's documented
``generate(request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput`` (verl 0.9.1,
``verl/workers/rollout/llm_server.py``). The tests marked by the ``verl`` fixture build the agent
loop on verl's ``AgentLoopBase``, register it both ways verl supports and validate its output as
``AgentLoopOutput``; they skip where verl is not importable (``pip install verl`` pins
``transformers<5.11``, which this project's environment does not have).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.errors import ConfigError
from agent_gym.integrations.verl import (
    AGENT_NAME,
    EpisodeSettings,
    VerlServerPolicy,
    agent_loop_fields,
    finish_reason,
    run_row,
)
from agent_gym.integrations.verl_advantage import ADVANTAGE_ESTIMATOR, grpo_advantages
from agent_gym.memory import MemoryConfig, MemorySummary
from agent_gym.rollout import collect_async
from agent_gym.types import EpisodeStatus, Segment, Step, StepTrajectory

ENV_ID = "agent_gym/ToolUse-v0"
YAML = Path(__file__).resolve().parents[2] / "docs" / "verl_agent_loop.yaml"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
EOT = 151645  # <|im_end|> of the Qwen tokenizer


@dataclass
class TokenOutput:
    """The fields of verl's ``TokenOutput`` (``verl/workers/rollout/replica.py``)."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)


class FakeServerManager:
    """verl's server manager: samples random ids (a third of turns end on <|im_end|>) and records every call."""

    def __init__(self, output_type: Any = TokenOutput, *, stop_reason: str = "completed", fail: bool = False) -> None:
        self.output_type = output_type
        self.stop_reason = stop_reason
        self.fail = fail
        self.calls: list[dict[str, Any]] = []
        self.rng = random.Random(0)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        if self.fail:
            raise ConnectionError("the inference server is down")
        budget = sampling_params["max_tokens"]
        n = min(budget, self.rng.randint(2, 10))
        ids = [self.rng.randrange(1000, 9000) for _ in range(n)]
        if self.rng.random() < 0.7 and n < budget:
            ids.append(EOT)
        logprobs = [-self.rng.random() for _ in ids]
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params),
                           "ids": ids, "logprobs": logprobs})
        return self.output_type(token_ids=list(ids), log_probs=list(logprobs), stop_reason=self.stop_reason)


def summary_memory() -> MemorySummary:
    config = MemoryConfig(use_summary=True, max_prompt_length=250, max_summary_length=8, before_raw_message=1,
                          end_raw_message=-1, summary_system_prompt="Summarize in {max_summary_length} tokens.")
    return MemorySummary(config, chat_client=lambda messages, *, max_tokens: "notes so far")


def collect_with(server: FakeServerManager, tokenizer, **options: Any) -> list[Any]:
    policy = VerlServerPolicy(server, tokenizer, SAMPLING, max_response_length=512, max_model_len=4096)
    options = {"num_episodes": 2, "samples_per_task": 2, "max_steps": 5, "progress": False, **options}
    return asyncio.run(collect_async(ENV_ID, policy, **options))


@pytest.fixture(scope="module")
def summarized(qwen_tokenizer):
    server = FakeServerManager()
    return server, collect_with(server, qwen_tokenizer, memory=summary_memory)


# ---------------------------------------------------------------------------------------------- without verl


def test_policy_sends_each_sessions_exact_ids_and_keeps_what_the_server_returned(summarized):
    server, trajectories = summarized
    by_request: dict[str, list[dict[str, Any]]] = {}
    for call in server.calls:
        by_request.setdefault(call["request_id"], []).append(call)
    assert len(by_request) == 4  # one stable request id per episode (sticky routing)
    matched = 0
    for trajectory in trajectories:
        calls = next(c for c in by_request.values()
                     if [i for call in c for i in call["ids"]]
                     == [i for s in trajectory.segments for i, m in zip(s.response_tokens.tolist(),
                                                                         s.response_masks.tolist(), strict=True) if m])
        matched += 1
        position = 0
        for segment in trajectory.segments:
            sampled = segment.response_masks.tolist().count(1)
            seg_calls = []
            while sum(len(c["ids"]) for c in seg_calls) < sampled:
                seg_calls.append(calls[position])
                position += 1
            prompt, response = segment.prompt_tokens.tolist(), segment.response_tokens.tolist()
            assert seg_calls[0]["prompt_ids"] == prompt
            for before, after in zip(seg_calls, seg_calls[1:], strict=False):
                assert after["prompt_ids"][: len(before["prompt_ids"]) + len(before["ids"])] == (
                    before["prompt_ids"] + before["ids"])  # every turn extends the last one's exact ids
            assert prompt + response == seg_calls[-1]["prompt_ids"] + seg_calls[-1]["ids"]
            mask = segment.response_masks.tolist()
            logprobs = [lp for lp, m in zip(segment.response_logprobs.tolist(), mask, strict=True) if m]
            assert logprobs == pytest.approx([lp for c in seg_calls for lp in c["logprobs"]], abs=1e-6)
        assert position == len(calls)
    assert matched == 4
    assert any(len(t.segments) >= 2 for t in trajectories), "expected a summarized episode"
    for call in server.calls:
        params = call["params"]
        assert {k: params[k] for k in SAMPLING} == SAMPLING  # verl's own parameters, as given
        assert params["stop_token_ids"] == [EOT] and 1 <= params["max_tokens"] <= 512
        assert len(call["prompt_ids"]) + params["max_tokens"] <= 4096


def test_policies_share_one_token_builder_without_mixing_sessions(qwen_tokenizer):
    # verl runs one loop (one policy) per row: the rollout.n samples of a row have the same episode ids
    servers = [FakeServerManager(), FakeServerManager()]
    servers[1].rng = random.Random(1)
    policies = [VerlServerPolicy(s, qwen_tokenizer, SAMPLING, max_response_length=512, max_model_len=4096)
                for s in servers]
    assert policies[0].builder is policies[1].builder

    async def both() -> list[list[Any]]:
        return await asyncio.gather(*(collect_async(ENV_ID, p, num_episodes=1, max_steps=3, progress=False)
                                      for p in policies))

    results = asyncio.run(both())
    assert results[0][0].rollout_id == results[1][0].rollout_id  # the same episode id in both
    for server, (trajectory,) in zip(servers, results, strict=True):
        sampled = [i for i, m in zip(trajectory.response_tokens.tolist(), trajectory.response_masks.tolist(),
                                     strict=True) if m]
        assert sampled == [i for call in server.calls for i in call["ids"]]
        assert trajectory.prompt_tokens.tolist() == server.calls[0]["prompt_ids"]
        assert len({call["request_id"] for call in server.calls}) == 1
    assert servers[0].calls[0]["request_id"] != servers[1].calls[0]["request_id"]
    assert policies[0].builder.num_sessions == 0  # collect closed both sessions


def test_loop_fields_are_the_last_segment_of_a_summarized_episode(summarized):
    _, trajectories = summarized
    trajectory = max(trajectories, key=lambda t: len(t.segments))
    last = trajectory.segments[-1]
    fields = agent_loop_fields(trajectory, prompt_length=4096, response_length=4096)
    out = fields["output"]
    assert out["prompt_ids"] == last.prompt_tokens.tolist()
    assert out["response_ids"] == last.response_tokens.tolist()
    assert out["response_mask"] == last.response_masks.tolist()
    assert out["response_logprobs"] == pytest.approx(last.response_logprobs.tolist())
    assert out["reward_score"] == float(trajectory.trajectory_reward)
    assert out["num_turns"] == sum(1 for m in trajectory.chat_completions if m["role"] != "system")
    extra = out["extra_fields"]
    assert extra["agent_gym_segments"] == len(trajectory.segments) >= 2
    assert extra["agent_gym_rollout_id"] == trajectory.rollout_id and not extra["agent_gym_masked"]
    assert fields["metrics"]["generate_sequences"] == trajectory.metrics["llm_time"]
    split = agent_loop_fields(trajectory, prompt_length=4096, response_length=4096, reward_assignment="split")
    assert split["output"]["reward_score"] == pytest.approx(trajectory.trajectory_reward / len(trajectory.segments))


def _trajectory(status: str, prompt: list[int], response: list[int], mask: list[int]) -> StepTrajectory:
    seg = Segment(prompt_tokens=torch.tensor(prompt, dtype=torch.long),
                  response_tokens=torch.tensor(response, dtype=torch.long),
                  response_masks=torch.tensor(mask, dtype=torch.long),
                  response_logprobs=torch.tensor([-0.5 * m for m in mask], dtype=torch.float32))
    return StepTrajectory(prompt_tokens=seg.prompt_tokens, response_tokens=seg.response_tokens,
                          response_masks=seg.response_masks, trajectory_reward=1.0, rollout_id="r", group_id="g",
                          status=status, task={"id": "t", "question": "q", "ground_truth": "a"},
                          chat_completions=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                          steps=[Step(reward=1.0)], segments=[seg])


def test_loop_fields_fit_verls_lengths_and_mask_what_cannot_train():
    ok = _trajectory("ENV_DONE", [1, 2, 3, 4], [5, 6, 7, 8], [1, 1, 0, 1])
    cut = agent_loop_fields(ok, prompt_length=4, response_length=3)["output"]
    assert cut["response_ids"] == [5, 6, 7] and cut["response_mask"] == [1, 1, 0]  # a prefix stays exact
    assert cut["extra_fields"]["agent_gym_truncated"] and not cut["extra_fields"]["agent_gym_masked"]
    long_prompt = agent_loop_fields(ok, prompt_length=2, response_length=8)["output"]
    assert long_prompt["prompt_ids"] == [3, 4] and long_prompt["response_mask"] == [0, 0, 0, 0]
    assert long_prompt["extra_fields"]["agent_gym_masked"]
    failed = agent_loop_fields(_trajectory("POLICY_ERROR", [1, 2], [5, 6], [1, 1]), prompt_length=8,
                               response_length=8)["output"]
    assert failed["response_mask"] == [0, 0] and failed["extra_fields"]["agent_gym_masked"]
    empty = agent_loop_fields(_trajectory("ENV_ERROR", [], [], []), prompt_length=8, response_length=8,
                              pad_token_id=9, with_logprobs=False)["output"]
    assert empty["prompt_ids"] == [9] and empty["response_ids"] == [9] and empty["response_mask"] == [0]
    assert empty["response_logprobs"] is None
    assert agent_loop_fields(ok, prompt_length=8, response_length=8)["output"]["num_turns"] == 1


def test_a_failed_episode_carries_no_reward_and_no_logprobs():
    failed = _trajectory("ENV_ERROR", [1, 2], [5, 6, 7], [1, 0, 1])
    failed.trajectory_reward = 0.1  # shaping paid before the env failed: not an outcome
    out = agent_loop_fields(failed, prompt_length=8, response_length=8)["output"]
    assert out["reward_score"] == 0.0 and out["response_mask"] == [0, 0, 0] and out["response_logprobs"] == [0.0] * 3
    assert out["extra_fields"]["agent_gym_episode_reward"] == 0.1


def _verl_grpo(scores, mask, index, eps=1e-6):
    """verl 0.9.1's compute_grpo_outcome_advantage (every row of a group in its statistics)."""
    totals = scores.sum(-1)
    out = torch.zeros_like(totals)
    for key in set(index):
        rows = [i for i, k in enumerate(index) if k == key]
        values = totals[rows]
        mean, std = (values.mean(), values.std()) if len(rows) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out[rows] = (values - mean) / (std + eps)
    return out.unsqueeze(-1) * mask


def test_the_advantage_estimator_leaves_masked_rows_out_of_their_group():
    scores = torch.zeros(7, 3)
    scores[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 3.0, 2.0])
    mask = torch.ones(7, 3)
    mask[2] = 0  # a masked row (reward 0.5) in group a
    mask[4] = 0  # the only other row of group b
    index = ["a", "a", "a", "b", "b", "c", "d"]
    advantages, returns = grpo_advantages(scores, mask, index)
    assert torch.equal(advantages, returns)
    expected = _verl_grpo(scores[[0, 1]], mask[[0, 1]], ["a", "a"])  # group a without its masked row
    assert torch.allclose(advantages[[0, 1]], expected)
    assert advantages[2].abs().sum() == 0 and advantages[4].abs().sum() == 0
    assert advantages[3].abs().sum() == 0  # alone among the rows that ran: nothing to compare with
    # prompts sampled once keep verl's rule (no baseline); without masked rows it is verl's grpo
    assert torch.allclose(advantages[5:], _verl_grpo(scores[5:], mask[5:], ["c", "d"]))
    full = torch.ones(4, 3)
    assert torch.allclose(grpo_advantages(scores[:4], full, index[:4])[0], _verl_grpo(scores[:4], full, index[:4]))
    centred, _ = grpo_advantages(scores[[0, 1, 2]], mask[[0, 1, 2]], ["a"] * 3,
                                 config={"norm_adv_by_std_in_grpo": False})
    assert centred[:, -1].tolist() == [0.5, -0.5, 0.0]
    assert ADVANTAGE_ESTIMATOR == "agent_gym_grpo"


def test_rows_name_their_env_and_task_or_share_a_drawn_task(qwen_tokenizer, summarized):
    settings = EpisodeSettings.build(max_steps=2, reward_assignment="split")

    def row(**fields: Any) -> dict[str, Any]:
        policy = VerlServerPolicy(FakeServerManager(), qwen_tokenizer, SAMPLING, max_response_length=512,
                                  max_model_len=4096)
        return asyncio.run(run_row(settings, policy, fields, prompt_length=4096, response_length=512))["output"]

    _, trajectories = summarized
    task = trajectories[0].task
    given = row(env_id=ENV_ID, extra_info={"task": json.dumps(task), "index": 5})
    assert given["extra_fields"]["agent_gym_group_key"] == task["id"]
    # no task: the env draws one from seed + index, the same for the rollout.n samples of a row
    drawn = [row(extra_info={"env_id": ENV_ID}, index=7)["extra_fields"]["agent_gym_group_key"] for _ in range(2)]
    assert drawn[0] == drawn[1]
    with pytest.raises(ConfigError, match="env_id"):
        row(index=0)
    with pytest.raises(ValueError, match="JSON"):
        row(env_id=ENV_ID, task="{oops")
    with pytest.raises(ValueError, match="reward_assignment"):
        EpisodeSettings.build(reward_assignment="mean")
    with pytest.raises(ConfigError, match="env_id"):
        EpisodeSettings.build(env_id="agent_gym/Nope-v0")
    assert EpisodeSettings.build(memory={"simplify_thinking": True}).options.memory.simplify_thinking


def test_finish_reasons_of_verls_stop_reasons():
    stops = frozenset({EOT})
    assert finish_reason("completed", [5, EOT], stops, 8) == "stop"
    assert finish_reason("completed", [5, 6], stops, 2) == "length"  # vLLM says completed at the limit too
    assert finish_reason("completed", [5, 6], stops, 8) == "stop"
    assert finish_reason("length", [5, 6], stops, 8) == "length"
    assert finish_reason("stop", [5], stops, 8) == "stop"
    assert finish_reason(None, [], stops, 8) == "stop"
    assert finish_reason("aborted", [5], stops, 8) == finish_reason("abort", [5], stops, 8) == "error"


@pytest.mark.parametrize("server", [FakeServerManager(stop_reason="aborted"), FakeServerManager(fail=True)],
                         ids=["aborted", "server-down"])
def test_aborted_or_failed_requests_end_the_episode_masked(server, qwen_tokenizer):
    trajectories = collect_with(server, qwen_tokenizer, num_episodes=1, samples_per_task=1)
    assert trajectories[0].status == EpisodeStatus.POLICY_ERROR
    out = agent_loop_fields(trajectories[0], prompt_length=4096, response_length=512)["output"]
    assert out["extra_fields"]["agent_gym_masked"] and set(out["response_mask"]) == {0}
    assert out["extra_fields"]["agent_gym_error"]  # the reason travels with the masked sample


def test_unknown_names_are_attribute_errors_not_verl_imports():
    import agent_gym.integrations.verl as module

    with pytest.raises(AttributeError):
        module.NoSuchLoop  # noqa: B018
    assert AGENT_NAME == "agent_gym"


# ---------------------------------------------------------------------------------------------- with verl


@pytest.fixture(scope="module")
def verl():
    """verl's agent-loop module, or a skip saying why it is not importable."""
    try:
        from verl.experimental.agent_loop import agent_loop
    except ImportError as exc:
        pytest.skip(f"verl is not importable here ({exc}): 'pip install verl' pins transformers<5.11, so it does "
                    f"not install beside this project; see docs/trainers.md (verl) for a verl environment")
    return agent_loop


def _instantiate(verl, name: str, server: Any, tokenizer: Any, *, prompt_length: int = 2048) -> Any:
    """Build the loop registered as ``name`` exactly as verl's AgentLoopWorker._run_agent_loop does."""
    import hydra
    from omegaconf import OmegaConf

    trainer = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": prompt_length,
                                                                  "response_length": 512}}})
    return hydra.utils.instantiate(
        config=verl._agent_loop_registry[name],
        trainer_config=verl.DictConfigWrap(config=trainer),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=None,
        data_config=verl.DictConfigWrap(OmegaConf.create({})),
        tools=verl.ToolListWrap([]),
    )


def _run(verl, name: str, server: Any, tokenizer: Any, sampling: dict[str, Any] = SAMPLING, **row: Any) -> Any:
    async def main() -> Any:  # verl's loops bind to the running event loop when built
        loop = _instantiate(verl, name, server, tokenizer)
        return await loop.run(dict(sampling), raw_prompt=[{"role": "user", "content": "unused"}], **row)

    return asyncio.run(main())


def test_loop_registers_with_verls_decorator_and_returns_agent_loop_output(verl, qwen_tokenizer):
    import numpy as np
    from verl.workers.rollout.replica import TokenOutput as VerlTokenOutput

    from agent_gym.integrations.verl import AgentGymAgentLoop

    assert issubclass(AgentGymAgentLoop, verl.AgentLoopBase)
    assert verl._agent_loop_registry[AGENT_NAME] == {"_target_": "agent_gym.integrations.verl.AgentGymAgentLoop"}
    server = FakeServerManager(VerlTokenOutput)
    task = {"id": "lookup-x", "question": "How heavy is 1 unit of item Orlo bearing C-794?",
            "ground_truth": "1", "family": "lookup"}
    out = _run(verl, AGENT_NAME, server, qwen_tokenizer, index=np.int64(3),
               extra_info={"env_id": ENV_ID, "task": json.dumps(task)})
    assert isinstance(out, verl.AgentLoopOutput)
    assert out.extra_fields["agent_gym_group_key"] == "lookup-x"
    assert out.extra_fields["agent_gym_status"] != "ENV_ERROR" and not out.extra_fields["agent_gym_masked"]
    sampled = [i for i, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    assert sampled == [i for call in server.calls for i in call["ids"]]
    assert out.prompt_ids == server.calls[0]["prompt_ids"]
    assert len(out.response_logprobs) == len(out.response_ids) == len(out.response_mask) <= 512
    assert out.reward_score == out.extra_fields["agent_gym_episode_reward"]
    tensors = out.as_dict()  # verl's own conversion: tensors and the reward on the last response id
    assert tensors["rm_scores"][-1] == pytest.approx(out.reward_score)
    assert tensors["rollout_log_probs"].shape == tensors["responses"].shape
    no_logprobs = _run(verl, AGENT_NAME, FakeServerManager(VerlTokenOutput), qwen_tokenizer,
                       {**SAMPLING, "logprobs": False}, env_id=ENV_ID, index=0)
    assert no_logprobs.response_logprobs is None


def test_the_advantage_estimator_registers_with_verl(verl):
    from verl.trainer.ppo import core_algos

    from agent_gym.integrations.verl_advantage import register_advantage_estimator

    assert register_advantage_estimator() == register_advantage_estimator() == ADVANTAGE_ESTIMATOR
    assert core_algos.get_adv_estimator_fn(ADVANTAGE_ESTIMATOR) is grpo_advantages


def test_loops_from_the_agent_loop_config_yaml(verl, qwen_tokenizer):
    from omegaconf import OmegaConf
    from verl.workers.rollout.replica import TokenOutput as VerlTokenOutput

    for config in OmegaConf.load(YAML):  # what AgentLoopWorker does with agent_loop_config_path
        verl._agent_loop_registry[config.name] = config
    server = FakeServerManager(VerlTokenOutput)
    out = _run(verl, "agent_gym_tool_use", server, qwen_tokenizer, index=1, extra_info={})
    assert isinstance(out, verl.AgentLoopOutput) and out.num_turns >= 2
    assert out.extra_fields["agent_gym_status"] in {s.value for s in EpisodeStatus}
    per_row = _run(verl, "agent_gym_per_row", FakeServerManager(VerlTokenOutput), qwen_tokenizer,
                   env_id="agent_gym/Conversation-v0", index=2)
    assert per_row.extra_fields["agent_gym_rollout_id"] and per_row.metrics.generate_sequences >= 0.0
    with pytest.raises(ConfigError, match="env_id"):
        _run(verl, "agent_gym_per_row", server, qwen_tokenizer, index=0)


def test_loop_bad_rows_and_a_dead_server_give_masked_outputs(verl, qwen_tokenizer):
    from verl.workers.rollout.replica import TokenOutput as VerlTokenOutput

    down = _run(verl, AGENT_NAME, FakeServerManager(VerlTokenOutput, fail=True), qwen_tokenizer, env_id=ENV_ID)
    assert down.extra_fields["agent_gym_status"] == "POLICY_ERROR" and set(down.response_mask) == {0}
    rejected = _run(verl, AGENT_NAME, FakeServerManager(VerlTokenOutput), qwen_tokenizer, env_id=ENV_ID,
                    task={"id": "bad"})
    assert rejected.extra_fields["agent_gym_status"] == "ENV_ERROR" and set(rejected.response_mask) == {0}
    assert "question" in rejected.extra_fields["agent_gym_error"]
    with pytest.raises(ValueError, match="JSON"):
        _run(verl, AGENT_NAME, FakeServerManager(VerlTokenOutput), qwen_tokenizer, env_id=ENV_ID, task="{oops")
