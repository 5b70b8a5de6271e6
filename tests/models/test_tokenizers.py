"""Tests of agent_gym.models.tokenizers: real vocabularies, specials at real ids, safe caching."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agent_gym.models.tokenizers import QWEN_SPECIAL_TOKENS, cached_build


def test_qwen_specials_at_real_ids(qwen_tokenizer):
    assert len(qwen_tokenizer) == 151669
    for token_id, content, _special in QWEN_SPECIAL_TOKENS:
        assert qwen_tokenizer.convert_tokens_to_ids(content) == token_id
        assert qwen_tokenizer.encode(content, add_special_tokens=False) == [token_id]
    assert qwen_tokenizer.eos_token_id == 151645
    assert qwen_tokenizer.pad_token_id == 151643
    assert qwen_tokenizer.bos_token_id is None


def test_qwen_known_ids_and_round_trip(qwen_tokenizer):
    # ids of the public Qwen2 vocabulary
    assert qwen_tokenizer.encode("Hello world!", add_special_tokens=False) == [9707, 1879, 0]
    assert qwen_tokenizer.encode("\n\n", add_special_tokens=False) == [271]
    assert qwen_tokenizer.encode("12", add_special_tokens=False) == [16, 17]  # digits split one by one
    text = "café 中文 ünïcode\r\n\t  x <|im_start|>user\nhi<|im_end|>\n"
    assert qwen_tokenizer.decode(qwen_tokenizer.encode(text)) == text


def test_qwen_skip_special_tokens_keeps_markup(qwen_tokenizer):
    ids = qwen_tokenizer.encode("<think>a</think><tool_call>\n{}\n</tool_call><|im_end|>")
    assert qwen_tokenizer.decode(ids, skip_special_tokens=True) == "<think>a</think><tool_call>\n{}\n</tool_call>"


def test_deepseek_tokenizer_loads(deepseek_tokenizer):
    tok = deepseek_tokenizer
    assert len(tok) > 128000
    assert tok.eos_token_id == 1 and tok.bos_token_id == 0
    text = "Hello world! 中文 12345"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        tokenize=False,
    )
    assert rendered == "<｜begin▁of▁sentence｜>S<｜User｜>hi<｜Assistant｜>yo<｜end▁of▁sentence｜>"


def test_cached_build_runs_once_across_processes(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from agent_gym.models.tokenizers import cached_build

        def build(p):
            with open({str(tmp_path / "count")!r}, "a") as f:
                f.write("x")
            time.sleep(0.5)
            (p / "data").write_text("ok")

        out = cached_build("thing-v1", build, cache_dir={str(tmp_path / "cache")!r})
        assert (out / "data").read_text() == "ok"
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert (tmp_path / "count").read_text() == "x"
    # already complete: no rebuild in this process either
    assert cached_build("thing-v1", lambda p: 1 / 0, cache_dir=tmp_path / "cache") == tmp_path / "cache" / "thing-v1"
