"""Policy lifecycle: quiet exit without close(), pickling as configuration, tools kept per session."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
from policy_helpers import TOOLS, run_episode

from agent_gym.policy import (
    AsyncPolicyBase,
    ClientOptions,
    SamplingParams,
    TransformersPolicy,
    VLLMChatPolicy,
    VLLMPolicy,
)
from agent_gym.policy.http_transport import HttpTransport
from agent_gym.types import PolicyOutput

SEEDED = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, max_tokens=6, seed=77)
OTHER_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
}

EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys
    from agent_gym.models import load_qwen_tokenizer
    from agent_gym.policy import SamplingParams, VLLMPolicy

    server = sys.argv[1]
    tokenizer = load_qwen_tokenizer()
    messages = [{"role": "user", "content": "hi"}]
    # 1. act() by hand, never closed: the pool lives on the policy's private loop until exit.
    kept = VLLMPolicy([server], tokenizer, SamplingParams(max_tokens=3))
    print(len(kept.act(messages, session_id="a").token_ids))
    # 2. aact() in the caller's own loop, which asyncio.run closes, without aclose().
    print(len(asyncio.run(kept.aact(messages, session_id="b")).token_ids))
    # 3. A policy dropped mid-program without close().
    dropped = VLLMPolicy([server], tokenizer, SamplingParams(max_tokens=3))
    print(len(dropped.act(messages, session_id="c").token_ids))
    del dropped
    gc.collect()
    print("done")
    """
)


def test_unclosed_policy_exits_without_warnings(reference_server, tmp_path):
    script = tmp_path / "unclosed.py"
    script.write_text(EXIT_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), reference_server],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "3", "3", "done"]
    assert result.stderr == ""


class _Echo(AsyncPolicyBase):
    def __init__(self) -> None:
        super().__init__()
        self.prefix = "echo: "

    async def aact(self, messages, *, session_id, tools=None):
        return PolicyOutput(text=self.prefix + messages[-1]["content"])

    def close_session(self, session_id):
        pass


def test_dropped_policy_stops_its_loop_thread():
    policy = _Echo()
    assert policy.act([{"role": "user", "content": "x"}], session_id="s").text == "echo: x"
    thread = policy._thread
    assert thread is not None and thread.is_alive()
    del policy
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_plain_async_policy_pickles_after_use():
    policy = _Echo()
    policy.act([{"role": "user", "content": "x"}], session_id="s")
    copy = pickle.loads(pickle.dumps(policy))
    assert copy.prefix == "echo: " and copy._loop is None
    assert copy.act([{"role": "user", "content": "y"}], session_id="s").text == "echo: y"
    copy.close()
    policy.close()


def _tokens(policy, session: str) -> list[list[int]]:
    return [out.token_ids for _, out in run_episode(policy, session, 3, tools=TOOLS)]


def test_vllm_policy_pickles_as_configuration(reference_server, qwen_tokenizer):
    options = ClientOptions(max_retries=1, timeout=60.0)
    policy = VLLMPolicy([f"http://{reference_server}/v1"], qwen_tokenizer, SEEDED, client_options=options)
    before = pickle.loads(pickle.dumps(policy))  # before any use
    try:
        expected = _tokens(policy, "pickled")
        after = pickle.loads(pickle.dumps(policy))  # after use: open pools and sessions are not carried
    finally:
        policy.close()
    assert after.client.server_addresses == [reference_server] and after.sampling == SEEDED
    assert after.client.options == options and not after.client._resources
    assert after.builder.num_sessions == 0 and after.client.router.assigned("pickled") is None
    for copy in (before, after):
        with copy:
            assert _tokens(copy, "pickled") == expected  # same seed, same session id: same tokens


def test_vllm_policy_rebuilt_in_another_process(reference_server, qwen_tokenizer, tmp_path):
    policy = VLLMPolicy([reference_server], qwen_tokenizer, SEEDED)
    with policy:
        expected = policy.act([{"role": "user", "content": "hi"}], session_id="p").token_ids
    blob = tmp_path / "policy.pkl"
    blob.write_bytes(pickle.dumps(policy))
    code = (
        "import json, pickle, sys\n"
        "policy = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "out = policy.act([{'role': 'user', 'content': 'hi'}], session_id='p')\n"
        "print(json.dumps(out.token_ids))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected
    assert result.stderr == ""


@pytest.mark.parametrize("given", ["path", "object"])
def test_transformers_policy_pickles(tiny_model_dir, qwen_tokenizer, given):
    if given == "path":
        policy = TransformersPolicy(str(tiny_model_dir), sampling=SEEDED)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
        policy = TransformersPolicy(model, qwen_tokenizer, sampling=SEEDED)
    before = pickle.loads(pickle.dumps(policy))
    expected = _tokens(policy, "tp")
    after = pickle.loads(pickle.dumps(policy))
    assert after.builder.num_sessions == 0
    for copy in (before, after):
        assert copy.model is not policy.model
        assert _tokens(copy, "tp") == expected
        copy.close()
    policy.close()


def _spy_bodies(monkeypatch) -> list[dict]:
    bodies: list[dict] = []
    post = HttpTransport.post_json

    async def spy(self, url, body, **kwargs):
        bodies.append(body)
        return await post(self, url, body, **kwargs)

    monkeypatch.setattr(HttpTransport, "post_json", spy)
    return bodies


def _tools_turns(policy, session: str) -> list[PolicyOutput]:
    """Turn 1 with tools, turn 2 without (unchanged), turn 3 with [] (removed), turn 4 with other tools."""
    messages = [{"role": "user", "content": "What is 17*3?"}]
    outs = []
    for k, tools in enumerate([TOOLS, None, [], [OTHER_TOOL], None]):
        out = policy.act(list(messages), session_id=session, tools=tools)
        outs.append(out)
        messages += [{"role": "assistant", "content": out.text}, {"role": "tool", "content": f"r{k}"}]
    return outs


def _check_tools_turns(policy, outs, tokenizer) -> None:
    first, kept, removed, other, other_kept = outs
    text = [tokenizer.decode(out.prompt_token_ids) for out in outs]
    assert "calculator" in text[0] and "calculator" in text[1]
    # Turn 2 continues turn 1 exactly: same tools, one segment.
    n = len(first.prompt_token_ids) + len(first.token_ids)
    assert kept.prompt_token_ids[:n] == first.prompt_token_ids + first.token_ids
    assert not kept.new_segment
    # Removing the tools is explicit and re-renders the conversation without them.
    assert "calculator" not in text[2] and removed.new_segment
    assert "lookup" in text[3] and "calculator" not in text[3] and other.new_segment
    assert "lookup" in text[4] and not other_kept.new_segment


def test_vllm_tools_stay_with_the_session(reference_server, qwen_tokenizer):
    with VLLMPolicy([reference_server], qwen_tokenizer, SEEDED) as policy:
        outs = _tools_turns(policy, "tools")
        _check_tools_turns(policy, outs, qwen_tokenizer)
        policy.close_session("tools")
        # A closed session forgets its tools: a new episode with the same id starts without them.
        fresh = policy.act([{"role": "user", "content": "again"}], session_id="tools")
        assert "calculator" not in qwen_tokenizer.decode(fresh.prompt_token_ids)


def test_transformers_tools_stay_with_the_session(tiny_model_dir, qwen_tokenizer):
    policy = TransformersPolicy(str(tiny_model_dir), sampling=SEEDED)
    _check_tools_turns(policy, _tools_turns(policy, "tools"), qwen_tokenizer)
    policy.close()


def test_chat_mode_tools_stay_with_the_session(reference_server, qwen_tokenizer, monkeypatch):
    bodies = _spy_bodies(monkeypatch)
    with VLLMChatPolicy([reference_server], qwen_tokenizer, SEEDED) as policy:
        _tools_turns(policy, "chat-tools")
    names = [[t["function"]["name"] for t in body.get("tools", [])] for body in bodies]
    assert names == [["calculator"], ["calculator"], [], ["lookup"], ["lookup"]]


def test_tools_argument_is_checked(reference_server, qwen_tokenizer):
    with VLLMPolicy([reference_server], qwen_tokenizer, SEEDED) as policy:
        with pytest.raises(TypeError, match="tools: expected a list"):
            asyncio.run(policy.aact([{"role": "user", "content": "x"}], session_id="s", tools="calculator"))


def test_client_argument_checks():
    from agent_gym.errors import ConfigError
    from agent_gym.policy import VLLMClient

    client = VLLMClient(["127.0.0.1:1", "http://127.0.0.1:1/v1", "https://10.0.0.2/prefix"],
                        {"timeout": 5, "connect_timeout": 30, "api_key": "secret"})
    assert client.server_addresses == ["127.0.0.1:1", "10.0.0.2"] and client.options.connect_timeout == 5.0
    assert client.url("10.0.0.2", "/v1/models") == "https://10.0.0.2/prefix/v1/models"
    assert "secret" not in repr(client.options)
    copy = pickle.loads(pickle.dumps(client))  # as its addresses (scheme and path kept) and options
    assert copy.options == client.options and copy.url("10.0.0.2", "/x") == "https://10.0.0.2/prefix/x"
    with pytest.raises(ConfigError, match="timeout: expected"):
        VLLMClient(["127.0.0.1:1"], {"timeout": 0})
    with pytest.raises(TypeError, match="concurrency: expected int"):
        VLLMClient(["127.0.0.1:1"], ClientOptions(concurrency="8"))
    with pytest.raises(ConfigError, match="max_retries"):
        VLLMClient(["127.0.0.1:1"], ClientOptions(max_retries=-1))
    with pytest.raises(TypeError, match="client_options: expected ClientOptions"):
        VLLMClient(["127.0.0.1:1"], 3)
    with pytest.raises(ValueError, match="at least one"):
        VLLMClient([])
