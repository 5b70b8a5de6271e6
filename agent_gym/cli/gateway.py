"""``agent-gym gateway``: an OpenAI/Anthropic-compatible proxy recording token-exact sessions."""

from __future__ import annotations

import argparse
import logging
from typing import Any

__all__ = ["add_parser", "build_gateway", "run"]

logger = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``gateway`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "gateway",
        help="serve OpenAI/Anthropic chat APIs over token-in vLLM and record token-exact trajectories",
        description="Serve POST /v1/chat/completions and POST /v1/responses (OpenAI), POST /v1/messages "
        "(Anthropic) and GET /v1/models; "
        "every turn is sampled token-in from the vLLM servers and recorded per session "
        "(/sessions/{id}/v1/..., the API key, or x-session-id). GET /sessions/{id}/trajectory returns "
        "the StepTrajectory; POST /sessions/{id}/reward ends the episode.",
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
    parser.add_argument("--model", default=None, help="model name reported to clients (default: the upstream's)")
    parser.add_argument("--tool-call-parser", default=None, metavar="NAME",
                        help="how the model writes tool calls, by vLLM's names (default: from the chat template)")
    parser.add_argument("--reasoning-parser", default=None, metavar="NAME",
                        help="deepseek_r1, qwen3 or openai (default: from the chat template)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
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
    """The FastAPI app (and its policy and store) described by ``args``."""
    from agent_gym.gateway import SessionStore, create_gateway_app
    from agent_gym.parsers import env_parser_for
    from agent_gym.policy import ClientOptions, SamplingParams, VLLMPolicy

    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    tool_parser: str | None = getattr(args, "tool_call_parser", None)
    reasoning_parser: str | None = getattr(args, "reasoning_parser", None)
    policy = VLLMPolicy(args.server, _tokenizer(args.tokenizer), sampling,
                        client_options=ClientOptions(max_retries=args.max_retries), tool_parser=tool_parser,
                        reasoning_parser=reasoning_parser)
    writer = None
    if args.output:
        from agent_gym.export import TrajectoryWriter

        writer = TrajectoryWriter(args.output)
    store = SessionStore(writer=writer, auto_create=args.auto_sessions,
                         parser=env_parser_for(policy, None, tool_parser, reasoning_parser),
                         strict_tool_calls=getattr(args, "strict_tool_calls", False))
    return create_gateway_app(policy, store, model=args.model), writer


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns the exit code."""
    import uvicorn

    app, writer = build_gateway(args)
    logger.warning("agent_gym gateway on http://%s:%d", args.host, args.port)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                    timeout_keep_alive=30, timeout_graceful_shutdown=5)
    finally:
        if writer is not None:
            writer.close()
    return 0
