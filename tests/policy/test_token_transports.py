"""VLLMPolicy over the token-in APIs (vLLM's /inference/v1/generate, SGLang's /generate) on real servers."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agent_gym.errors import ConfigError
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.segments import trajectory_segments

ENV_ID = "agent_gym/ToolUse-v0"
# A third of the ids stop a turn, so the tiny random model's turns stay short and episodes run several turns.
SAMPLING = SamplingParams(temperature=1.0, top_k=-1, max_tokens=10, logprobs=0, seed=11,
                          stop_token_ids=list(range(0, 151643, 3)))
APIS = ["vllm_generate", "sglang_generate", "completions"]


def answers(server: str) -> list[dict]:
    return httpx.get(f"http://{server}/debug/token_answers", timeout=30).json()


def answer_ids_and_logprobs(entry: dict) -> tuple[list[int], list[float]]:
    answer = entry["answer"]
    if entry["path"] == "/generate":
        pairs = answer["meta_info"]["output_token_logprobs"]
        return [p[1] for p in pairs], [p[0] for p in pairs]
    choice = answer["choices"][0]
    return choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]


class Recorder:
    """Wraps a policy and keeps every turn it returned."""

    def __init__(self, policy):
        self.policy, self.tokenizer, self.sampling = policy, policy.tokenizer, policy.sampling
        self.turns = []

    async def aact(self, messages, *, session_id, tools=None):
        out = await self.policy.aact(messages, session_id=session_id, tools=tools)
        self.turns.append(out)
        return out

    def close_session(self, session_id):
        self.policy.close_session(session_id)


@pytest.mark.parametrize("api", APIS[:2])
def test_episode_is_token_exact_and_equal_to_the_server_answers(reference_server, qwen_tokenizer, api):
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING, api=api)
    recorder = Recorder(policy)
    before = len(answers(reference_server))
    (traj,) = collect(ENV_ID, recorder, num_episodes=1, max_steps=4, seed=5, progress=False)
    sent = answers(reference_server)[before:]
    assert sent and {e["path"] for e in sent} == {policy.api.path}
    turns = recorder.turns
    assert len(turns) == len(sent)
    for turn, entry in zip(turns, sent, strict=True):
        ids, lps = answer_ids_and_logprobs(entry)
        assert turn.token_ids == ids
        assert turn.logprobs == pytest.approx(lps, abs=1e-6)
        assert turn.sampling["top_k"] == -1
    # the trajectory's sampled ids are exactly the server's, in order, and the prompt of every
    # later turn extends the previous one (no re-tokenization)
    (segment,) = trajectory_segments(traj)
    sampled = [t for t, m in zip(segment.response_tokens.tolist(), segment.response_masks.tolist(), strict=True) if m]
    assert sampled == [i for e in sent for i in answer_ids_and_logprobs(e)[0]]
    full = segment.prompt_tokens.tolist() + segment.response_tokens.tolist()
    for turn in turns:
        assert full[: len(turn.prompt_token_ids) + len(turn.token_ids)] == turn.prompt_token_ids + turn.token_ids


def test_the_three_apis_draw_the_same_turn(reference_server, qwen_tokenizer):
    messages = [{"role": "user", "content": "Say hello."}]
    outs = []
    for api in APIS:
        policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING, api=api)
        outs.append(policy.act(messages, session_id="same-session"))
    assert outs[0].token_ids and all(o.token_ids == outs[0].token_ids for o in outs)
    assert all(o.logprobs == pytest.approx(outs[0].logprobs, abs=1e-5) for o in outs)
    assert {o.finish_reason for o in outs} == {outs[0].finish_reason}
    assert all(o.prompt_token_ids == outs[0].prompt_token_ids for o in outs)


def test_stream_of_a_generate_api_is_the_whole_turn(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SAMPLING, api="sglang_generate")

    async def main():
        try:
            return [e async for e in policy.astream([{"role": "user", "content": "hi"}], session_id="s")]
        finally:
            await policy.aclose()

    events = asyncio.run(main())
    assert events[-1].output is not None and events[0].token_ids == events[-1].output.token_ids


@pytest.mark.parametrize("api", APIS)
def test_an_over_long_prompt_ends_the_turn_as_prompt_truncation(reference_server, qwen_tokenizer, api):
    # The policy believes the context is larger than the server's 4096 ids, so the server rejects the request
    # (vLLM's and SGLang's wording, HTTP 400) and the turn ends as PROMPT_TRUNCATION, not as a policy error.
    policy = VLLMPolicy([reference_server], qwen_tokenizer, SAMPLING, api=api, max_model_len=100_000)
    out = policy.act([{"role": "user", "content": "word " * 5000}], session_id=f"long-{api}")
    assert out.finish_reason == "prompt_truncation" and out.token_ids == []
    assert "context length" in out.error


class _Canned(BaseHTTPRequestHandler):
    """Answers every POST with the class's canned body and keeps the requests' headers and bodies."""

    seen: list[tuple[str, dict, dict]] = []
    body: dict = {}
    status: int = 200

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, dict(self.headers), data))
        payload = json.dumps(type(self).body).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def canned_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Canned.seen, _Canned.status = [], 200
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_routing_headers_request_bodies_and_abort(canned_server, qwen_tokenizer):
    sampling = SamplingParams(temperature=0.5, top_k=0, max_tokens=7, logprobs=0, seed=1, stop=["END"])
    _Canned.body = {"text": "x", "output_ids": [1, 2],
                    "meta_info": {"finish_reason": {"type": "abort", "message": "weights updating"},
                                  "output_token_logprobs": [[-0.5, 1, None], [-0.25, 2, None]]}}
    sg = VLLMPolicy([canned_server], qwen_tokenizer, sampling, api="sglang_generate", model="m", max_model_len=4096)
    first = len(_Canned.seen)
    out = sg.act([{"role": "user", "content": "hi"}], session_id="sess-1")
    # an aborted answer (a pause for a weight update) keeps its ids: the turn is sent again with prompt + kept ids
    # and the budget reduced, until it ends (this server aborts every time: 4 answers of 2 ids exceed the 7)
    assert out.finish_reason == "length" and out.token_ids == [1, 2] * 4 and out.logprobs == [-0.5, -0.25] * 4
    sent = _Canned.seen[first:]
    assert len(sent) == 4
    for k, (_, _, continued) in enumerate(sent):
        assert continued["input_ids"] == out.prompt_token_ids + [1, 2] * k
        assert continued["sampling_params"]["max_new_tokens"] == 7 - 2 * k
    path, headers, body = sent[0]
    assert path == "/generate"
    assert headers["x-session-id"] == headers["X-SMG-Routing-Key"] == "sess-1"
    params = body["sampling_params"]
    assert body["return_logprob"] is True and body["input_ids"] == out.prompt_token_ids
    assert params["max_new_tokens"] == 7 and params["top_k"] == -1 and params["no_stop_trim"] is True
    assert params["stop"] == ["END"] and "sampling_seed" in params and "max_tokens" not in params

    _Canned.body = {"choices": [{"index": 0, "token_ids": [5, 6], "finish_reason": "length",
                                 "logprobs": {"content": [{"token": "token_id:5", "logprob": -1.0},
                                                          {"token": "token_id:6", "logprob": -2.0}]}}]}
    vl = VLLMPolicy([canned_server], qwen_tokenizer, sampling, api="vllm_generate", model="m", max_model_len=4096)
    out = vl.act([{"role": "user", "content": "hi"}], session_id="sess-2")
    assert out.token_ids == [5, 6] and out.logprobs == [-1.0, -2.0] and out.finish_reason == "length"
    path, headers, body = _Canned.seen[-1]
    assert path == "/inference/v1/generate" and headers["x-session-id"] == "sess-2"
    assert body["model"] == "m" and body["token_ids"] == out.prompt_token_ids
    assert body["sampling_params"]["max_tokens"] == 7 and body["sampling_params"]["logprobs"] == 0
    assert body["sampling_params"]["include_stop_str_in_output"] is True

    # SGLang's scheduler aborts an input longer than it allows: the turn is a prompt truncation.
    _Canned.body = {"text": "", "output_ids": [], "meta_info": {"finish_reason": {
        "type": "abort", "message": "Input length (5000 tokens) exceeds the maximum allowed length (4096 tokens).",
        "status_code": 400}, "output_token_logprobs": []}}
    out = sg.act([{"role": "user", "content": "hi"}], session_id="sess-4")
    assert out.finish_reason == "prompt_truncation" and "maximum allowed length" in out.error
    # SGLang's 400 for an input longer than the context, in its own body shape.
    _Canned.status = 400
    _Canned.body = {"error": {"message": "The input (5000 tokens) is longer than the model's context length "
                                         "(4096 tokens)."}}
    out = sg.act([{"role": "user", "content": "hi"}], session_id="sess-5")
    assert out.finish_reason == "prompt_truncation" and "context length" in out.error
    _Canned.status = 200

    _Canned.body = {"choices": []}  # malformed: a clear ServerError, ending the turn
    with pytest.raises(Exception, match="unexpected"):
        vl.act([{"role": "user", "content": "hi"}], session_id="sess-3")


def test_unknown_api_and_pickling(qwen_tokenizer):
    import pickle

    with pytest.raises(ConfigError, match="sglang_generate"):
        VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer, api="grpc")
    copy = pickle.loads(pickle.dumps(VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer, api="vllm_generate")))
    assert copy.api.name == "vllm_generate"
