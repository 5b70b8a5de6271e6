"""Command line and startup of the reference server."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from agent_gym.inference import DEFAULT_CACHE_BYTES, LOGPROBS_MODES
from agent_gym.reference_server.app import Faults, create_app
from agent_gym.serving.auth import resolve_token
from agent_gym.serving.limits import add_limit_arguments, limits_from_args

__all__ = ["API_KEY_ENV", "add_server_arguments", "build_app", "main", "serve"]

API_KEY_ENV = "VLLM_API_KEY"
"""Environment variable read for the API key when ``--api-key`` is not given (vLLM's)."""

logger = logging.getLogger(__name__)


def add_server_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the server's options to ``parser`` (``python -m agent_gym.reference_server`` and ``agent-gym serve``)."""
    parser.add_argument("--model", default=None, help="model directory (default: agent_gym's built-in tiny model)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context length (default: the model config's max_position_embeddings)",
    )
    parser.add_argument("--served-model-name", default=None, help="model name reported by /v1/models")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--max-batch", type=int, default=64, help="most sequences decoded together")
    parser.add_argument(
        "--prefix-cache-mb",
        type=float,
        default=DEFAULT_CACHE_BYTES / 2**20,
        metavar="MB",
        help=f"memory for the cached keys/values of prompt heads shared between requests, in MiB "
        f"(default {DEFAULT_CACHE_BYTES // 2**20}; the least recently used leave first; 0 turns the cache off)",
    )
    parser.add_argument(
        "--logprobs-mode",
        default="raw_logprobs",
        choices=list(LOGPROBS_MODES),
        help="logprobs returned, as vLLM's flag: raw_logprobs (default) is the log-softmax of the model's logits "
        "before temperature, penalties and top-k/top-p/min-p; processed_logprobs is the log-softmax after them",
    )
    parser.add_argument(
        "--enable-auto-tool-choice", action="store_true",
        help="as vLLM's flag: chat requests with tools and tool_choice 'auto' are served (needs --tool-call-parser)",
    )
    parser.add_argument(
        "--tool-call-parser", default=None, metavar="NAME",
        help="as vLLM's flag: the parser that takes tool calls out of the answers' text (hermes, llama3_json, ...)",
    )
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help=f"as vLLM's flag: every route but /health needs 'Authorization: Bearer KEY' (default "
                             f"${API_KEY_ENV}; none: no key)")
    parser.add_argument("--trust-request-chat-template", action="store_true",
                        help="as vLLM's flag: render chat templates (and structured template arguments) sent with "
                             "requests, in a bounded sandbox; without it they are refused with a 400")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    add_limit_arguments(parser)
    test = parser.add_argument_group("testing aids (fake answers and fault injection; never in real use)")
    test.add_argument(
        "--fake-tokens",
        type=int,
        default=None,
        metavar="N",
        help="answer every request with N fixed tokens (the last is EOS) without running a model",
    )
    test.add_argument("--fake-latency-ms", type=float, default=0.0, metavar="MS", help="delay of each fake answer")
    test.add_argument(
        "--fake-token-latency-ms", type=float, default=0.0, metavar="MS", help="delay of each token of a fake answer"
    )
    test.add_argument(
        "--cut-stream-after",
        type=int,
        default=None,
        metavar="N",
        help="drop the connection of every streamed answer after N chunks",
    )
    test.add_argument(
        "--fail-first", type=int, default=0, metavar="N", help="the first N generation requests fail with --fail-status"
    )
    test.add_argument("--fail-status", type=int, default=500, metavar="S", help="status of injected failures")
    test.add_argument("--hang", action="store_true", help="never answer generation requests")
    test.add_argument(
        "--hang-after",
        type=int,
        default=None,
        metavar="N",
        help="answer N generation requests, then hang on every later one",
    )
    test.add_argument(
        "--malformed-json", action="store_true", help="answer generation requests with an unparseable JSON body"
    )
    test.add_argument(
        "--die-after",
        type=int,
        default=None,
        metavar="N",
        help="exit abruptly when generation request N+1 arrives (simulates a crash)",
    )
    return parser


def build_app(args: argparse.Namespace) -> Any:
    """Load the backend described by ``args`` and return the FastAPI app."""
    from agent_gym.reference_server.backends import FakeBackend, TransformersBackend

    faults = Faults(
        die_after=args.die_after,
        fail_first=args.fail_first,
        fail_status=args.fail_status,
        hang_after=0 if args.hang else args.hang_after,
        malformed_json=args.malformed_json,
        cut_stream_after=args.cut_stream_after,
    )
    if args.fake_tokens is not None:
        if args.model:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.model)
        else:
            from agent_gym.models import load_qwen_tokenizer

            tokenizer = load_qwen_tokenizer()
        backend: Any = FakeBackend(
            tokenizer,
            num_tokens=args.fake_tokens,
            latency_ms=args.fake_latency_ms,
            token_latency_ms=args.fake_token_latency_ms,
            max_model_len=args.max_model_len or 32768,
            logprobs_mode=args.logprobs_mode,
        )
        if args.model:
            backend.model_path = args.model
    else:
        model = args.model
        if model is None:
            from agent_gym.models import default_model_path

            model = str(default_model_path())
        backend = TransformersBackend(
            model,
            max_model_len=args.max_model_len,
            max_batch=args.max_batch,
            dtype=args.dtype,
            device=args.device,
            logprobs_mode=args.logprobs_mode,
            prefix_cache_bytes=int(args.prefix_cache_mb * 2**20),
        )
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise SystemExit("--enable-auto-tool-choice requires --tool-call-parser")
    parser_name = args.tool_call_parser if args.enable_auto_tool_choice else None
    key = resolve_token(getattr(args, "api_key", None), API_KEY_ENV)
    app = create_app(backend, served_model_name=args.served_model_name, faults=faults, tool_call_parser=parser_name,
                     limits=limits_from_args(args), api_key=key.token,
                     trust_request_chat_template=bool(getattr(args, "trust_request_chat_template", False)))
    app.state.api_key_source = key
    return app


def serve(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; returns the exit code (130/143 after a signal)."""
    from agent_gym.serving.runner import run_server

    try:
        app = build_app(args)
    except ValueError as exc:
        print(f"agent_gym reference server: {exc}", file=sys.stderr)
        return 2
    key = app.state.api_key_source
    templates = "client chat templates rendered in a sandbox" if args.trust_request_chat_template else \
        "client chat templates refused"
    return run_server(app, host=args.host, port=args.port, name="agent_gym reference server",
                      auth=key.describe("API key") + f"; {templates}", authenticated=key.token is not None,
                      log_level=args.log_level)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m agent_gym.reference_server``."""
    parser = argparse.ArgumentParser(
        prog="python -m agent_gym.reference_server",
        description="Reference OpenAI-compatible server (vLLM dialect) on transformers.",
    )
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return serve(args)
