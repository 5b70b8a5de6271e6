"""``agent-gym rollout``: collect a batch of episodes and write them to JSONL or Parquet.

With ``--server`` the episodes are sampled token-in from vLLM-compatible servers
(``VLLMPolicy``, with the tokenizer of ``--model`` or of the model directory the servers
name); with ``--model`` alone from a local Hugging Face model
(``TransformersPolicy``); with neither, from the embedded default model, offline.
With ``--ray [ADDRESS]`` the episodes run in Ray actors (a local Ray instance
without an address), each with its own copy of the policy.
Episodes are written to ``--out`` as they finish. Ctrl-C (SIGINT) or SIGTERM (what
a job scheduler or a container runtime sends) stops the collection: the episodes
in flight are cancelled and written with their turns so far and status ``TIMEOUT``
(reason "stopped: ..."; trainers mask them), those not started are written as
``TIMEOUT`` records without turns, so every task handed in is in the file; the file
is closed, the summary is printed and the exit status is 130 (SIGINT) or 143 (SIGTERM).
A second signal stops at once (the file then holds what was written so far).

Turns are sampled from the model's full distribution by default (``top_k`` -1,
``top_p`` 1, ``min_p`` 0): what a trainer scoring the full distribution expects
(truncated sampling is off-policy for it). ``--top-k``, ``--top-p`` and ``--min-p``
truncate it; the summary's ``sampling`` line says which was used, and the trajectories
record it with the logprobs mode (``--logprobs-mode``, raw by default as in vLLM).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from agent_gym.errors import ConfigError
from agent_gym.inference.logits import LOGPROBS_MODES
from agent_gym.parsers import parser_line, parser_names
from agent_gym.types import EpisodeStatus, StepTrajectory

__all__ = ["StopOnSignal", "add_parser", "build_policy", "build_sampling", "format_summary", "run", "sampling_text",
           "summarize"]

#: Seconds per episode unless ``--episode-timeout`` says otherwise (one turn's request alone may take
#: the client's ``timeout x (max_retries + 1)``, 1200 s with the defaults).
DEFAULT_EPISODE_TIMEOUT = 900.0
_FAILED = (EpisodeStatus.TIMEOUT.value, EpisodeStatus.ENV_ERROR.value, EpisodeStatus.POLICY_ERROR.value,
           EpisodeStatus.JUDGE_ERROR.value)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``rollout`` subcommand on ``subparsers``."""
    parser = subparsers.add_parser(
        "rollout",
        help="collect episodes with a model and write trajectories",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("env_id", help="registered env id, e.g. agent_gym/ToolUse-v0")
    parser.add_argument(
        "--server", action="append", default=[], metavar="URL",
        help="vLLM-compatible server 'IP:PORT' or URL (repeat for several)",
    )
    parser.add_argument(
        "--model", metavar="PATH",
        help="local model directory; with --server, the served model's tokenizer (default: the directory the "
        "servers name in GET /v1/models, when it is on this machine)",
    )
    parser.add_argument("--episodes", type=int, default=8, metavar="N", help="number of tasks to run (default 8)")
    parser.add_argument("--samples-per-task", type=int, default=1, metavar="K", help="episodes per task (default 1)")
    parser.add_argument("--n-parallel", type=int, default=8, metavar="P", help="episodes in flight (default 8)")
    parser.add_argument("--temperature", type=float, default=1.0, metavar="T", help="temperature (default 1.0)")
    parser.add_argument(
        "--top-k", type=int, default=None, metavar="K",
        help="sample from the K most likely tokens only (default: off, the full distribution)",
    )
    parser.add_argument(
        "--top-p", type=float, default=None, metavar="P", help="nucleus sampling mass (default: 1.0, off)"
    )
    parser.add_argument(
        "--min-p", type=float, default=None, metavar="P",
        help="drop tokens less likely than P times the most likely one (default: 0.0, off)",
    )
    parser.add_argument(
        "--logprobs-mode", choices=list(LOGPROBS_MODES), default="raw_logprobs",
        help="raw_logprobs (default): the model's log-softmax before temperature and truncation; "
        "processed_logprobs: after them. With --server: the mode the servers run with (recorded only)",
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, metavar="S", help="turns per episode (env default)"
    )
    parser.add_argument("--max-tokens", type=int, default=256, metavar="N", help="tokens per turn (default 256)")
    parser.add_argument("--episode-timeout", type=float, default=DEFAULT_EPISODE_TIMEOUT, metavar="SEC",
                        help=f"seconds before an episode ends with TIMEOUT (default {DEFAULT_EPISODE_TIMEOUT:g}: a "
                             "server that accepts and never answers holds an episode no longer; 0: no limit)")
    parser.add_argument(
        "--out", default="rollouts.jsonl", metavar="FILE",
        help="output file, .jsonl or .parquet (default rollouts.jsonl)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="base seed of the tasks (default 0)")
    parser.add_argument(
        "--sampling-seed", type=int, default=None, metavar="N",
        help="seed the sampling of every turn from N (default: --seed for a local model; unseeded with --server, "
        "since seeded requests whose prefill is chunked crash vLLM's CPU engine)",
    )
    parser.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run the episodes in Ray actors: on the cluster at ADDRESS, else RAY_ADDRESS or a local instance",
    )
    parser.add_argument(
        "--tool-call-parser", default=None, metavar="NAME", choices=parser_names()[0],
        help="how the model writes tool calls, by vLLM's names: " + ", ".join(parser_names()[0])
        + " (default: read from the chat template where unambiguous, else hermes)",
    )
    parser.add_argument(
        "--reasoning-parser", default=None, metavar="NAME", choices=parser_names()[1],
        help="how the model writes its reasoning: " + ", ".join(parser_names()[1]) + " (default: from the template)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def build_sampling(args: argparse.Namespace) -> Any:
    """The ``SamplingParams`` of the arguments: the full distribution unless ``--top-k/--top-p/--min-p``.

    Truncation asked for on the command line is intended (``truncation_ok``), so ``collect``
    does not warn about it. Turns are seeded from ``--sampling-seed``, else from ``--seed`` for a
    local model; requests to servers go unseeded unless ``--sampling-seed`` is given (vLLM's CPU
    engine dies on a seeded request whose prefill is chunked, which many episodes in flight cause).
    """
    from agent_gym.policy import SamplingParams

    top_k, top_p, min_p = (getattr(args, name, None) for name in ("top_k", "top_p", "min_p"))
    seed = getattr(args, "sampling_seed", None)
    if seed is None and not getattr(args, "server", None):
        seed = args.seed
    return SamplingParams(
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=seed,
        top_k=-1 if top_k is None else top_k,
        top_p=1.0 if top_p is None else top_p,
        min_p=0.0 if min_p is None else min_p,
        truncation_ok=any(v is not None for v in (top_k, top_p, min_p)),
    )


def build_policy(args: argparse.Namespace) -> tuple[Any, str]:
    """Build the policy the arguments ask for (its sampling from :func:`build_sampling`).

    With ``--server`` the turns are sampled token-in (``VLLMPolicy``) with the tokenizer of
    ``--model``, else of the model directory the servers name in ``GET /v1/models``.

    Returns:
        The policy and a one-line description of it.

    Raises:
        ConfigError: ``--server`` without ``--model`` and the served model is not a directory
            with a tokenizer on this machine (or a server cannot be reached).
    """
    sampling = build_sampling(args)
    mode = getattr(args, "logprobs_mode", "raw_logprobs")
    tool_parser: str | None = getattr(args, "tool_call_parser", None)
    reasoning_parser: str | None = getattr(args, "reasoning_parser", None)
    if args.server:
        from agent_gym.policy import VLLMPolicy
        from agent_gym.policy.served_model import served_model_dir

        tokenizer = args.model or served_model_dir(args.server)  # ConfigError: the message names --model
        token_policy = VLLMPolicy(args.server, tokenizer, sampling, logprobs_mode=mode,
                                  tool_parser=tool_parser, reasoning_parser=reasoning_parser)
        source = "" if args.model else ", as the servers name it"
        return token_policy, f"vLLM servers {args.server} (tokenizer {tokenizer}{source})"
    from agent_gym.policy import TransformersPolicy

    if args.model:
        local = TransformersPolicy(args.model, sampling=sampling, logprobs_mode=mode, tool_parser=tool_parser,
                                   reasoning_parser=reasoning_parser)
        return local, f"local model {args.model}"
    from agent_gym.models import default_model_path

    path = default_model_path()
    policy = TransformersPolicy(str(path), sampling=sampling, logprobs_mode=mode, tool_parser=tool_parser,
                                reasoning_parser=reasoning_parser)
    return policy, f"embedded default model ({path.name})"


def sampling_text(sampling: Any, logprobs_mode: str) -> str:
    """The summary's ``sampling`` line, e.g. ``"full distribution, temperature 1, raw_logprobs"``."""
    return f"{sampling.truncation_text()}, temperature {sampling.temperature:g}, {logprobs_mode}"


def summarize(trajectories: Sequence[StepTrajectory], wall_time: float) -> dict[str, Any]:
    """Aggregate figures of a batch (what the summary table shows).

    Args:
        trajectories: The finished episodes.
        wall_time: Seconds the collection took.

    Returns:
        episodes, mean_reward, success_rate, mean_steps, tokens_sampled, tokens_per_s,
        env_time, llm_time, wall_time and a count per status.
    """
    n = len(trajectories)
    tokens = sum(int(t.response_masks.sum()) + sum(int(s.response_masks.sum()) for s in t.segments[1:])
                 for t in trajectories)
    statuses: dict[str, int] = {}
    for t in trajectories:
        statuses[t.status] = statuses.get(t.status, 0) + 1
    success = sum(1 for t in trajectories if float(t.metrics["res_reward"]) > 0)
    return {
        "episodes": n,
        "mean_reward": sum(float(t.trajectory_reward) for t in trajectories) / n if n else 0.0,
        "success_rate": success / n if n else 0.0,
        "mean_steps": sum(int(t.metrics["steps"]) for t in trajectories) / n if n else 0.0,
        "tokens_sampled": tokens,
        "tokens_per_s": tokens / wall_time if wall_time > 0 else 0.0,
        "env_time": sum(float(t.metrics["env_time"]) for t in trajectories),
        "llm_time": sum(float(t.metrics["llm_time"]) for t in trajectories),
        "wall_time": wall_time,
        "statuses": statuses,
    }


def format_summary(summary: dict[str, Any]) -> str:
    """Render :func:`summarize` output as an aligned two-column table.

    A ``"sampling"`` entry (added by ``agent-gym rollout``, see :func:`sampling_text`) and a
    ``"parsers"`` entry (the tool-call and reasoning parsers, and whether they were read from
    the chat template) become the last rows.
    """
    busy = summary["env_time"] + summary["llm_time"]
    env_share = summary["env_time"] / busy if busy > 0 else 0.0
    rows = [
        ("episodes", f"{summary['episodes']}"),
        ("mean reward", f"{summary['mean_reward']:.4f}"),
        ("success rate", f"{summary['success_rate']:.1%}"),
        ("mean steps", f"{summary['mean_steps']:.2f}"),
        ("tokens sampled", f"{summary['tokens_sampled']}"),
        ("tokens/s", f"{summary['tokens_per_s']:.1f}"),
        ("time env / llm", f"{summary['env_time']:.2f}s / {summary['llm_time']:.2f}s "
                           f"({env_share:.0%} / {1 - env_share:.0%})"),
        ("wall time", f"{summary['wall_time']:.2f}s"),
        ("statuses", ", ".join(f"{k or '?'}={v}" for k, v in sorted(summary["statuses"].items())) or "-"),
    ]
    if summary.get("sampling"):
        rows.append(("sampling", str(summary["sampling"])))
    if summary.get("parsers"):
        rows.append(("parsers", str(summary["parsers"])))
    width = max(len(name) for name, _ in rows)
    line = "-" * (width + 3 + max(len(value) for _, value in rows))
    return "\n".join([line, *(f"{name:<{width}} | {value}" for name, value in rows), line])


def _check_args(args: argparse.Namespace) -> str | None:
    for name in ("episodes", "samples_per_task", "n_parallel", "max_tokens"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')}: expected an int >= 1, got {getattr(args, name)}"
    try:
        build_sampling(args)
    except ValueError as exc:  # a pydantic ValidationError: its message names the field and its range
        errors = getattr(exc, "errors", None)
        detail = str(errors()[0].get("msg", exc)) if callable(errors) and errors() else str(exc)
        return detail.removeprefix("Value error, ")
    if args.max_steps is not None and args.max_steps < 1:
        return f"--max-steps: expected an int >= 1, got {args.max_steps}"
    timeout = getattr(args, "episode_timeout", None)
    if timeout is not None and not timeout >= 0:
        return f"--episode-timeout: expected seconds >= 0 (0: no limit), got {timeout}"
    if Path(args.out).suffix.lower() not in (".jsonl", ".parquet"):
        return f"--out: expected a file ending in .jsonl or .parquet, got {args.out!r}"
    return None


class StopOnSignal:
    """Turns SIGINT and SIGTERM into a graceful stop of a collection.

    Installed explicitly (``signal.signal``), so SIGINT works also in a process
    started with SIGINT ignored (a background job). While :meth:`guard` runs a
    coroutine, the first signal cancels it (the episodes in flight are cancelled,
    every finished one has been handed to ``on_episode``); before that, the first
    signal raises ``KeyboardInterrupt``; after it, signals are only recorded, so
    closing the output file is never interrupted. A second signal raises
    ``KeyboardInterrupt`` at once.

    Only the main thread can install signal handlers; elsewhere this does nothing.

    Example:
        >>> stop = StopOnSignal()  # doctest: +SKIP
        >>> with stop:  # doctest: +SKIP
        ...     run_sync(lambda: stop.guard(collect_async(...)))
        >>> stop.exit_code  # 130 after SIGINT, 143 after SIGTERM, None otherwise  # doctest: +SKIP
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._raise_now = True

    @property
    def exit_code(self) -> int | None:
        """``128 + signal number`` of the first signal received, or None."""
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # a second signal: stop now
        self.signum = signum
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        elif self._raise_now:
            raise KeyboardInterrupt

    async def guard(self, awaitable: Awaitable[Any]) -> bool:
        """Await ``awaitable`` until it ends or a signal cancels it.

        Returns:
            True when a signal stopped it (also one received just before).
        """
        self._raise_now = False
        if self.signum is not None:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            return True
        task = asyncio.current_task()
        self._loop, self._task = asyncio.get_running_loop(), task
        try:
            await awaitable
        except asyncio.CancelledError:
            if self.signum is None or task is None:
                raise
            task.uncancel()
        finally:
            self._loop = self._task = None
        return self.signum is not None


def run(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``agent-gym rollout``.

    Returns:
        0 on success, 2 on bad arguments, 130 (SIGINT) or 143 (SIGTERM) when
        stopped by a signal (the output file then holds the episodes finished so far).
    """
    out = stdout or sys.stdout
    problem = _check_args(args)
    if problem:
        print(f"agent-gym rollout: {problem}", file=sys.stderr)
        return 2
    import gymnasium as gym

    from agent_gym.envs import register_envs
    from agent_gym.export import TrajectoryWriter
    from agent_gym.rollout import collect_async
    from agent_gym.utils.runtime import run_sync

    register_envs()
    if args.env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if k.startswith("agent_gym/")))
        print(f"agent-gym rollout: unknown env id {args.env_id!r}; registered: {known}", file=sys.stderr)
        return 2
    ray_address = None if args.ray is None else (args.ray or None)
    if args.ray is not None:
        from agent_gym.rollout.ray_backend import init_ray

        init_ray(ray_address)  # before the handlers: ray.init installs its own SIGTERM handler
    finished: list[StepTrajectory] = []
    stop = StopOnSignal()
    with stop:
        try:
            policy, description = build_policy(args)
        except KeyboardInterrupt:
            print("interrupted before the first episode: nothing written", file=out)
            return stop.exit_code or 130
        except ConfigError as exc:
            print(f"agent-gym rollout: {exc}", file=sys.stderr)
            return 2
        print(f"policy: {description}", file=out)
        started = time.perf_counter()
        writer = TrajectoryWriter(args.out)
        try:

            def _on_episode(trajectory: StepTrajectory) -> None:
                writer.write(trajectory)
                finished.append(trajectory)

            run_sync(
                lambda: stop.guard(
                    collect_async(
                        args.env_id,
                        policy,
                        num_episodes=args.episodes,
                        samples_per_task=args.samples_per_task,
                        n_parallel=args.n_parallel,
                        max_steps=args.max_steps,
                        episode_timeout=args.episode_timeout or None,
                        progress=not args.no_progress,
                        seed=args.seed,
                        on_episode=_on_episode,
                        backend="local" if args.ray is None else "ray",
                        ray_address=ray_address,
                        tool_parser=getattr(args, "tool_call_parser", None),
                        reasoning_parser=getattr(args, "reasoning_parser", None),
                    )
                ),
                release=[policy],
            )
        except (KeyboardInterrupt, asyncio.CancelledError):  # a second signal, or one racing the end
            stop.signum = stop.signum or signal.SIGINT
        finally:
            writer.close()
            _close_policy(policy)
    wall = time.perf_counter() - started
    summary = summarize(finished, wall)
    summary["sampling"] = sampling_text(policy.sampling, getattr(args, "logprobs_mode", "raw_logprobs"))
    summary["parsers"] = parser_line(policy, getattr(args, "tool_call_parser", None),
                                     getattr(args, "reasoning_parser", None))
    print(format_summary(summary), file=out)
    if stop.exit_code is not None:
        stopped = sum(1 for t in finished if _was_stopped(t))
        print(f"interrupted: {len(finished) - stopped} finished and {stopped} stopped episodes written to {args.out}",
              file=out, flush=True)
        return stop.exit_code
    print(f"wrote {len(finished)} episodes to {args.out}", file=out)
    return 0


def _was_stopped(trajectory: StepTrajectory) -> bool:
    """Whether the trajectory is the record of an episode the stop cut short."""
    from agent_gym.rollout.reporting import STOPPED_REASON

    steps = trajectory.steps
    return bool(steps) and steps[-1].info.get("error") == STOPPED_REASON


def _close_policy(policy: Any) -> None:
    close: Callable[[], Any] | None = getattr(policy, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
