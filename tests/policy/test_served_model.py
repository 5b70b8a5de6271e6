"""served_model_dir: the tokenizer directory of what a server serves, or an error that names --model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_gym.errors import ConfigError
from agent_gym.policy.served_model import served_model_dir


def _listing_server(entries: list[dict]) -> ThreadingHTTPServer:
    """A server whose only route is GET /v1/models (what a vLLM serving a hub name or a remote disk lists)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps({"object": "list", "data": entries}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _address(server: ThreadingHTTPServer) -> str:
    return f"127.0.0.1:{server.server_address[1]}"


def test_a_local_model_directory_is_found_by_root_then_id(tiny_model_dir):
    server = _listing_server([{"id": "served-name", "root": str(tiny_model_dir), "max_model_len": 2048}])
    try:
        assert served_model_dir([_address(server)]) == str(tiny_model_dir.resolve())
    finally:
        server.shutdown()


def test_a_model_that_is_not_here_names_model(tmp_path):
    server = _listing_server([{"id": "Qwen/Qwen3-8B", "root": "Qwen/Qwen3-8B"}])
    other = _listing_server([{"id": str(tmp_path), "root": str(tmp_path)}])  # a directory without a tokenizer
    try:
        for address in (_address(server), _address(other)):
            with pytest.raises(ConfigError, match="--model PATH"):
                served_model_dir([address])
    finally:
        server.shutdown()
        other.shutdown()


def test_servers_of_different_models_and_unreachable_servers_are_errors(tiny_model_dir, tiny_deepseek_model_dir):
    a = _listing_server([{"id": str(tiny_model_dir)}])
    b = _listing_server([{"id": str(tiny_deepseek_model_dir)}])
    try:
        with pytest.raises(ConfigError, match="different models"):
            served_model_dir([_address(a), _address(b)])
        with pytest.raises(ConfigError, match="GET http://127.0.0.1:9/v1/models"):
            served_model_dir(["127.0.0.1:9"], timeout=2)
    finally:
        a.shutdown()
        b.shutdown()


def test_the_cli_fails_at_once_naming_model(capsys, tmp_path):
    from agent_gym.cli import main

    server = _listing_server([{"id": "org/not-on-this-machine", "root": "org/not-on-this-machine"}])
    try:
        code = main(["rollout", "agent_gym/ToolUse-v0", "--server", _address(server), "--episodes", "1",
                     "--out", str(tmp_path / "x.jsonl"), "--no-progress"])
    finally:
        server.shutdown()
    assert code == 2 and "--model PATH" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
