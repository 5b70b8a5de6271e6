"""``agent-gym gateway``: the command is registered and builds a working app."""

from __future__ import annotations

from fastapi.testclient import TestClient

from agent_gym.cli import build_parser
from agent_gym.cli.gateway import build_gateway


def test_gateway_command_builds_the_app(tmp_path):
    args = build_parser().parse_args(["gateway", "--server", "127.0.0.1:9", "--tokenizer", "qwen", "--auto-sessions",
                                      "--output", str(tmp_path / "s.jsonl")])
    assert args.command == "gateway" and args.server == ["127.0.0.1:9"]
    app, writer = build_gateway(args)
    try:
        trainer = {"Authorization": f"Bearer {app.state.trainer_token}"}
        with TestClient(app) as client:
            assert client.get("/health").status_code == 200
            created = client.post("/sessions", json={"session_id": "cli"}, headers=trainer).json()
            assert created["session_id"] == "cli"
            trajectory = client.get("/sessions/cli/trajectory", headers=trainer).json()
            assert trajectory["steps"][0]["chat_completions"] == []
            assert client.post("/sessions", json={"session_id": "cli"}, headers=trainer).status_code == 409
    finally:
        writer.close()
