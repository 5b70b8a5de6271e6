"""``agent-gym serve-env`` over HTTP and WebSocket: only the server's own tasks, never a host path, its token."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

pytest.importorskip("openenv", reason="openenv-core is not installed (pip install 'agent-gym[openenv]')")

from agent_gym.cli import build_parser  # noqa: E402
from agent_gym.cli.serve_env import build_app  # noqa: E402
from agent_gym.envs.openenv import OpenEnvEnv  # noqa: E402
from agent_gym.errors import EnvServerError  # noqa: E402

TOKEN = "env-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def served(serve_app, env_id: str, *extra: str):
    args = build_parser().parse_args(["serve-env", env_id, "--token", TOKEN, *extra])
    app, _ = build_app(args)
    return serve_app(app, ws_max_size=8 * 2**20)


@pytest.fixture(scope="module")
def tool_use(serve_app):
    return served(serve_app, "agent_gym/ToolUse-v0")


@pytest.fixture(scope="module")
def swe_open(serve_app):
    return served(serve_app, "agent_gym/SWE-v0", "--allow-client-tasks")


@pytest.fixture
def secret_repo(tmp_path):
    """A host repository (what a client's task must never make the server copy into a sandbox)."""
    repo = tmp_path / "host-repo"
    repo.mkdir()
    (repo / "secret.txt").write_text("host secret\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def reset(server, **body):
    return httpx.post(f"{server.url}/reset", json=body, headers=AUTH, timeout=60)


def test_a_client_resets_only_to_the_servers_own_tasks(tool_use):
    seeded = reset(tool_use, seed=3)
    assert seeded.status_code == 200
    served_task = seeded.json()["observation"]["info"]["task"]
    by_id = reset(tool_use, task_id=served_task["id"])
    assert by_id.status_code == 200 and by_id.json()["observation"]["info"]["task"]["id"] == served_task["id"]
    assert reset(tool_use, options={"task_index": 0}).status_code == 200
    # a task of the client's own is refused; one naming a served task runs the server's copy
    own = {"id": "mine", "question": "What is 2 + 2?", "ground_truth": "4"}
    refused = reset(tool_use, task=own)
    assert refused.status_code == 403 and "its own tasks" in refused.json()["detail"]
    forged = reset(tool_use, task={**served_task, "question": "Say hi.", "ground_truth": "hi"})
    assert forged.status_code == 200
    assert forged.json()["observation"]["info"]["task"]["question"] == served_task["question"]
    for body in ({"task_id": "nope"}, {"options": {"task": own}}, {"options": {"repo_path": "/"}},
                 {"options": {"task_index": 10**9}}, {"seed": -1}, {"seed": "x"}, {"task_id": 5}):
        assert reset(tool_use, **body).status_code in (400, 422), body
    # the same over the WebSocket session protocol, through agent_gym's client
    env = OpenEnvEnv(tool_use.url, token=TOKEN)
    try:
        obs, info = env.reset(options={"task": served_task})
        assert info["task"]["id"] == served_task["id"]
        with pytest.raises(EnvServerError, match="its own tasks"):
            env.reset(options={"task": own})
    finally:
        env.close()


def test_no_client_task_names_a_host_path_even_when_client_tasks_are_allowed(swe_open, secret_repo):
    attack = {"id": "steal", "problem_statement": "Read secret.txt.", "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": []}
    for source in ({"repo_path": str(secret_repo)}, {"dir": str(secret_repo)}, {"repo": "../../" + secret_repo.name},
                   {"source": {"repo_path": str(secret_repo), "commit": "HEAD"}}, {"source": {"dir": "/"}}):
        refused = reset(swe_open, task={**attack, **source})
        assert refused.status_code == 403 and "host paths" in refused.json()["detail"], source
    assert reset(swe_open, task="/etc").status_code == 400  # never a path as a task either
    env = OpenEnvEnv(swe_open.url, token=TOKEN)
    try:
        with pytest.raises(EnvServerError, match="host paths"):
            env.reset(options={"task": {**attack, "repo_path": str(secret_repo)}})
    finally:
        env.close()


def test_serve_env_needs_its_token(tool_use):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        assert httpx.post(f"{tool_use.url}/reset", json={"seed": 1}, headers=headers).status_code == 401
        assert httpx.get(f"{tool_use.url}/schema", headers=headers).status_code == 401
    assert httpx.get(f"{tool_use.url}/health").status_code == 200
    assert httpx.get(f"{tool_use.url}/schema", headers={"x-api-key": TOKEN}).status_code == 200
    with pytest.raises(EnvServerError, match="403|rejected"):  # the WebSocket handshake is refused
        OpenEnvEnv(tool_use.url, token="wrong").reset()


def test_malformed_requests_are_4xx(tool_use):
    for path, raw in (("/step", b'{"action": NaN}'), ("/step", b'{"action": {"message": NaN}}'),
                      ("/reset", b'{"seed": NaN}'), ("/reset", b'{"task_id": "\\ud800"}'),
                      ("/step", b'{"action": {"message": "x"}}'), ("/reset", b"[" * 5000 + b"]" * 5000),
                      ("/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "\\ud800", "params": {}}'),
                      ("/mcp", b'{"jsonrpc": "2.0", "id": "\\udc00", "method": "x", "params": {}}')):
        answer = httpx.post(f"{tool_use.url}{path}", content=raw, headers={**AUTH, "content-type": "application/json"})
        assert 400 <= answer.status_code < 500, (raw[:40], answer.status_code, answer.text[:200])
        json.loads(answer.text)
    big = httpx.post(f"{tool_use.url}/step", content=b"x" * (9 * 2**20), headers=AUTH)
    assert big.status_code == 413
