"""``agent-gym serve-reward``: serve a rubric (an env's rule grader, an LLM judge, or both) as a reward service."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["TOKEN_ENV", "add_judge_arguments", "add_parser", "build_app", "build_rubric", "run"]

TOKEN_ENV = "AGENT_GYM_REWARD_TOKEN"
"""Environment variable read for the server's token when ``--token`` is not given."""


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options naming a judge model's server (shared with ``judge-check``)."""
    parser.add_argument("--judge-tokenizer", default=None, metavar="PATH",
                        help="the judge model's tokenizer (a model directory): token-exact calls through "
                             "/v1/completions; without it the server's chat route is asked")
    parser.add_argument("--judge-model", default=None, metavar="NAME", help="model name to send (default: the "
                                                                            "server's first)")
    parser.add_argument("--judge-max-tokens", type=int, default=256, metavar="N", help="longest verdict (256)")
    parser.add_argument("--judge-timeout", type=float, default=60.0, metavar="S", help="seconds per request (60)")
    parser.add_argument("--judge-retries", type=int, default=2, metavar="N",
                        help="retries of a request after a connection error, a timeout or an HTTP 5xx (2)")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve-reward`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "serve-reward",
        help="serve an env's grader, an LLM judge or a rubric as a reward service (slime's remote RM shape)",
        description="Serve a rubric over HTTP: POST / and POST /reward take slime's remote reward model body "
        "{prompt, response, label} (use slime's --rm-url, with --reward-key reward, or agent_gym's reward_func "
        "with --custom-rm-path agent_gym.integrations.slime_reward.reward_func); POST /v1/rewards scores a batch "
        "of {question, reference, response, group}. A judge that fails answers 503 / status JUDGE_ERROR, never "
        "a zero reward.",
    )
    parser.add_argument("--env", default=None, metavar="ID", help="score with this env's rule grader "
                                                                  "(score_answer), e.g. agent_gym/ToolUse-v0")
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="gym.make keyword arguments as JSON")
    parser.add_argument("--judge", action="append", default=[], metavar="HOST:PORT",
                        help="score with an LLM judge at this OpenAI-compatible server (repeat for several)")
    add_judge_arguments(parser)
    parser.add_argument("--rubric", default=None, metavar="MODULE:FACTORY",
                        help="serve the Rubric this callable returns (instead of --env / --judge)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8300, help="port to bind (default 8300)")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help=f"every route but /health needs 'Authorization: Bearer TOKEN' (default ${TOKEN_ENV}; "
                             "none: no token)")
    parser.add_argument("--max-body-mb", type=float, default=8.0, metavar="MB", help="largest request body (8)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.set_defaults(func=run)
    return parser


def build_rubric(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """``(rubric, closers)``: the rubric ``args`` name and what to close when the server stops.

    Raises:
        ConfigError: No or conflicting rubric options, or a bad env id.
    """
    from agent_gym.errors import ConfigError
    from agent_gym.judges import JudgeCriterion, Rubric
    from agent_gym.judges.specs import default_judge, env_rule, import_rubric

    if args.rubric:
        if args.env or args.judge:
            raise ConfigError("--rubric: expected alone (the factory's rubric is served as it is)")
        return import_rubric(args.rubric), []
    if not args.env and not args.judge:
        raise ConfigError("expected --env, --judge or --rubric")
    criteria: list[Any] = []
    closers: list[Any] = []
    if args.env:
        env_kwargs = json.loads(args.env_kwargs)
        if not isinstance(env_kwargs, dict):
            raise ConfigError(f"--env-kwargs: expected a JSON object, got {args.env_kwargs!r}")
        env, criterion = env_rule(args.env, env_kwargs)
        criteria.append(criterion)
        closers.append(env.close)
    if args.judge:
        judge = default_judge(args.judge, tokenizer=args.judge_tokenizer, model=args.judge_model,
                              max_tokens=args.judge_max_tokens, timeout=args.judge_timeout,
                              max_retries=args.judge_retries)
        criteria.append(JudgeCriterion("judge", judge))
        closers.append(judge.close)
    return Rubric(criteria), closers


def build_app(args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """``(app, token, closers)``: the guarded reward service described by ``args``."""
    from agent_gym.serving.auth import TokenGuard, resolve_token
    from agent_gym.serving.limits import BodyLimit
    from agent_gym.serving.reward_server import create_reward_server

    token = resolve_token(args.token, TOKEN_ENV)
    rubric, closers = build_rubric(args)
    app = create_reward_server(rubric)
    app.add_middleware(BodyLimit, max_bytes=int(args.max_body_mb * 2**20))
    if token.token is not None:
        app.add_middleware(TokenGuard, token=token.token, open_paths=("/health",))
    return app, token, closers


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (2 for a bad argument)."""
    from agent_gym.errors import ConfigError, MissingExtraError
    from agent_gym.serving.runner import run_server

    try:
        app, token, closers = build_app(args)
    except (ConfigError, MissingExtraError, ValueError, TypeError) as exc:
        print(f"agent-gym serve-reward: {exc}", file=sys.stderr)
        return 2
    return run_server(app, host=args.host, port=args.port, name="agent-gym serve-reward", auth=token.describe(),
                      authenticated=token.token is not None, log_level=args.log_level, on_stop=closers)
