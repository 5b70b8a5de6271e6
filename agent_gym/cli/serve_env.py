"""``agent-gym serve-env``: serve a registered agent_gym env as an OpenEnv environment server."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve-env`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "serve-env",
        help="serve an agent_gym env over OpenEnv's HTTP/WebSocket API (needs agent-gym[openenv])",
        description="Serve gym.make(ID) as an OpenEnv server: POST /reset, POST /step, GET /state, GET /schema, "
        "GET /health and the /ws session protocol of OpenEnv's EnvClient, one env instance per session. The "
        "action is {\"message\": str} (the assistant message); the observation holds the conversation "
        "(messages), terminated, truncated, info, reward and done. Step it from OpenEnv's clients, or as an "
        "agent_gym env with agent_gym.envs.openenv.OpenEnvEnv(url).",
    )
    parser.add_argument("env_id", metavar="ID", help="a registered env id, e.g. agent_gym/ToolUse-v0")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8200, help="port to bind (default 8200)")
    parser.add_argument("--max-sessions", type=int, default=64, help="most concurrent sessions (default 64)")
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="gym.make keyword arguments as JSON")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns the exit code (2 for a bad argument or a missing extra)."""
    from agent_gym.errors import ConfigError, MissingExtraError
    from agent_gym.integrations.openenv import create_openenv_app

    try:
        env_kwargs = json.loads(args.env_kwargs)
        if not isinstance(env_kwargs, dict):
            raise ConfigError(f"--env-kwargs: expected a JSON object, got {args.env_kwargs!r}")
        app = create_openenv_app(args.env_id, max_sessions=args.max_sessions, env_kwargs=env_kwargs)
    except (ConfigError, MissingExtraError, ValueError, TypeError) as exc:
        print(f"agent-gym serve-env: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    print(f"serving {args.env_id} (OpenEnv API) at http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
