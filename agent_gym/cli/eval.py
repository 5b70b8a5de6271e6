"""``agent-gym eval``: evaluate a model on envs (k samples per task, pass@k and pass^k) into a results directory.

The model is one of: an OpenAI-compatible endpoint (``--base-url`` with ``--model`` the
model name and ``--api-key-env`` the variable holding the key; messages in, through the
chat path, with only the OpenAI API's request fields and tool calls and results sent as
structured ``tool_calls`` and ``tool_call_id`` messages, so hosted APIs work; ``--top-k`` and
``--min-p``, which that API lacks, are refused there), vLLM-compatible servers (``--server``, token-in and
token-exact, as ``agent-gym rollout --server``), or, with neither, a local model
(``--model DIR``) or the embedded default model, offline.

Each task of each env runs ``--k`` times (``--tasks N`` of them, drawn with ``--seed``;
``--split`` for envs that take one). ``--out DIR`` receives ``config.json`` (the run's
settings; an API key never, only the name of its variable), ``manifest.json`` (env versions
and a hash of each env's evaluated tasks), ``episodes.jsonl`` (one line per finished
attempt, written with fsync: a ``kill -9`` loses only the episodes in flight) and
``summary.json`` / ``summary.txt``: per env, the success rate, unbiased pass@k and pass^k
(k = 1, powers of two, K) with 95% Wilson intervals over tasks. Success is the env's
outcome (its success flag, else ``res_reward`` > 0), never the shaped reward.

An episode that failed for infrastructure reasons (server down, env error, timeout) is
recorded unscored and run again, ``--retries`` times at most; the summary counts such
failures. ``--resume DIR`` runs the episodes of DIR not yet scored with DIR's settings
(``--server``, ``--base-url``, ``--api-key-env``, ``--n-parallel``, ``--retries`` and
``--episode-timeout`` may be given again, e.g. for a server on a new port); with a seed the
final statistics are those of an uninterrupted run. ``--reverify DIR`` re-grades DIR's
stored episodes with the current grader, without inference (envs graded by a sandbox or
tool state are skipped, with the reason).

Exit status: 0 when every episode was scored (and, with ``--reverify``, every grade
agreed), 1 when some were not (or some grade changed), 2 on bad arguments, 130/143 when
stopped by SIGINT/SIGTERM (resume the directory to finish).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from agent_gym.errors import ConfigError
from agent_gym.inference.logits import LOGPROBS_MODES
from agent_gym.parsers import parser_names

__all__ = ["add_parser", "build_eval_policy", "run"]

#: Settings a resumed run may change: where the model is and how hard to try, not what is measured.
RESUME_OVERRIDES = ("server", "base_url", "api_key_env", "n_parallel", "retries", "episode_timeout")
#: Settings that define the measurement, stored in ``config.json`` and taken from it on resume.
_MEASURED = ("k", "tasks", "split", "seed", "sampling_seed", "temperature", "top_k", "top_p", "min_p",
             "max_tokens", "max_steps", "logprobs_mode", "tool_call_parser", "reasoning_parser", "model")
_DEFAULTS = {"n_parallel": 8, "retries": 2, "episode_timeout": 900.0}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``eval`` subcommand on ``subparsers``."""
    parser = subparsers.add_parser(
        "eval", help="evaluate a model on envs: pass@k and pass^k, resumable results directory",
        description=__doc__.replace("``", "") if __doc__ else None, epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("env_ids", nargs="*", metavar="ENV_ID", help="registered env ids, e.g. agent_gym/ToolUse-v0")
    model = parser.add_argument_group("model (default: the embedded model, offline)")
    model.add_argument("--base-url", metavar="URL",
                       help="OpenAI-compatible endpoint, e.g. https://api.example.com/v1 (chat path; needs --model)")
    model.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the endpoint's API key")
    model.add_argument("--server", action="append", default=None, metavar="HOST:PORT",
                       help="vLLM-compatible server, token-exact (repeat for several)")
    model.add_argument("--model", metavar="NAME_OR_DIR",
                       help="with --base-url: the model name; with --server: its tokenizer directory (default: the "
                            "one the servers name); alone: a local model directory")
    runs = parser.add_argument_group("what runs")
    runs.add_argument("--k", type=int, default=1, metavar="K", help="samples per task (default 1)")
    runs.add_argument("--tasks", type=int, default=None, metavar="N",
                      help="tasks per env, drawn with --seed (default all)")
    runs.add_argument("--split", default=None, metavar="NAME", help="the envs' split, for envs that take one")
    runs.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the tasks and episodes (default 0)")
    runs.add_argument("--sampling-seed", type=int, default=None, metavar="N",
                      help="seed of the sampling (default: --seed, except with --server: unseeded)")
    runs.add_argument("--temperature", type=float, default=1.0, metavar="T", help="temperature (default 1.0)")
    runs.add_argument("--top-k", type=int, default=None, metavar="K", help="top-k (default off)")
    runs.add_argument("--top-p", type=float, default=None, metavar="P", help="top-p (default off)")
    runs.add_argument("--min-p", type=float, default=None, metavar="P", help="min-p (default off)")
    runs.add_argument("--max-tokens", type=int, default=512, metavar="N", help="tokens per turn (default 512)")
    runs.add_argument("--max-steps", type=int, default=None, metavar="S", help="turns per episode (env default)")
    runs.add_argument("--logprobs-mode", choices=list(LOGPROBS_MODES), default="raw_logprobs",
                      help="logprobs recorded (default raw_logprobs)")
    runs.add_argument("--tool-call-parser", default=None, choices=parser_names()[0], metavar="NAME",
                      help="how the model writes tool calls (default: from the chat template, else hermes)")
    runs.add_argument("--reasoning-parser", default=None, choices=parser_names()[1], metavar="NAME",
                      help="how the model writes its reasoning (default: from the template)")
    runs.add_argument("--n-parallel", type=int, default=None, metavar="P", help="episodes in flight (default 8)")
    runs.add_argument("--retries", type=int, default=None, metavar="R",
                      help="retries of an episode failed for infrastructure reasons (default 2)")
    runs.add_argument("--episode-timeout", type=float, default=None, metavar="SEC",
                      help="seconds before an episode fails with TIMEOUT, retried (default 900; 0: no limit)")
    where = parser.add_argument_group("results")
    where.add_argument("--out", metavar="DIR", help="new results directory")
    where.add_argument("--resume", metavar="DIR", help="finish the evaluation in DIR (episodes not yet scored)")
    where.add_argument("--reverify", metavar="DIR", help="re-grade DIR's stored episodes with the current grader")
    where.add_argument("--rubric", metavar="MODULE:FACTORY", default=None,
                       help="with --reverify: re-grade with this Rubric (its judges are called again; episodes "
                            "whose judge failed, JUDGE_ERROR, are retried)")
    where.add_argument("--judge", metavar="HOST:PORT", action="append", default=[],
                       help="with --reverify: re-grade with an LLM judge at this server (as --rubric)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _epilog() -> str:
    return ("examples:\n"
            "  agent-gym eval agent_gym/ToolUse-v0 --k 4 --tasks 50 --out results/\n"
            "  agent-gym eval agent_gym/ToolUse-v0 agent_gym/RAG-v0 --base-url https://api.example.com/v1 \\\n"
            "      --model some-model --api-key-env EXAMPLE_API_KEY --k 8 --out results/\n"
            "  agent-gym eval agent_gym/ToolUse-v0 --server 127.0.0.1:8000 --k 8 --out results/\n"
            "  agent-gym eval --resume results/\n"
            "  agent-gym eval --reverify results/")


def _problem(args: argparse.Namespace) -> str | None:
    modes = [name for name in ("out", "resume", "reverify") if getattr(args, name)]
    if len(modes) != 1:
        return "expected exactly one of --out DIR, --resume DIR, --reverify DIR"
    if args.out and not args.env_ids:
        return "expected at least one ENV_ID with --out"
    if not args.out and args.env_ids:
        return f"ENV_IDs come from the results directory with --{modes[0]}: got {' '.join(args.env_ids)}"
    if args.base_url and args.server:
        return "expected --base-url or --server, got both"
    if (args.rubric or args.judge) and not args.reverify:
        return "--rubric and --judge re-grade a results directory: expected them with --reverify DIR"
    if args.rubric and args.judge:
        return "expected --rubric or --judge, got both"
    for name in ("k", "tasks", "max_tokens", "max_steps", "n_parallel"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')}: expected an int >= 1, got {value}"
    if args.retries is not None and args.retries < 0:
        return f"--retries: expected an int >= 0, got {args.retries}"
    if args.episode_timeout is not None and not args.episode_timeout >= 0:
        return f"--episode-timeout: expected seconds >= 0 (0: no limit), got {args.episode_timeout}"
    return None


def build_eval_policy(args: argparse.Namespace) -> tuple[Any, str]:
    """The policy of the arguments and a one-line description of it.

    ``--base-url``: a :class:`~agent_gym.policy.VLLMChatPolicy` speaking the OpenAI API alone
    (``api="openai"``: only OpenAI request fields, structured tool calls and results) with the
    key read from ``--api-key-env``; otherwise what ``agent-gym rollout`` builds (``--server``: token-exact
    ``VLLMPolicy``; a local or the embedded model: ``TransformersPolicy``).

    Raises:
        ConfigError: ``--base-url`` without ``--model``, an unset ``--api-key-env`` variable, or
            what ``agent-gym rollout`` refuses.
    """
    from agent_gym.cli.rollout import build_policy, build_sampling

    if not args.base_url:
        rollout_args = argparse.Namespace(**{**vars(args), "server": args.server or []})
        return build_policy(rollout_args)
    from agent_gym.policy import ClientOptions, VLLMChatPolicy

    if not args.model:
        raise ConfigError("--base-url: expected --model NAME (the model the endpoint serves)")
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ConfigError(f"--api-key-env: the environment variable {args.api_key_env} is not set")
    policy = VLLMChatPolicy([args.base_url], None, build_sampling(argparse.Namespace(**{**vars(args), "server": []})),
                            model=args.model, logprobs_mode=args.logprobs_mode,
                            client_options=ClientOptions(api_key=key), tool_parser=args.tool_call_parser,
                            reasoning_parser=args.reasoning_parser, api="openai")
    return policy, f"OpenAI-compatible endpoint {args.base_url} (model {args.model}, chat)"


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return {**{name: getattr(args, name) for name in _MEASURED}, "envs": list(args.env_ids),
            **{name: getattr(args, name) for name in RESUME_OVERRIDES}}


def _resumed_args(args: argparse.Namespace, stored: dict[str, Any]) -> argparse.Namespace:
    """The stored settings, with the connection and effort settings given on the command line."""
    values = dict(vars(args))
    for name in _MEASURED:
        values[name] = stored.get(name)
    values["env_ids"] = stored.get("envs", [])
    for name in RESUME_OVERRIDES:
        if getattr(args, name) is None or (name == "server" and not args.server):
            values[name] = stored.get(name)
    if args.server or args.base_url:  # a new endpoint replaces the stored one, of either kind
        values["server"], values["base_url"] = args.server, args.base_url
    return argparse.Namespace(**values)


def run(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``agent-gym eval`` (see the module docstring for the exit status)."""
    out = stdout or sys.stdout
    problem = _problem(args)
    if problem:
        print(f"agent-gym eval: {problem}", file=sys.stderr)
        return 2
    from agent_gym.evaluation import EpisodeStore

    if args.reverify and (args.rubric or args.judge):
        return _rejudge(EpisodeStore(args.reverify), args, out)
    if args.reverify:
        return _reverify(EpisodeStore(args.reverify), out)
    store = EpisodeStore(args.resume or args.out)
    if args.out and store.exists():
        print(f"agent-gym eval: --out: {args.out} holds an evaluation already: resume it with --resume {args.out}, "
              "or choose another directory", file=sys.stderr)
        return 2
    if args.resume:
        if not store.exists():
            print(f"agent-gym eval: --resume: {args.resume} holds no evaluation (no config.json)", file=sys.stderr)
            return 2
        args = _resumed_args(args, store.read_json("config.json"))
    for name, value in _DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return _evaluate(args, store, out, resume=bool(args.resume))


def _evaluate(args: argparse.Namespace, store: Any, out: TextIO, *, resume: bool) -> int:
    from agent_gym.cli.rollout import StopOnSignal, sampling_text
    from agent_gym.evaluation import finish, format_summary, prepare, run_pending
    from agent_gym.parsers.selection import policy_parser_names
    from agent_gym.utils.runtime import run_sync

    stop = StopOnSignal()
    with stop:
        try:
            policy, description = build_eval_policy(args)
            config = _config(args)
            names = policy_parser_names(policy)
            config.update(policy=description, sampling=sampling_text(policy.sampling, args.logprobs_mode),
                          parsers={"tool_parser": args.tool_call_parser or names[0],
                                   "reasoning_parser": args.reasoning_parser or names[1]})
            plans = prepare(store, config, resume=resume)
        except ConfigError as exc:
            print(f"agent-gym eval: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return stop.exit_code or 130
        print(f"policy: {description}", file=out)
        print(f"results: {store.root}", file=out, flush=True)
        bar = _progress(args, plans, store)
        done: list[Any] = []

        async def _run() -> None:
            done.append(await run_pending(
                store, plans, policy, k=args.k, seed=args.seed, n_parallel=args.n_parallel, retries=args.retries,
                max_steps=args.max_steps, episode_timeout=args.episode_timeout or None,
                tool_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                on_record=None if bar is None else lambda record: bar.update(1 if record["scored"] else 0),
            ))

        try:
            run_sync(lambda: stop.guard(_run()), release=[policy])
        except KeyboardInterrupt:
            stop.signum = stop.signum or signal.SIGINT
        finally:
            if bar is not None:
                bar.close()
            close = getattr(policy, "close", None)
            if callable(close):
                close()
    summary = finish(store, plans, args.k)
    print(format_summary(summary), file=out)
    if stop.exit_code is not None:
        print(f"interrupted: resume with agent-gym eval --resume {store.root}", file=out)
        return stop.exit_code
    missing = sum(env["missing_episodes"] for env in summary["envs"].values())
    if missing:
        print(f"{missing} episodes not scored after {args.retries} retries (infrastructure failures): "
              f"resume with agent-gym eval --resume {store.root}", file=out)
        return 1
    scored = done[0].scored if done else 0
    print(f"scored {scored} episodes this run; summary in {Path(store.root) / 'summary.txt'}", file=out)
    return 0


def _progress(args: argparse.Namespace, plans: dict[str, Any], store: Any) -> Any:
    if args.no_progress:
        return None
    from tqdm import tqdm

    from agent_gym.evaluation import pending_keys

    total = sum(len(plan.task_indices) for plan in plans.values()) * args.k
    pending = len(pending_keys(plans, args.k, store.records()))
    return tqdm(total=total, initial=total - pending, desc="eval", unit="ep", file=sys.stderr)


def _reverify(store: Any, out: TextIO) -> int:
    from agent_gym.evaluation import reverify

    if not store.exists():
        print(f"agent-gym eval: --reverify: {store.root} holds no evaluation (no config.json)", file=sys.stderr)
        return 2
    result = reverify(store)
    changed = 0
    for env_id, entry in result["envs"].items():
        if entry["skipped"]:
            print(f"{env_id}: skipped: {entry['skipped']}", file=out)
            continue
        changed += len(entry["changed"])
        print(f"{env_id}: {entry['checked']} episodes re-graded, {entry['agreed']} agree, "
              f"{len(entry['changed'])} changed", file=out)
    if result["summary_text"]:
        print(result["summary_text"], file=out)
    print(f"re-verified in {result['seconds']:.2f}s; details in {store.root / 'reverify.json'}", file=out)
    return 1 if changed else 0


def _rejudge(store: Any, args: argparse.Namespace, out: TextIO) -> int:
    """``--reverify DIR --rubric/--judge``: re-grade with a rubric; 1 when a grade changed or a judge still failed."""
    from agent_gym.errors import ConfigError
    from agent_gym.evaluation.rejudge import rejudge
    from agent_gym.judges import JudgeCriterion, Rubric
    from agent_gym.judges.specs import default_judge, import_rubric

    if not store.exists():
        print(f"agent-gym eval: --reverify: {store.root} holds no evaluation (no config.json)", file=sys.stderr)
        return 2
    try:
        rubric = import_rubric(args.rubric) if args.rubric else Rubric([JudgeCriterion("judge",
                                                                                       default_judge(args.judge))])
    except ConfigError as exc:
        print(f"agent-gym eval: {exc}", file=sys.stderr)
        return 2
    try:
        result = rejudge(store, rubric)
    finally:
        for judge in rubric.judges():
            judge.close()
    trouble = 0
    for env_id, entry in result["envs"].items():
        trouble += len(entry["changed"]) + entry["judge_errors"]
        print(f"{env_id}: {entry['checked']} episodes re-judged, {entry['agreed']} agree, {len(entry['changed'])} "
              f"changed, {entry['recovered']} recovered from JUDGE_ERROR, {entry['judge_errors']} judge errors",
              file=out)
    if result["summary_text"]:
        print(result["summary_text"], file=out)
    print(f"re-judged in {result['seconds']:.2f}s; details in {store.root / 'rejudge.json'}", file=out)
    return 1 if trouble else 0
