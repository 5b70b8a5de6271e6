"""TransformersPolicy: concurrent turns decoded as one batch; raw and processed logprobs re-score exactly."""

from __future__ import annotations

import pytest
import torch

from agent_gym import collect
from agent_gym.models import default_model_path
from agent_gym.models.evaluate_tiny_agent import held_out_tasks
from agent_gym.policy import SamplingParams, TransformersPolicy


@pytest.fixture(scope="module")
def agent_dir():
    return str(default_model_path())


def test_a_batch_samples_what_each_prompt_samples_alone(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=1.0, top_k=-1, seed=3))
    tok = policy.tokenizer
    prompts = [tok.encode(text) for text in ("Compute 12 + 30.", "<|im_start|>user\nHi", "What day is 2020-01-01?")]
    budgets, seeds = [12, 3, 20], [7, 8, 9]
    alone = [policy.generate_ids(p, n, seed=s) for p, n, s in zip(prompts, budgets, seeds, strict=True)]
    together = policy.generate_batch(prompts, budgets, seeds)
    for (ids_a, lps_a, fin_a), (ids_b, lps_b, fin_b) in zip(alone, together, strict=True):
        assert ids_a == ids_b and fin_a == fin_b
        assert max(abs(a - b) for a, b in zip(lps_a, lps_b, strict=True)) < 1e-4
    assert [len(ids) <= n for (ids, _, _), n in zip(together, budgets, strict=True)] == [True] * 3


def test_turns_joining_a_running_batch_sample_what_they_sample_alone(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=1.0, top_k=-1, seed=3))
    tok = policy.tokenizer
    texts = ("Compute 12 + 30.", "<|im_start|>user\nHi", "What day is 2020-01-01?", "a b c d e f g h i j k l m n o p")
    prompts = [tok.encode(text) for text in texts]
    budgets = [1, 9, 20, 14]  # the first leaves the batch empty before the others arrive
    alone = [policy.generate_ids(p, n, seed=s) for s, (p, n) in enumerate(zip(prompts, budgets, strict=True))]
    rows = [policy.make_row(p, n, s, None) for s, (p, n) in enumerate(zip(prompts, budgets, strict=True))]
    waiting = rows[1:]
    done = []

    def admit(room):
        return [waiting.pop(0)] if waiting and room and done else []

    with torch.inference_mode():
        policy.engine.run(rows[:1], admit, done.append)
    assert sorted(map(id, done)) == sorted(map(id, rows))
    for row, (ids, logps, finish) in zip(rows, alone, strict=True):
        assert row.out == ids and row.finish == finish
        assert max(abs(a - b) for a, b in zip(row.logps, logps, strict=True)) < 1e-4


def test_concurrent_episodes_share_batches(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=0.0, max_tokens=64, seed=0))
    sizes: list[int] = []
    forward = policy.model.forward

    def recording(*args, **kwargs):
        sizes.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    policy.model.forward = recording
    tasks = held_out_tasks(2)
    batched = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=8, progress=False, max_steps=4)
    assert max(sizes) > 1
    policy.model.forward = forward
    alone = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=1, progress=False, max_steps=4)
    policy.close()
    assert [t.response_tokens.tolist() for t in batched] == [t.response_tokens.tolist() for t in alone]


def test_turns_reuse_their_session_kv_cache_and_sample_the_same_ids(agent_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=48, seed=5)
    tasks = held_out_tasks(2)
    results = {}
    for reuse in (False, True):
        policy = TransformersPolicy(agent_dir, sampling=sampling, reuse_kv=reuse)
        encoded: list[int] = []
        forward = policy.model.forward

        def counting(*args, _forward=forward, _encoded=encoded, **kwargs):
            _encoded.append(int(kwargs["input_ids"].shape[1]))
            return _forward(*args, **kwargs)

        policy.model.forward = counting
        trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=4, progress=False,
                               max_steps=4)
        policy.close()
        results[reuse] = ([t.response_tokens.tolist() for t in trajectories], sum(n for n in encoded if n > 1))
    assert results[True][0] == results[False][0]
    assert sum(len(t) for t in results[True][0]) > 50
    assert results[True][1] < 0.8 * results[False][1]  # later turns encode only their new prompt ids


def test_a_prompt_that_does_not_extend_the_cached_ids_is_encoded_whole(agent_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, seed=2)
    policy = TransformersPolicy(agent_dir, sampling=sampling)
    plain = TransformersPolicy(agent_dir, sampling=sampling, reuse_kv=False)
    tok = policy.tokenizer
    first, other = tok.encode("Compute 12 + 30."), tok.encode("What day is 2020-01-01?")
    [(ids, _, _)] = policy.generate_batch([first], [6], [1], sessions=["s"])
    follow = first + ids + tok.encode(" and then?")
    for prompt, seed in ((follow, 2), (other, 3)):  # the first extends the cached ids, the second does not
        [(ids_a, lps_a, fin_a)] = policy.generate_batch([prompt], [8], [seed], sessions=["s"])
        [(ids_b, lps_b, fin_b)] = plain.generate_batch([prompt], [8], [seed])
        assert ids_a == ids_b and fin_a == fin_b
        assert max(abs(a - b) for a, b in zip(lps_a, lps_b, strict=True)) < 1e-4
    assert policy.engine.sessions.peek("s")[0] == other + ids_a[:-1]


def test_shared_prompt_heads_are_encoded_once_with_the_same_values(agent_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, seed=4)
    tok = TransformersPolicy(agent_dir, sampling=sampling).tokenizer
    head = tok.encode("<|im_start|>system\nYou are a careful assistant with tools. " * 12)
    assert len(head) > 130
    prompts = [head + tok.encode(f"<|im_start|>user\nCompute {n} + 7.") for n in (11, 250)]
    fresh = [TransformersPolicy(agent_dir, sampling=sampling).generate_ids(p, 10, seed=9) for p in prompts]
    shared = TransformersPolicy(agent_dir, sampling=sampling)
    encoded: list[int] = []
    forward = shared.model.forward

    def counting(*args, **kwargs):
        encoded.append(int(kwargs["input_ids"].shape[1]))
        return forward(*args, **kwargs)

    shared.model.forward = counting
    again = []
    counts = []
    for p in prompts:
        encoded.clear()
        again.append(shared.generate_ids(p, 10, seed=9))
        counts.append(sum(n for n in encoded if n > 1))
    assert again == fresh  # the same values, bit for bit, whether the head was cached or not
    assert counts[0] >= len(head) - 64 and counts[1] < 64 + 20  # the second prompt encoded only its tail


def _rescore(model, trajectory, temperature: float, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    prompt = trajectory.prompt_tokens.tolist()
    response = trajectory.response_tokens.tolist()
    mask = trajectory.response_masks.bool()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    if temperature > 0:
        logits = logits / temperature
        if top_k > 0:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response)[:, None])[:, 0]
    return logp[mask], torch.as_tensor(trajectory.response_logprobs, dtype=torch.float32)[mask]


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_rollout_logprobs_rescore_with_a_plain_forward_pass(agent_dir, mode):
    from transformers import AutoModelForCausalLM

    sampling = SamplingParams(temperature=0.7, top_k=5, max_tokens=48, seed=1)
    policy = TransformersPolicy(agent_dir, sampling=sampling, logprobs_mode=mode)
    trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=held_out_tasks(1), n_parallel=4,
                           progress=False, max_steps=3)
    policy.close()
    model = AutoModelForCausalLM.from_pretrained(agent_dir).eval()
    checked = 0
    for t in trajectories:
        if len(t.segments) > 1:
            continue
        if mode == "raw_logprobs":
            rescored, recorded = _rescore(model, t, 0.0, -1)
        else:
            rescored, recorded = _rescore(model, t, sampling.temperature, sampling.top_k)
        assert torch.allclose(rescored, recorded, atol=1e-3), (rescored - recorded).abs().max()
        checked += int(t.response_masks.sum())
    assert checked > 20


def test_logprobs_mode_is_checked(agent_dir):
    with pytest.raises(ValueError, match="logprobs_mode"):
        TransformersPolicy(agent_dir, logprobs_mode="logits")


def test_rows_that_grow_and_reshape_the_batch_store_sample_what_they_sample_alone(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=1.0, top_k=-1, seed=6), reuse_kv=False)
    tok = policy.tokenizer
    short = tok.encode("Compute 12 + 30.")
    long = tok.encode("a b c d e f g h i j k l m n o p q r s t u v w x y z " * 8)
    assert len(long) > len(short) + 64  # joins with more ids than the running batch has columns before its end
    prompts = [short, long] + [tok.encode(f"What is {n} * {n}?") for n in range(5)]
    budgets = [300, 40, 12, 5, 30, 9, 3]  # 300 steps outgrow the first column buffer; 7 rows outgrow 4 slots
    seeds = list(range(len(prompts)))
    alone = [policy.generate_ids(p, n, seed=s) for p, n, s in zip(prompts, budgets, seeds, strict=True)]
    rows = [policy.make_row(p, n, s, None) for p, n, s in zip(prompts, budgets, seeds, strict=True)]
    waiting = rows[1:]
    done = []
    steps = [0]

    def admit(room):
        steps[0] += 1
        if steps[0] == 3:  # the long prompt joins a running batch, the rest together two steps later
            return [waiting.pop(0)]
        if steps[0] == 5:
            return [waiting.pop(0) for _ in range(min(room, len(waiting)))]
        return []

    with torch.inference_mode():
        policy.engine.run(rows[:1], admit, done.append)
    assert len(done) == len(rows) and policy.engine.store.slots >= 7 and policy.engine.store.cap > 300
    for row, (ids, logps, finish) in zip(rows, alone, strict=True):
        assert row.out == ids and row.finish == finish
        assert max(abs(a - b) for a, b in zip(row.logps, logps, strict=True)) < 1e-4


def test_a_seed_samples_the_same_ids_at_every_n_parallel(agent_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=48, seed=11)
    tasks = held_out_tasks(2)
    ids = {}
    for n_parallel in (1, 8):
        policy = TransformersPolicy(agent_dir, sampling=sampling)
        trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=n_parallel, progress=False,
                               max_steps=4)
        policy.close()
        ids[n_parallel] = [t.response_tokens.tolist() for t in trajectories]
    assert sum(len(t) for t in ids[1]) > 50
    assert ids[1] == ids[8]


def test_decode_steps_that_read_shared_prompt_heads_once_sample_what_a_plain_batch_samples(agent_dir, monkeypatch):
    from agent_gym.inference import shared_heads

    sampling = SamplingParams(temperature=1.0, top_k=-1, seed=8)
    shared = TransformersPolicy(agent_dir, sampling=sampling)
    plain = TransformersPolicy(agent_dir, sampling=sampling, reuse_kv=False)  # reads every row's own columns
    tok = shared.tokenizer
    head = tok.encode("<|im_start|>system\nYou are a careful assistant with tools. " * 12)
    other = tok.encode("<|im_start|>system\nA different env with other tools and rules. " * 10)
    prompts = [(head if i % 4 else other) + tok.encode(f"<|im_start|>user\nCompute {i} * {i + 3}.") for i in range(9)]
    budgets, seeds = [16 + 3 * i for i in range(9)], list(range(9))
    calls = []
    attend = shared_heads.PrefixPlan.attend

    def counting(self, *args):
        calls.append(len(self.groups))
        return attend(self, *args)

    monkeypatch.setattr(shared_heads.PrefixPlan, "attend", counting)
    together = shared.generate_batch(prompts, budgets, seeds)
    assert calls and max(calls) == 2  # two groups of rows, each reading its own head once
    for (ids_a, lps_a, fin_a), (ids_b, lps_b, fin_b) in zip(together, plain.generate_batch(prompts, budgets, seeds),
                                                            strict=True):
        assert ids_a == ids_b and fin_a == fin_b
        assert max(abs(a - b) for a, b in zip(lps_a, lps_b, strict=True)) < 1e-4


def test_a_model_without_sdpa_gets_padding_masks_and_samples_the_same_ids(agent_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sampling = SamplingParams(temperature=1.0, top_k=-1, seed=3)
    model = AutoModelForCausalLM.from_pretrained(agent_dir, attn_implementation="eager")
    eager = TransformersPolicy(model, AutoTokenizer.from_pretrained(agent_dir), sampling=sampling)
    assert not eager.engine.mask_dict  # the model builds its masks; joining rows are encoded one at a time
    sdpa = TransformersPolicy(agent_dir, sampling=sampling)
    tok = sdpa.tokenizer
    head = tok.encode("<|im_start|>system\nYou are a careful assistant with tools. " * 8)
    prompts = [head + tok.encode(f"<|im_start|>user\nCompute {n} + {2 * n}.") for n in range(7)]
    budgets, seeds = [10 + 4 * n for n in range(7)], list(range(7))
    for (ids_a, lps_a, fin_a), (ids_b, lps_b, fin_b) in zip(eager.generate_batch(prompts, budgets, seeds),
                                                            sdpa.generate_batch(prompts, budgets, seeds), strict=True):
        assert ids_a == ids_b and fin_a == fin_b
        assert max(abs(a - b) for a, b in zip(lps_a, lps_b, strict=True)) < 1e-4


def test_the_gather_window_is_waited_only_while_another_session_is_open(agent_dir):
    from agent_gym.inference import Batcher

    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=0))
    messages = [{"role": "user", "content": "Compute 12 + 30."}]
    policy.act(messages, session_id="a")
    batcher = policy._batcher()
    assert batcher.expect_more is not None and not batcher.expect_more()  # n_parallel 1: nobody else to wait for
    policy.act(messages, session_id="b")
    assert batcher.expect_more()
    policy.close_session("a")
    assert not batcher.expect_more()
    policy.close()
    # a window of ten minutes that is not waited: the request is served at once
    lone = Batcher(policy.engine, gather_s=600.0, expect_more=lambda: False)
    row_of = lambda: [policy.make_row(policy.tokenizer.encode("Hi"), 3, 0, None)]  # noqa: E731
    future = lone.submit(row_of, lambda rows: rows[0].out)
    assert len(future.result(timeout=120)) == 3
    lone.close()
