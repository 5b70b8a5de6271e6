"""``agent-gym serve-env``: serve a registered agent_gym env as an OpenEnv environment server, or its tools over MCP."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["GATEWAY_TOKEN_ENV", "TOKEN_ENV", "add_parser", "build_app", "run"]

TOKEN_ENV = "AGENT_GYM_ENV_TOKEN"
"""Environment variable read for the server's token when ``--token`` is not given."""

GATEWAY_TOKEN_ENV = "AGENT_GYM_TRAINER_TOKEN"
"""Environment variable read for the gateway's trainer token when ``--gateway-token`` is not given."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve-env`` subcommand on an ``argparse`` subparsers object."""
    from agent_gym.serving.limits import RequestLimits

    parser = subparsers.add_parser(
        "serve-env",
        help="serve an agent_gym env over OpenEnv's HTTP/WebSocket API (needs agent-gym[openenv])",
        description="Serve gym.make(ID) as an OpenEnv server: POST /reset, POST /step, GET /state, GET /schema, "
        "GET /health and the /ws session protocol of OpenEnv's EnvClient, one env instance per session. The "
        "action is {\"message\": str} (the assistant message); the observation holds the conversation "
        "(messages), terminated, truncated, info, reward and done. Step it from OpenEnv's clients, or as an "
        "agent_gym env with agent_gym.envs.openenv.OpenEnvEnv(url). A client resets to one of the env's own "
        "tasks (seed, task_id, or a task whose id is one of them); other tasks are refused unless "
        "--allow-client-tasks. With --mcp: serve the env's tools over MCP (streamable HTTP at /mcp) instead, one "
        "MCP session per episode (reset on the session's first request; episode_task gives the task, "
        "episode_submit the final answer and the reward).",
    )
    parser.add_argument("env_id", metavar="ID", help="a registered env id, e.g. agent_gym/ToolUse-v0")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8200, help="port to bind (default 8200)")
    parser.add_argument("--max-sessions", type=int, default=64, help="most concurrent sessions (default 64)")
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="gym.make keyword arguments as JSON")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help=f"every route but /health needs 'Authorization: Bearer TOKEN' (default ${TOKEN_ENV}; "
                             "none: no token)")
    parser.add_argument("--allow-client-tasks", action="store_true",
                        help="take tasks sent by clients (never their host-path keys, e.g. SWE-v0's repo_path); by "
                             "default a client resets only to the env's own tasks")
    parser.add_argument("--max-body-mb", type=float, default=RequestLimits().max_body_bytes / 2**20, metavar="MB",
                        help="largest request body or WebSocket message in MiB (default 8)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.add_argument("--mcp", action="store_true",
                        help="serve the env's tools over MCP (streamable HTTP at /mcp; needs agent-gym[mcp])")
    parser.add_argument("--session-idle-timeout", type=float, default=1800.0, metavar="S",
                        help="with --mcp: seconds after which an idle MCP session's episode is closed (default 1800)")
    parser.add_argument("--gateway", default=None, metavar="URL",
                        help="with --mcp: the agent-gym gateway (http://HOST:PORT) whose sessions MCP sessions name "
                             "(header x-agent-gym-session): each is ended with its episode's reward and status")
    parser.add_argument("--gateway-token", default=None, metavar="TOKEN",
                        help=f"with --gateway: the gateway's trainer token (default ${GATEWAY_TOKEN_ENV})")
    parser.set_defaults(func=run)
    return parser


def build_app(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(app, token)``: the guarded OpenEnv app described by ``args`` and its resolved token.

    Raises:
        ConfigError: A bad env id or argument.
        MissingExtraError: ``openenv-core`` is not installed.
        ValueError: Malformed ``--env-kwargs`` or a blank token.
    """
    from agent_gym.errors import ConfigError
    from agent_gym.serving.auth import TokenGuard, resolve_token
    from agent_gym.serving.env_server import create_env_server
    from agent_gym.serving.limits import BodyLimit

    token = resolve_token(args.token, TOKEN_ENV)
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict):
        raise ConfigError(f"--env-kwargs: expected a JSON object, got {args.env_kwargs!r}")
    gateway_url = getattr(args, "gateway", None)
    if gateway_url is not None and not getattr(args, "mcp", False):
        raise ConfigError("--gateway: only with --mcp")
    if getattr(args, "mcp", False):
        from agent_gym.serving.gateway_rewards import GatewayRewards
        from agent_gym.serving.mcp_env_server import create_mcp_env_app

        gateway = None
        if gateway_url is not None:
            gateway_token = getattr(args, "gateway_token", None) or os.environ.get(GATEWAY_TOKEN_ENV)
            if not gateway_token:
                raise ConfigError(f"--gateway: the gateway's trainer token is needed (--gateway-token or "
                                  f"${GATEWAY_TOKEN_ENV})")
            gateway = GatewayRewards(gateway_url, gateway_token)
        app, _ = create_mcp_env_app(args.env_id, env_kwargs=env_kwargs, max_sessions=args.max_sessions,
                                    session_idle_timeout=args.session_idle_timeout, host=args.host, gateway=gateway)
    else:
        app = create_env_server(args.env_id, max_sessions=args.max_sessions, env_kwargs=env_kwargs,
                                client_tasks=args.allow_client_tasks)
    app.add_middleware(BodyLimit, max_bytes=int(args.max_body_mb * 2**20))
    if token.token is not None:
        app.add_middleware(TokenGuard, token=token.token, open_paths=("/health",))
    return app, token


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (2 for a bad argument or a missing extra)."""
    from agent_gym.errors import ConfigError, MissingExtraError
    from agent_gym.serving.runner import run_server

    try:
        app, token = build_app(args)
    except (ConfigError, MissingExtraError, ValueError, TypeError) as exc:
        print(f"agent-gym serve-env: {exc}", file=sys.stderr)
        return 2
    tasks = "client tasks allowed (host-path keys refused)" if args.allow_client_tasks else \
        "resets to the env's own tasks only"
    api = "MCP, streamable HTTP at /mcp" if getattr(args, "mcp", False) else "OpenEnv API"
    return run_server(app, host=args.host, port=args.port, name=f"agent-gym serve-env {args.env_id} ({api})",
                      auth=f"{token.describe()}; {tasks}", authenticated=token.token is not None,
                      log_level=args.log_level, ws_max_size=int(args.max_body_mb * 2**20))
