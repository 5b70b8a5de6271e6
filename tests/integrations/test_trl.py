"""agent_gym.integrations.trl: a real GRPOTrainer (trl from PyPI, CPU) trains the embedded tiny agent on ToolUse-v0.

The module-scoped ``grpo_run`` trains two GRPO steps through ``rollout_func`` and records what the
rollout function returned; the tests check the loss, the weights, the masks, the logprobs against the
trainer's own forward pass and the rewards TRL logged. One step runs through ``environment_factory``.
Other tests call the rollout function with a stand-in trainer (the fields TRL's trainer has) for the
vLLM-server path (against the reference server) and bad input.
"""

from __future__ import annotations

import json
import math
import os
import time
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from sandbox_helpers import needs_bwrap  # noqa: E402

import agent_gym  # noqa: E402,F401 - registers the env ids
from agent_gym.errors import ConfigError  # noqa: E402
from agent_gym.integrations.trl import rollout_func
from agent_gym.integrations.trl_data import episode_reward, metric_reward, task_dataset, task_prompt
from agent_gym.integrations.trl_environment import environment_dataset, environment_factory
from agent_gym.models import default_model_path  # noqa: E402

ENV = "agent_gym/ToolUse-v0"
TEMPERATURE = 1.2  # not 1: the logprob check then tells processed from raw logprobs


def _tasks(family: str, count: int) -> list[dict]:
    env = gym.make(ENV)
    try:
        return [t for t in env.unwrapped.tasks if t["family"] == family][:count]
    finally:
        env.close()


def _model_and_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def _trainer(model, tokenizer, *, num_generations=2, **args):
    """A stand-in for GRPOTrainer: the attributes the rollout function reads."""
    settings = {"use_vllm": False, "seed": 0, "temperature": TEMPERATURE, "max_completion_length": 160, **args}
    return SimpleNamespace(model=model, processing_class=tokenizer, args=SimpleNamespace(**settings),
                           num_generations=num_generations, temperature=settings["temperature"],
                           max_completion_length=settings["max_completion_length"],
                           use_vllm=settings["use_vllm"])


def _trainer_logprobs(model, prompt_ids, completion_ids, temperature):
    """The trainer's logprob of each completion id: one forward pass over prompt + completion, logits / T."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature
    model.train(was_training)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion_ids)[:, None])[:, 0]


def _max_logprob_error(model, out, temperature):
    worst = 0.0
    for p, c, lp, m in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True):
        ours = _trainer_logprobs(model, p, c, temperature)
        mask = torch.tensor(m, dtype=torch.bool)
        worst = max(worst, float((ours - torch.tensor(lp))[mask].abs().max()))
    return worst


def _runs(ids, mask):
    """Consecutive runs of equal mask value: ``[(value, ids), ...]``."""
    runs: list[tuple[int, list[int]]] = []
    for i, m in zip(ids, mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(i)
        else:
            runs.append((m, [i]))
    return runs


def _check_mask(tokenizer, sample_ids, mask, trajectory):
    """Mask 1 exactly on what the model sampled: each 1-run is one assistant turn (its text and stop id),
    each 0-run is what the env put between two turns (the tool's reply, up to the next generation prompt)."""
    runs = _runs(sample_ids, mask)
    # an episode whose completion budget ran out ends with a turn that sampled nothing
    unsampled_end = trajectory.steps[-1].info.get("end_reason") == "policy_prompt_truncation"
    assert [m for m, _ in runs] == [1, 0] * (len(trajectory.steps) - 1) + ([] if unsampled_end else [1])
    sampled = [tokenizer.decode(r) for m, r in runs if m == 1]
    between = [tokenizer.decode(r) for m, r in runs if m == 0]
    for k, step in enumerate(trajectory.steps[: len(sampled)]):
        assert sampled[k].removesuffix("<|im_end|>") == step.model_response, (k, sampled[k])
    for k, text in enumerate(between):
        # each tool result is its own message: a turn with several calls has one observation line per call
        for line in str(trajectory.steps[k + 1].observation).split("\n"):
            assert line[:40] in text, text
        assert text.startswith("\n") and text.endswith("<|im_start|>assistant\n"), text


# ---------------------------------------------------------------------------------------------- GRPO run
@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    """Two GRPO steps on four lookup tasks (the tiny agent's weakest family: its rewards vary)."""
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _model_and_tokenizer()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rollout = rollout_func(ENV, max_steps=6)
    calls = []

    def recording(prompts, trainer):
        out = rollout(prompts, trainer)
        # the trainer's logprobs with the weights the episodes were sampled with (before this step's update)
        error = _max_logprob_error(trainer.model, out, trainer.temperature) if not calls else None
        calls.append({"prompts": list(prompts), "out": out, "trajectories": list(rollout.last_trajectories),
                      "logprob_error": error, "step": trainer.state.global_step,
                      "training_mode": trainer.model.training})
        return out

    def brevity(completion_ids, **kwargs):
        # a small length penalty: two different samples of a task (almost) never tie, so every group
        # has reward variance and GRPO's gradient is not zero however the env rewards fall
        return [-len(ids) / 1000 for ids in completion_ids]

    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=160, max_steps=2, use_cpu=True, report_to="none",
                      logging_steps=1, save_strategy="no", learning_rate=1e-4, bf16=False, seed=0,
                      gradient_checkpointing=False, temperature=TEMPERATURE)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=task_dataset(
        _tasks("lookup", 4)), reward_funcs=[episode_reward, brevity], rollout_func=recording)
    trainer.train()
    rollout.close()
    after = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return SimpleNamespace(calls=calls, history=trainer.state.log_history, before=before, after=after,
                           tokenizer=tokenizer, trainer=trainer)


def test_grpo_trains_two_steps_with_finite_loss(grpo_run):
    steps = [h for h in grpo_run.history if "loss" in h and "train_runtime" not in h]
    assert len(steps) == 2 and len(grpo_run.calls) == 2
    assert all(math.isfinite(h["loss"]) for h in steps)
    assert any(h["grad_norm"] > 0 for h in steps)


def test_the_model_trains_in_train_mode_after_each_rollout(grpo_run):
    assert [c["training_mode"] for c in grpo_run.calls] == [True, True]
    assert not any(k.startswith("eval_") for h in grpo_run.history for k in h)


def test_grpo_changes_the_weights(grpo_run):
    changed = [k for k, v in grpo_run.after.items() if not torch.equal(v, grpo_run.before[k])]
    assert changed, "GRPO left every weight as it was"


def test_one_episode_per_prompt_entry_in_groups(grpo_run):
    for call in grpo_run.calls:
        prompts, out = call["prompts"], call["out"]
        assert len(prompts) == 4 and prompts[0] == prompts[1] and prompts[2] == prompts[3]
        assert all(len(out[k]) == 4 for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask"))
        assert out["task_id"][0] == out["task_id"][1] and len(set(out["rollout_id"])) == 4
        # each task's two samples were sampled independently
        assert out["completion_ids"][0] != out["completion_ids"][1] or out["completion_ids"][2] != out[
            "completion_ids"][3]


def test_env_mask_is_zero_exactly_on_tokens_the_model_did_not_sample(grpo_run):
    for call in grpo_run.calls:
        out = call["out"]
        for ids, mask, logprobs, trajectory in zip(out["completion_ids"], out["env_mask"], out["logprobs"],
                                                   call["trajectories"], strict=True):
            assert len(ids) == len(mask) == len(logprobs)
            assert set(mask) <= {0, 1} and mask[0] == 1
            assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)
            _check_mask(grpo_run.tokenizer, ids, mask, trajectory)


def test_rollout_logprobs_equal_the_trainers_at_the_first_step(grpo_run):
    first = grpo_run.calls[0]
    assert first["step"] == 0
    assert first["logprob_error"] < 1e-3
    assert {t.sampling["logprobs_mode"] for t in first["trajectories"]} == {"processed_logprobs"}
    assert {t.sampling["temperature"] for t in first["trajectories"]} == {TEMPERATURE}


def test_trl_logs_the_episode_rewards(grpo_run):
    logged = [h["rewards/episode_reward/mean"] for h in grpo_run.history if "rewards/episode_reward/mean" in h]
    ours = [sum(c["out"]["episode_reward"]) / 4 for c in grpo_run.calls]
    assert logged == pytest.approx(ours, abs=1e-6)
    for call in grpo_run.calls:
        rewards = [float(t.trajectory_reward) for t in call["trajectories"]]
        assert call["out"]["episode_reward"] == pytest.approx(rewards)


# ---------------------------------------------------------------------------------------------- environment_factory
def test_environment_factory_runs_one_grpo_step(tmp_path):
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    model, tokenizer = _model_and_tokenizer()
    tokenizer.response_template = qwen3_template  # TRL does not know the tiny agent's template: Hermes calls
    tasks = _tasks("lookup", 1)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=64, max_steps=1, use_cpu=True, report_to="none", logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, bf16=False, seed=0, gradient_checkpointing=False,
                      max_tool_calling_iterations=2)
    environment = environment_factory(ENV, max_steps=4)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                          train_dataset=environment_dataset(ENV, tasks), environment_factory=environment)
    trainer.train()
    assert trainer.state.global_step == 1
    logged = next(h for h in trainer.state.log_history if "loss" in h)
    assert math.isfinite(logged["loss"])
    name = f"rewards/{environment.__name__}/mean"
    assert logged[name] == pytest.approx(sum(e.get_reward() for e in trainer.environments) / 2, abs=1e-6)
    assert {e.env.unwrapped.task["id"] for e in trainer.environments} == {tasks[0]["id"]}


def _recording(trainer_class):
    """``trainer_class`` recording what it scored: its loss mask and advantages, per row."""
    scored = {}

    class Recording(trainer_class):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            scored.update(loss_mask=mask.clone(), advantages=output["advantages"].clone(),
                          completion_mask=output["completion_mask"].clone(),
                          num_items_in_batch=float(output["num_items_in_batch"]))
            return output

    return Recording, scored


def test_environment_factory_masks_episodes_whose_env_failed(tmp_path):
    """An env that cannot start (its rows come first): reward None and, with masking_trainer, no id in the loss."""
    from training_faults import ENV_ID as FAULTY
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from agent_gym.integrations.trl_environment import masking_trainer

    model, tokenizer = _model_and_tokenizer()
    tokenizer.response_template = qwen3_template
    tasks = _tasks("lookup", 2)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=64, max_steps=1, use_cpu=True, report_to="none", logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, bf16=False, seed=0, gradient_checkpointing=False,
                      max_tool_calling_iterations=2, shuffle_dataset=False, beta=0.04)
    environment = environment_factory(FAULTY, env_kwargs={"fault": "reset", "only": [tasks[0]["id"]]}, max_steps=4)
    Trainer, scored = _recording(masking_trainer(GRPOTrainer))
    trainer = Trainer(model=model, processing_class=tokenizer, args=args,
                      train_dataset=environment_dataset(ENV, tasks), environment_factory=environment)
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "loss" in h)
    assert math.isfinite(logged["loss"])
    masked = [e.masked for e in trainer.environments]
    assert masked == [True, True, False, False]  # the first task's env could not start
    assert all("SandboxError" in e.failure and e.get_reward() is None for e in trainer.environments[:2])
    assert scored["completion_mask"][:2].sum() > 0  # the model wrote ids in those rows ...
    assert scored["loss_mask"][:2].sum() == 0 and scored["advantages"][:2].abs().sum() == 0  # ... none trains
    assert scored["loss_mask"][2:].sum() > 0 and scored["num_items_in_batch"] == float(scored["loss_mask"].sum())
    with pytest.raises(TypeError, match="GRPOTrainer"):
        masking_trainer(object)


def test_a_batch_whose_first_rows_failed_before_their_first_turn_trains(tmp_path):
    """The server is down for the first task: its rows are one masked id each, and GRPOTrainer steps."""
    from training_faults import OracleServer, oracle_turns
    from trl import GRPOConfig, GRPOTrainer

    from agent_gym.integrations.verl import VerlServerPolicy

    model, tokenizer = _model_and_tokenizer()
    tasks = _tasks("lookup", 2)
    server = OracleServer(tokenizer, oracle_turns(tasks), "down", only={tasks[0]["question"]})
    policy = VerlServerPolicy(server, tokenizer, {"temperature": 1.0}, max_response_length=512, max_model_len=4096)
    rollout = rollout_func(ENV, policy=policy, max_steps=4)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=256, max_steps=1, use_cpu=True, report_to="none", logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, bf16=False, seed=0, gradient_checkpointing=False,
                      shuffle_dataset=False, beta=0.04)
    Trainer, scored = _recording(GRPOTrainer)
    trainer = Trainer(model=model, processing_class=tokenizer, args=args, train_dataset=task_dataset(tasks),
                      reward_funcs=episode_reward, rollout_func=rollout)
    trainer.train()
    assert [t.status for t in rollout.last_trajectories] == ["POLICY_ERROR"] * 2 + ["ENV_DONE"] * 2
    assert math.isfinite(next(h for h in trainer.state.log_history if "loss" in h)["loss"])
    assert scored["loss_mask"][:2].sum() == 0 and scored["advantages"][:2].abs().sum() == 0
    assert scored["loss_mask"][2:].sum() > 0
    policy.close()


def test_environment_class_plays_a_task_with_its_tools():
    Environment = environment_factory(ENV)
    task = _tasks("lookup", 1)[0]
    instance = Environment()
    assert instance.reset(prompt=[], task=task_prompt(task)) is None
    oracle = gym.make(ENV)
    oracle.reset(options={"task": task})
    expected, done = 0.0, False
    for turn in task["solution"]:
        for call in turn:
            reply = getattr(instance, call["name"])(**call["arguments"])
            assert "Error" not in reply
        _, reward, *_ = oracle.step(oracle.unwrapped.oracle_action())
        expected += reward
    while not done:  # the oracle's answer turn
        _, reward, done, _, _ = oracle.step(oracle.unwrapped.oracle_action())
        expected += reward
    instance.answer(answer=str(task["ground_truth"]))
    assert instance.done and instance.status == "ENV_DONE"
    assert instance.get_reward() == pytest.approx(expected) and instance.get_reward() > 1.0
    assert "over" in instance.lookup_item(item="x")


@needs_bwrap
def test_environment_class_takes_an_episodes_tools():
    """Terminal-v0 gives each episode its own tools (a sandbox's bash and submit); its tasks hold bytes."""
    env_id = "agent_gym/Terminal-v0"
    Environment = environment_factory(env_id, max_steps=4)
    assert {"bash", "submit", "answer"} <= {n for n in dir(Environment) if not n.startswith("_")}
    task = gym.make(env_id).unwrapped.tasks[0]
    assert task_prompt(task) == task["id"]  # bytes: named by its id
    instance = Environment()
    try:
        instance.reset(**environment_dataset(env_id, [task])[0])
        assert "[exit code: 0]" in instance.bash(command="ls")
        instance.submit()
        assert instance.done and instance.status == "ENV_DONE"
        assert instance.get_reward() == pytest.approx(float(instance.reward))
    finally:
        instance.env.close()


def test_environment_class_tools_have_the_env_schemas():
    from transformers.utils import get_json_schema

    instance = environment_factory(ENV)()
    env = gym.make(ENV)
    for schema in env.unwrapped.tool_schemas:
        ours = get_json_schema(getattr(instance, schema["function"]["name"]))["function"]
        theirs = schema["function"]["parameters"]
        assert set(ours["parameters"]["properties"]) == set(theirs["properties"])
        assert set(ours["parameters"].get("required", [])) == set(theirs["required"])
        assert ours["description"] in schema["function"]["description"]


def test_environment_class_rejects_rows_without_a_valid_task():
    instance = environment_factory(ENV)()
    with pytest.raises(ConfigError, match="'task'"):
        instance.reset(prompt=[])
    with pytest.raises(ConfigError, match="rejects"):
        instance.reset(task={"id": "x", "question": "q", "ground_truth": "abc", "answer_type": "number"})
    with pytest.raises(ConfigError, match="not a task"):
        instance.reset(task_id="no-such-task")
    with pytest.raises(ConfigError, match="registered"):
        environment_factory("agent_gym/NoSuchEnv-v0")


# ---------------------------------------------------------------------------------------------- vLLM server path
def test_rollout_samples_from_the_trainers_vllm_server(start_server):
    server = start_server(model=str(default_model_path()), logprobs_mode="processed_logprobs", max_model_len=4096)
    model, tokenizer = _model_and_tokenizer()
    # a budget of 48 completion ids: one tool call, its reply, and a turn cut short (or the answer)
    trainer = _trainer(None, tokenizer, use_vllm=True, vllm_mode="server", vllm_server_base_url=f"http://{server}",
                       max_completion_length=48)
    task = _tasks("units", 1)[0]
    rollout = rollout_func(ENV, max_steps=6)
    out = rollout([task_prompt(task)] * 2, trainer)
    assert {t.status for t in rollout.last_trajectories} <= {"ENV_DONE", "TRUNCATION", "PROMPT_TRUNCATION"}
    assert all(t.steps[0].info.get("tool_calls") is not None for t in rollout.last_trajectories)
    assert _max_logprob_error(model, out, TEMPERATURE) < 1e-3
    for ids, mask, trajectory in zip(out["completion_ids"], out["env_mask"], rollout.last_trajectories, strict=True):
        _check_mask(tokenizer, ids, mask, trajectory)
    rollout.close()


def test_a_server_that_is_down_gives_masked_samples_with_the_reason():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, tokenizer = _model_and_tokenizer()
    trainer = _trainer(None, tokenizer, use_vllm=True, vllm_mode="server",
                       vllm_server_base_url=f"http://127.0.0.1:{port}")
    rollout = rollout_func(ENV, client_options={"max_retries": 1, "backoff": 0.05, "timeout": 5})
    start = time.monotonic()
    out = rollout([task_prompt(_tasks("units", 1)[0])] * 2, trainer)
    assert time.monotonic() - start < 60
    assert out["episode_reward"] == [None, None]
    assert out["episode_status"] == ["POLICY_ERROR"] * 2 and all(out["episode_failure"])
    assert out["model_version"] == [-1, -1]  # no sampled id: no version (TRL's per-sample model version)
    assert out["env_mask"] == [[0], [0]] or all(sum(m) == 0 for m in out["env_mask"])
    assert all(len(p) >= 1 and len(c) >= 1 for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True))
    assert episode_reward(episode_reward=out["episode_reward"]) == [None, None]
    assert metric_reward("res_reward")(episode_metrics=out["episode_metrics"],
                                       episode_reward=out["episode_reward"]) == [None, None]


def test_sampling_follows_the_trainer_unless_overridden():
    model, tokenizer = _model_and_tokenizer()
    model.train()  # as a trainer's model is: the rollout leaves it so
    trainer = _trainer(model, tokenizer, max_completion_length=8, top_p=0.9)
    prompts = [task_prompt(_tasks("units", 1)[0])] * 2
    rollout = rollout_func(ENV, sampling={"min_p": 0.05})
    out = rollout(prompts, trainer)
    sampling = rollout.last_trajectories[0].sampling
    assert sampling["temperature"] == TEMPERATURE and sampling["top_p"] == 0.9 and sampling["min_p"] == 0.05
    assert sampling["logprobs_mode"] == "processed_logprobs"
    assert all(sum(m) <= 8 for m in out["env_mask"]) and model.training


# ---------------------------------------------------------------------------------------------- bad input
def test_unknown_env_id_is_a_clear_error():
    with pytest.raises(ConfigError, match="not a registered env"):
        rollout_func("agent_gym/NoSuchEnv-v0")
    with pytest.raises(ConfigError, match="reward_assignment"):
        rollout_func(ENV, reward_assignment="half")
    with pytest.raises(ConfigError, match="sampling"):
        rollout_func(ENV, sampling={"temprature": 1.0})


def test_a_task_the_env_rejects_raises_or_is_masked_with_the_reason():
    bad = {"id": "bad-1", "question": "How much?", "ground_truth": "lots", "answer_type": "number"}
    trainer = _trainer(None, None)
    with pytest.raises(ConfigError, match="rejects the task 'bad-1'"):
        rollout_func(ENV)([task_prompt(bad)] * 2, trainer)
    out = rollout_func(ENV, invalid_tasks="mask", policy=_NeverCalled())([task_prompt(bad)] * 2, trainer)
    assert out["episode_reward"] == [None, None] and out["env_mask"] == [[0], [0]]
    assert "numeric 'ground_truth'" in out["episode_failure"][0] and out["task_id"] == ["bad-1", "bad-1"]


def test_prompts_that_name_no_task_are_clear_errors():
    trainer = _trainer(None, None)
    rollout = rollout_func(ENV, policy=_NeverCalled())
    with pytest.raises(ConfigError, match="neither a task's JSON nor the id"):
        rollout(["What is 2 + 2?"] * 2, trainer)
    with pytest.raises(ConfigError, match="invalid JSON"):
        rollout(["{not json"] * 2, trainer)
    with pytest.raises(ConfigError, match="task_dataset"):
        rollout([[{"role": "user", "content": "hi"}]] * 2, trainer)
    a, b = _tasks("units", 2)
    with pytest.raises(ConfigError, match="one task per block"):
        rollout([a["id"], b["id"]], trainer)


def test_infrastructure_failures_are_masked_not_zero():
    trainer = _trainer(None, None)
    tasks = _tasks("units", 1)
    out = rollout_func(ENV, policy=_Failing())([task_prompt(tasks[0]), tasks[0]["id"]], trainer)
    assert out["episode_reward"] == [None, None] and out["episode_status"] == ["POLICY_ERROR"] * 2
    assert "policy exploded" in out["episode_failure"][0]
    assert all(sum(m) == 0 and len(ids) >= 1 for m, ids in zip(out["env_mask"], out["completion_ids"], strict=True))


def test_task_dataset_round_trips_through_the_rollout_function():
    tasks = _tasks("dates", 3)
    dataset = task_dataset(tasks)
    assert dataset.column_names == ["prompt", "task_id"] and dataset["task_id"] == [t["id"] for t in tasks]
    assert [json.loads(p) for p in dataset["prompt"]] == tasks
    assert len(task_dataset(ENV)) == len(gym.make(ENV).unwrapped.tasks)


class _NeverCalled:
    """A policy that must not be asked for a turn."""

    async def aact(self, *args, **kwargs):
        raise AssertionError("no episode should run")

    def act(self, *args, **kwargs):
        raise AssertionError("no episode should run")

    def close_session(self, session_id):
        pass


class _Failing(_NeverCalled):
    """A policy whose server is broken."""

    async def aact(self, *args, **kwargs):
        raise RuntimeError("policy exploded")
