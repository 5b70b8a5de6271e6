"""``agent-gym play ENV_ID``: play an environment by hand in the terminal.

Shows the conversation and the tools, reads each assistant message from
standard input (several lines; finish with an empty line, or end of input), and
prints the reward and the messages the environment added. Plain line reading,
so it works under tmux/screen and with a pipe (``echo '<answer>4</answer>' |
agent-gym play agent_gym/ToolUse-v0``). ``--oracle`` plays the reference solution;
``--env-kwargs`` passes ``gym.make`` keyword arguments as JSON. An image a message carries
(:mod:`agent_gym.messages`, e.g. Web-v0's ``screenshots="observation"``) is shown as one line
with its media type and size, never as its data.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

__all__ = ["add_parser", "describe_image", "read_message", "run", "show_messages"]

_RULE = "-" * 72


def read_message(stream: TextIO) -> str | None:
    """Read one multi-line message: lines up to an empty line or end of input.

    Args:
        stream: The input stream.

    Returns:
        The message without its final newline, or None at end of input with nothing read.
    """
    lines: list[str] = []
    while True:
        line = stream.readline()
        if not line:
            return "\n".join(lines) if lines else None
        line = line.rstrip("\r\n")
        if not line.strip():
            if lines:
                return "\n".join(lines)
            continue
        lines.append(line)


def describe_image(part: Any) -> str:
    """One line for an image content part: ``[image: image/png, 1234 bytes]`` (a ``data:`` URL) or its address."""
    url = str(((part or {}).get("image_url") or {}).get("url", "")) if isinstance(part, dict) else ""
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        size = len(data) * 3 // 4 - data[-2:].count("=") if ";base64" in head else len(data)
        return f"[image: {head[5:].split(';', 1)[0] or 'unknown type'}, {size} bytes]"
    return f"[image: {url[:200]}]"


def show_messages(messages: Any, out: TextIO) -> None:
    """Print each message's role, its text and one line per image it carries."""
    for message in messages:
        print(f"[{message['role']}]", file=out)
        print(message["content"], file=out)
        for part in message.get("images") or ():
            print(describe_image(part), file=out)
        print(file=out)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``play`` subcommand."""
    parser = subparsers.add_parser(
        "play",
        help="play an environment by hand (or watch the oracle)",
        description="Play an agent_gym environment: type assistant messages, see rewards and observations.",
    )
    parser.add_argument("env_id", metavar="ENV_ID", help="environment id, e.g. agent_gym/ToolUse-v0")
    parser.add_argument("--seed", type=int, default=None, help="reset seed (chooses the task)")
    parser.add_argument("--task-index", type=int, default=None, help="index of the task to play")
    parser.add_argument("--oracle", action="store_true", help="play the reference solution")
    parser.add_argument("--tools-in-prompt", action="store_true", help="describe tools in the system message")
    parser.add_argument("--max-steps", type=int, default=None, help="assistant messages per episode")
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="gym.make keyword arguments as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    """Play one episode; returns 0 when it ends (or input ends), 2 for a bad id or option."""
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the ids)
    from agent_gym.env.core import AgentEnv
    from agent_gym.tools import describe_tools

    out = sys.stdout
    try:
        extra = json.loads(args.env_kwargs)
    except ValueError as exc:
        print(f"error: --env-kwargs: expected a JSON object, got {args.env_kwargs!r} ({exc})", file=sys.stderr)
        return 2
    if not isinstance(extra, dict):
        print(f"error: --env-kwargs: expected a JSON object, got {args.env_kwargs!r}", file=sys.stderr)
        return 2
    kwargs: dict[str, Any] = {"render_mode": "ansi", **extra}
    if args.tools_in_prompt:
        kwargs["tools_in_prompt"] = True
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    try:
        env = gym.make(args.env_id, **kwargs)
    except (gym.error.Error, ValueError, TypeError) as exc:
        print(f"error: cannot make {args.env_id!r}: {exc}", file=sys.stderr)
        return 2
    agent_env = env.unwrapped
    if args.oracle and not isinstance(agent_env, AgentEnv):
        print(f"error: {args.env_id!r} is not an agent_gym env: it has no oracle", file=sys.stderr)
        env.close()
        return 2
    options = None if args.task_index is None else {"task_index": args.task_index}
    try:
        obs, info = env.reset(seed=args.seed, options=options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.env_id}  task {info['task']['id']}  episode {info.get('episode_id', '')}", file=out)
    if info["tools"]:
        print(_RULE, file=out)
        print(describe_tools(info["tools"], include_format=True), file=out)
    print(_RULE, file=out)
    show_messages(obs, out)
    total = 0.0
    seen = len(obs)
    action: str | None
    try:
        while True:
            if isinstance(agent_env, AgentEnv) and args.oracle:
                action = agent_env.oracle_action()
                print("[assistant (oracle)]", file=out)
                print(action, file=out)
            else:
                print("assistant> (finish with an empty line; end of input quits)", file=out, flush=True)
                action = read_message(sys.stdin)
                if action is None:
                    print("end of input: episode abandoned", file=out)
                    return 0
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            print(_RULE, file=out)
            show_messages(obs[seen + 1 :], out)  # skip the assistant message just typed or shown
            seen = len(obs)
            details = {k: info[k] for k in ("toolcall_reward", "res_reward") if k in info}
            line = f"reward {reward:+.3f} ({json.dumps(details)})  total {total:+.3f}"
            if info.get("error"):
                line += f"\nerror: {info['error']}"
            print(line, file=out, flush=True)
            if terminated or truncated:
                status = info.get("status", "")
                print(f"episode over: {'terminated' if terminated else 'truncated'}, status {status}, "
                      f"return {total:+.3f}", file=out)
                return 0
    finally:
        env.close()
