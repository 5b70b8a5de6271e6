"""Tests of ``agent-gym serve`` argument handling (agent_gym/cli/serve.py)."""

from __future__ import annotations

import argparse

from agent_gym.cli import serve


def test_serve_parser_options():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    serve.add_parser(sub)
    args = parser.parse_args(
        [
            "serve",
            "--model",
            "m",
            "--port",
            "9001",
            "--max-model-len",
            "512",
            "--fake-tokens",
            "3",
            "--fail-first",
            "2",
            "--fail-status",
            "429",
        ]
    )
    assert (args.model, args.host, args.port, args.max_model_len) == ("m", "127.0.0.1", 9001, 512)
    assert (args.fake_tokens, args.fail_first, args.fail_status, args.hang) == (3, 2, 429, False)
    assert args.func is serve.run
