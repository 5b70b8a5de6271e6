"""``agent-gym gateway``: an OpenAI/Anthropic-compatible proxy recording token-exact sessions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["TOKEN_ENV", "add_parser", "build_gateway", "run"]

TOKEN_ENV = "AGENT_GYM_TRAINER_TOKEN"
"""Environment variable read for the trainer's token when ``--trainer-token`` is not given."""


def add_limit_arguments(parser: argparse.ArgumentParser, *, sampling: bool) -> None:
    """The request-limit options (see :func:`agent_gym.serving.limits.add_limit_arguments`)."""
    from agent_gym.serving.limits import add_limit_arguments as add

    add(parser, sampling=sampling)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``gateway`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "gateway",
        help="serve OpenAI/Anthropic chat APIs over token-in vLLM and record token-exact trajectories",
        description="Serve POST /v1/chat/completions and POST /v1/responses (OpenAI), POST /v1/messages "
        "(Anthropic) and GET /v1/models; "
        "every turn is sampled token-in from the vLLM servers and recorded per session "
        "(/sessions/{id}/v1/..., the API key, or x-session-id). GET /sessions/{id}/trajectory returns "
        "the StepTrajectory; POST /sessions/{id}/reward ends the episode. A session's API key (returned by "
        "POST /sessions) can only sample; creating, listing, reading and ending sessions need the trainer's "
        f"token (--trainer-token, ${TOKEN_ENV}, or generated and printed at start).",
    )
    parser.add_argument("--server", action="append", required=True, metavar="HOST:PORT",
                        help="a vLLM-compatible server (repeat for several)")
    parser.add_argument("--tokenizer", required=True, help="the model's tokenizer: a path or name, or 'qwen' / "
                        "'deepseek' for agent_gym's offline tokenizers")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8100, help="port to bind (default 8100)")
    parser.add_argument("--output", default=None, help="a .jsonl or .parquet file receiving finished sessions")
    parser.add_argument("--max-tokens", type=int, default=1024, help="most sampled tokens per turn (default 1024)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--auto-sessions", action="store_true",
                        help="create a session on first use of an unknown id (default: POST /sessions first)")
    parser.add_argument("--strict-tool-calls", action="store_true",
                        help="answer a turn whose tool call is malformed with a 422 error instead of its text")
    parser.add_argument("--max-retries", type=int, default=3, help="retries of a failed upstream request")
    parser.add_argument("--server-api-key", default=None, metavar="KEY",
                        help="API key of the --server(s) (their --api-key; default $VLLM_API_KEY)")
    parser.add_argument("--model", default=None, help="model name reported to clients (default: the upstream's)")
    parser.add_argument("--tool-call-parser", default=None, metavar="NAME",
                        help="how the model writes tool calls, by vLLM's names (default: from the chat template)")
    parser.add_argument("--reasoning-parser", default=None, metavar="NAME",
                        help="deepseek_r1, qwen3 or openai (default: from the chat template)")
    parser.add_argument("--trainer-token", default=None, metavar="TOKEN",
                        help=f"the token of the trainer's routes (default ${TOKEN_ENV}, else a generated one, printed)")
    parser.add_argument("--reward-range", type=float, nargs=2, default=[-10.0, 10.0], metavar=("LOW", "HIGH"),
                        help="rewards accepted by POST /sessions/{id}/reward (default -10 10)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    add_limit_arguments(parser, sampling=False)
    parser.set_defaults(func=run)
    return parser


def _tokenizer(name: str) -> Any:
    from agent_gym.models import load_deepseek_tokenizer, load_qwen_tokenizer

    if name == "qwen":
        return load_qwen_tokenizer()
    if name == "deepseek":
        return load_deepseek_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def build_gateway(args: argparse.Namespace) -> Any:
    """``(app, writer)``: the FastAPI app described by ``args`` and its trajectory writer (or None).

    The trainer's token is ``app.state.trainer_token`` (``--trainer-token``, ``$AGENT_GYM_TRAINER_TOKEN``
    or generated).
    """
    from agent_gym.gateway import SessionStore, create_gateway_app
    from agent_gym.parsers import env_parser_for
    from agent_gym.policy import ClientOptions, SamplingParams, VLLMPolicy
    from agent_gym.serving.auth import resolve_token
    from agent_gym.serving.limits import limits_from_args

    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    tool_parser: str | None = getattr(args, "tool_call_parser", None)
    reasoning_parser: str | None = getattr(args, "reasoning_parser", None)
    upstream_key = resolve_token(getattr(args, "server_api_key", None), "VLLM_API_KEY").token
    policy = VLLMPolicy(args.server, _tokenizer(args.tokenizer), sampling,
                        client_options=ClientOptions(max_retries=args.max_retries, api_key=upstream_key),
                        tool_parser=tool_parser, reasoning_parser=reasoning_parser)
    writer = None
    if args.output:
        from agent_gym.export import TrajectoryWriter

        writer = TrajectoryWriter(args.output)
    reward_range = getattr(args, "reward_range", None)
    store = SessionStore(writer=writer, auto_create=args.auto_sessions,
                         parser=env_parser_for(policy, None, tool_parser, reasoning_parser),
                         strict_tool_calls=getattr(args, "strict_tool_calls", False),
                         reward_range=tuple(reward_range) if reward_range else None)
    token = resolve_token(getattr(args, "trainer_token", None), TOKEN_ENV, generate=True, prefix="tr-agw")
    app = create_gateway_app(policy, store, model=args.model, trainer_token=token.token,
                             limits=limits_from_args(args))
    app.state.token_source = token
    return app, writer


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (2 for a bad argument, 130/143 after a signal)."""
    from agent_gym.serving.runner import run_server

    try:
        app, writer = build_gateway(args)
    except ValueError as exc:
        print(f"agent-gym gateway: {exc}", file=sys.stderr)
        return 2
    limits = app.state.limits
    return run_server(
        app, host=args.host, port=args.port, name="agent-gym gateway", authenticated=True,
        auth="sessions sample with their own API keys; " + app.state.token_source.describe("trainer token"),
        log_level=args.log_level, on_stop=[writer.close] if writer is not None else [],
        extra_lines=[f"limits: body {limits.max_body_bytes} bytes, {limits.max_messages} messages, "
                     f"{limits.max_tools} tools; rewards in {list(args.reward_range)}"],
    )
