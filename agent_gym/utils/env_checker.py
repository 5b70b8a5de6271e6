"""The conformance checker of agent_gym environments: :func:`check_agent_env`.

Run it on an environment before registering or publishing it; the test suite runs it
over every registered id and ``agent-gym check ID`` runs it from the command line.
It goes beyond Gymnasium's ``check_env`` with what trainers and rollouts rely on.
The checks, by name (any of them can be skipped):

* ``docstring``: the env class documents itself with Gymnasium's sections
  (:data:`REQUIRED_SECTIONS`, as ``## Name`` headers) and its Arguments section names
  every constructor argument.
* ``gymnasium``: ``gymnasium.utils.env_checker.check_env`` with warnings as errors.
* ``seeding``: two ``reset(seed=s)`` give the same observation and info, the same
  action then gives the same step (deterministic envs), and seeds draw different tasks.
* ``pickle``: the env pickles before and during an episode and the copy behaves like
  the original (vector envs with ``spawn`` and Ray ship envs by pickling).
* ``sampled_actions``: episodes of ``action_space.sample()`` never raise, return valid
  steps, end within the step limit with an ``info["status"]``, and earn no outcome reward.
* ``random_actions``: adversarial model output (malformed and unknown tool calls, wrong
  arguments, huge and empty messages, truncated or failed ``PolicyOutput``) never raises,
  and a random ``<answer>`` earns no outcome reward.
* ``oracle``: ``env.unwrapped.oracle_action()`` solves the seeded tasks: the episode
  terminates without an error and earns the full outcome reward.
* ``close``: ``close()`` twice is safe, on a fresh env and during an episode.

Example:
    >>> from agent_gym.utils.env_checker import check_agent_env
    >>> report = check_agent_env("agent_gym/ToolUse-v0")  # doctest: +SKIP
    >>> print(report)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import pickle
import re
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from agent_gym.errors import ConfigError, EnvCheckError
from agent_gym.utils.env_probes import (
    constructor_arguments,
    docstring_sections,
    first_difference,
    random_actions,
    short,
)

__all__ = [
    "CHECKS",
    "RECOMMENDED_SECTIONS",
    "REQUIRED_SECTIONS",
    "CheckResult",
    "EnvCheckReport",
    "check_agent_env",
]

REQUIRED_SECTIONS: tuple[str, ...] = ("Action Space", "Observation Space", "Rewards", "Episode End", "Arguments")
"""Docstring sections every env class must have (``## Name`` headers, non-empty)."""

RECOMMENDED_SECTIONS: tuple[str, ...] = ("Description", "Starting State", "Version History")
"""The other sections of Gymnasium's env docstrings; a missing one is noted, not failed."""

_DEFAULT_EPISODE_LIMIT = 1000


class _Failed(Exception):
    """A check found a problem; the message says what and how to fix it."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: The check's name (a key of :data:`CHECKS`).
        status: ``"passed"``, ``"failed"`` or ``"skipped"``.
        detail: For a failure, what went wrong and what to change; otherwise notes (may be empty).
        seconds: Wall time of the check.
    """

    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """True when the check found a problem."""
        return self.status == "failed"


@dataclass(frozen=True)
class EnvCheckReport:
    """Every check's result for one environment.

    Attributes:
        env: The checked env's id (or class name when it has no spec).
        results: One result per check, in the order they ran.
    """

    env: str
    results: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.failures

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The failed checks."""
        return tuple(r for r in self.results if r.failed)

    def format(self) -> str:
        """One line per check (``ok``, ``FAIL``, ``skip``) with its detail, then a summary line."""
        labels = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}
        lines = []
        for result in self.results:
            line = f"{labels[result.status]}  {result.name:<16} {result.seconds:6.1f}s"
            lines.append(f"{line}  {result.detail}" if result.detail else line)
        passed = sum(r.status == "passed" for r in self.results)
        lines.append(f"{self.env}: {passed}/{len(self.results)} checks passed"
                     + (f", {len(self.failures)} failed" if self.failures else ""))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


@dataclass
class _Context:
    """What the checks share: the env under test and the checker's settings."""

    env: gym.Env
    name: str
    make_fresh: Callable[[], gym.Env]
    seeds: tuple[int, ...]
    episodes: int
    episode_limit: int
    deterministic: bool

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def oracle(self) -> Callable[[], Any] | None:
        oracle = getattr(self.unwrapped, "oracle_action", None)
        return oracle if callable(oracle) else None


# ----------------------------------------------------------------------------------------------- helpers


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown location"
    frame = frames[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


def _raised(call: str, exc: BaseException) -> str:
    return f"{call} raised {type(exc).__name__}: {short(str(exc), 160, raw=True)} (at {_where(exc)})"


def _step(ctx: _Context, env: gym.Env, action: Any, where: str, *, advice: str) -> tuple[Any, ...]:
    """``env.step(action)``, failing the check on an exception or a malformed result."""
    try:
        result = env.step(action)
    except Exception as exc:
        raise _Failed(f"{where}: {_raised(f'step({short(action)})', exc)}; {advice}") from exc
    if not isinstance(result, tuple) or len(result) != 5:
        raise _Failed(f"{where}: step() returned {short(result)}; expected (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = result
    if obs not in env.observation_space:
        raise _Failed(f"{where}: the observation {short(obs)} is not in observation_space {env.observation_space}")
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise _Failed(f"{where}: reward {reward!r} is a {type(reward).__name__}; expected a float")
    if not math.isfinite(float(reward)):
        raise _Failed(f"{where}: reward is {reward!r}; rewards must be finite")
    if not isinstance(terminated, (bool, np.bool_)) or not isinstance(truncated, (bool, np.bool_)):
        raise _Failed(f"{where}: terminated/truncated are {type(terminated).__name__}/{type(truncated).__name__}; "
                      "expected bool")
    if not isinstance(info, dict):
        raise _Failed(f"{where}: info is a {type(info).__name__}; expected a dict")
    for key in ("toolcall_reward", "res_reward"):
        if key not in info:
            raise _Failed(f"{where}: info has no {key!r}; every step's info carries toolcall_reward and res_reward")
    if "error" in info and not isinstance(info["error"], str):
        raise _Failed(f"{where}: info['error'] is {short(info['error'])}; expected a str")
    if (terminated or truncated) and "status" not in info:
        raise _Failed(f"{where}: the episode ended without info['status']; set it on the last step "
                      "(an EpisodeStatus such as ENV_DONE or MAX_STEPS)")
    return result


def _reset(env: gym.Env, seed: int | None, where: str) -> tuple[Any, dict[str, Any]]:
    try:
        return env.reset(seed=seed)
    except Exception as exc:
        raise _Failed(f"{where}: {_raised(f'reset(seed={seed})', exc)}") from exc


def _always(action: Any) -> Callable[[int], Any]:
    """A ``choose`` for :func:`_play` that gives ``action`` at every step."""
    return lambda t: action


def _play(ctx: _Context, env: gym.Env, seed: int, choose: Callable[[int], Any], *, label: str,
          advice: str) -> tuple[dict[str, Any], list[tuple[Any, ...]], list[Any]]:
    """One episode from ``reset(seed=seed)`` with ``choose(t)`` actions.

    Returns:
        The reset info, the step results and the actions.
    """
    _, info = _reset(env, seed, f"{label} (reset seed {seed})")
    steps, actions = [], []
    for t in range(ctx.episode_limit):
        action = choose(t)
        actions.append(action)
        result = _step(ctx, env, action, f"{label} (reset seed {seed}), step {t}", advice=advice)
        steps.append(result)
        if result[2] or result[3]:
            return info, steps, actions
    raise _Failed(f"{label} (reset seed {seed}) did not end after {ctx.episode_limit} steps; truncate at the "
                  "step limit (register max_episode_steps, or end the episode after max_steps messages)")


def _res_total(steps: Sequence[tuple[Any, ...]]) -> float:
    return float(sum(float(step[4].get("res_reward", 0.0)) for step in steps))


_NEVER_RAISE = ("model output must never raise: turn it into an error observation and info['error'] "
                "(raise only for failures outside the model, e.g. a server that is down)")


# ----------------------------------------------------------------------------------------------- checks


def _check_docstring(ctx: _Context) -> str:
    cls = type(ctx.unwrapped)
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        raise _Failed(f"{cls.__qualname__} has no docstring of its own; document it with the sections "
                      f"{', '.join(REQUIRED_SECTIONS)} as '## Name' headers (Gymnasium's layout)")
    sections = docstring_sections(doc)
    problems = []
    missing = [s for s in REQUIRED_SECTIONS if s not in sections]
    if missing:
        problems.append(f"the docstring of {cls.__qualname__} lacks the section(s) {', '.join(missing)}; "
                        f"add each as a '## {missing[0]}' header followed by its text")
    empty = [s for s in REQUIRED_SECTIONS if s in sections and not sections[s].strip()]
    if empty:
        problems.append(f"the section(s) {', '.join(empty)} of {cls.__qualname__}'s docstring are empty")
    if "Arguments" in sections:
        text = sections["Arguments"]
        undocumented = [a for a in constructor_arguments(cls) if not re.search(rf"\b{re.escape(a)}\b", text)]
        if undocumented:
            problems.append(f"the Arguments section of {cls.__qualname__} does not mention the constructor "
                            f"argument(s) {', '.join(undocumented)}; say what each does and its default")
    if problems:
        raise _Failed("; ".join(problems))
    absent = [s for s in RECOMMENDED_SECTIONS if s not in sections]
    return f"consider adding the section(s) {', '.join(absent)}" if absent else ""


def _check_gymnasium(ctx: _Context) -> str:
    env = ctx.unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            # Without a spec, check_env cannot make the other render modes and says so in a warning.
            check_env(env, skip_render_check=env.spec is None)
        except Exception as exc:
            raise _Failed(f"gymnasium's check_env (warnings as errors): {type(exc).__name__}: "
                          f"{short(str(exc), 300, raw=True)} (at {_where(exc)})") from exc
    return "" if env.spec is not None else "render modes not checked: the env has no spec (use gym.make)"


def _check_seeding(ctx: _Context) -> str:
    env = ctx.env
    oracle = ctx.oracle()
    for seed in ctx.seeds:
        first = _reset(env, seed, "seeding")
        second = _reset(env, seed, "seeding")
        diff = first_difference(first, second, "(obs, info)")
        if diff:
            raise _Failed(f"two reset(seed={seed}) calls differ at {diff}; draw every random choice from "
                          "self.np_random (super().reset(seed=seed) re-seeds it) and keep wall-clock values "
                          "and global counters out of obs and info")
        if not ctx.deterministic or oracle is None:
            continue
        action = oracle()
        one = _step(ctx, env, action, f"seeding (reset seed {seed})", advice=_NEVER_RAISE)
        _reset(env, seed, "seeding")
        two = _step(ctx, env, action, f"seeding (reset seed {seed})", advice=_NEVER_RAISE)
        diff = first_difference(one, two, "(obs, reward, terminated, truncated, info)")
        if diff:
            raise _Failed(f"the same action after reset(seed={seed}) gave different steps at {diff}; a step must "
                          "depend only on the seed and the actions (register the id with nondeterministic=True "
                          "if it depends on the outside world)")
    tasks = getattr(ctx.unwrapped, "tasks", None)
    if isinstance(tasks, Sequence) and len(tasks) > 1:
        observations = {repr(_reset(env, seed, "seeding")[0]) for seed in range(10)}
        if len(observations) == 1:
            raise _Failed(f"reset(seed=0..9) gave the same observation although the env has {len(tasks)} tasks; "
                          "draw the task with self.np_random")
    notes = []
    if not ctx.deterministic:
        notes.append("steps not compared (registered nondeterministic)")
    if oracle is None:
        notes.append("steps not compared (no oracle_action)")
    return "; ".join(notes)


def _check_pickle(ctx: _Context) -> str:
    env = ctx.env
    seed = ctx.seeds[0]
    clones: list[gym.Env] = []

    def clone(when: str) -> gym.Env:
        try:
            copy = pickle.loads(pickle.dumps(env))
        except Exception as exc:
            raise _Failed(f"{_raised(f'pickling the env {when}', exc)}; vector envs with 'spawn' and Ray ship "
                          "envs by pickling: keep locks, sockets, processes and sandboxes out of the pickled "
                          "state (__getstate__) and recreate them on first use") from exc
        clones.append(copy)
        return copy

    try:
        fresh = clone("before reset")
        diff = first_difference(_reset(fresh, seed, "pickle"), _reset(env, seed, "pickle"), "(obs, info)")
        if diff:
            raise _Failed(f"an unpickled copy resets differently from the original at {diff}")
        oracle = ctx.oracle()
        action = oracle() if oracle is not None else env.action_space.sample()
        _step(ctx, env, action, "pickle", advice=_NEVER_RAISE)
        running = clone("during an episode")
        original_messages = getattr(env.unwrapped, "messages", None)
        if original_messages is not None:
            diff = first_difference(getattr(running.unwrapped, "messages", None), original_messages, "messages")
            if diff:
                raise _Failed(f"a copy pickled during an episode lost its conversation at {diff}")
        if not ctx.deterministic:
            return "the copy's next step not compared (registered nondeterministic)"
        action = oracle() if oracle is not None else "<answer>checker</answer>"
        ours = _step(ctx, env, action, "pickle (original)", advice=_NEVER_RAISE)
        theirs = _step(ctx, running, action, "pickle (copy made during an episode)", advice=_NEVER_RAISE)
        diff = first_difference(theirs, ours, "(obs, reward, terminated, truncated, info)")
        if diff:
            raise _Failed(f"a copy pickled during an episode steps differently from the original at {diff}; "
                          "pickle the episode's whole state (task, turn counters, tool state)")
        return ""
    finally:
        for copy in clones:
            copy.close()


def _check_sampled_actions(ctx: _Context) -> str:
    env = ctx.env
    env.action_space.seed(ctx.seeds[0])
    lengths = []
    for episode in range(ctx.episodes):
        seed = ctx.seeds[0] + episode
        _, steps, _ = _play(ctx, env, seed, lambda t: env.action_space.sample(), label=f"sampled episode {episode}",
                         advice=_NEVER_RAISE)
        lengths.append(len(steps))
        earned = _res_total(steps)
        if earned != 0.0:
            raise _Failed(f"sampled episode {episode} (reset seed {seed}) of random text earned res_reward "
                          f"{earned:g}; the outcome reward must need a correct answer")
    return f"{ctx.episodes} episodes, {sum(lengths)} steps" if lengths else ""


def _check_random_actions(ctx: _Context) -> str:
    env = ctx.env
    rng = np.random.default_rng(ctx.seeds[0])
    seed = ctx.seeds[0]
    _, info = _reset(env, seed, "random actions")
    schemas = info.get("tools") or getattr(ctx.unwrapped, "tool_schemas", None) or []
    actions = random_actions(rng, schemas)
    done = False
    for i, (label, action, expect) in enumerate(actions):
        if done:
            seed += 1
            _reset(env, seed, "random actions")
        where = f"random action {i} ({label}, reset seed {seed})"
        _, _, terminated, truncated, info = _step(ctx, env, action, where, advice=_NEVER_RAISE)
        done = terminated or truncated
        if expect is not None and (not truncated or info.get("status") != expect):
            raise _Failed(f"{where}: expected the episode to end truncated with status {expect}, got "
                          f"terminated={terminated}, truncated={truncated}, status={info.get('status')!r}; "
                          "a PolicyOutput's finish_reason 'length' / 'prompt_truncation' / 'error' ends the "
                          "episode as TRUNCATION / PROMPT_TRUNCATION / POLICY_ERROR")
    for n in range(3):
        answer = env.action_space.sample()
        _, steps, _ = _play(ctx, env, seed + 1 + n, _always(f"<answer>{answer}</answer>"),
                         label=f"random answer {n}", advice=_NEVER_RAISE)
        earned = _res_total(steps)
        if earned != 0.0:
            raise _Failed(f"the random answer <answer>{short(answer)}</answer> (reset seed {seed + 1 + n}) earned "
                          f"res_reward {earned:g}; the outcome reward must need a correct answer")
    return f"{len(actions)} actions, 3 random answers"


def _check_oracle(ctx: _Context) -> str:
    oracle = ctx.oracle()
    if oracle is None:
        raise _Failed(f"{type(ctx.unwrapped).__qualname__} has no oracle_action(); give one that returns the next "
                      "assistant message of the task's reference solution (AgentEnv plays task['solution'])")
    rewards = getattr(ctx.unwrapped, "rewards", None)
    full = getattr(rewards, "correct", None)
    for seed in ctx.seeds:
        info, steps, actions = _play(ctx, ctx.env, seed, lambda t: oracle(), label="oracle episode",
                                     advice="the oracle's own message must not raise")
        task = info.get("task")
        name = f"oracle episode (reset seed {seed}" + (
            f", task {task.get('id')!r})" if isinstance(task, Mapping) else ")")
        for t, step in enumerate(steps):
            if step[4].get("error"):
                error = short(step[4]["error"], 200, raw=True)
                raise _Failed(f"{name}, step {t}: the oracle's message {short(actions[t])} caused the error "
                              f"{error}; fix the task's reference solution or the tool")
        *_, terminated, truncated, info = steps[-1]
        if truncated or not terminated:
            raise _Failed(f"{name} ended truncated (status {info.get('status')!r}) after {len(steps)} steps; the "
                          "reference solution must finish within max_steps and the registered max_episode_steps")
        earned = _res_total(steps)
        if full is not None and not math.isclose(earned, float(full), rel_tol=1e-6, abs_tol=1e-9):
            raise _Failed(f"{name} earned res_reward {earned:g}, not the full {float(full):g} (rewards.correct); "
                          "the reference solution or score_answer is wrong")
        if full is None and earned <= 0.0:
            raise _Failed(f"{name} earned res_reward {earned:g}; the oracle must solve the task")
    return f"{len(ctx.seeds)} seeded tasks solved"


def _check_close(ctx: _Context) -> str:
    with warnings.catch_warnings():
        # Gymnasium's env checker wrapper warns before re-raising what close() raised; report the exception.
        warnings.simplefilter("ignore")
        _close_twice(ctx)
    return ""


def _close_twice(ctx: _Context) -> None:
    for during in (False, True):
        label = "during an episode" if during else "before reset"
        env = ctx.make_fresh()
        try:
            if during:
                _reset(env, ctx.seeds[0], "close")
                _step(ctx, env, env.action_space.sample(), "close", advice=_NEVER_RAISE)
            env.close()
        except _Failed:
            raise
        except Exception as exc:
            raise _Failed(f"{_raised(f'close() {label}', exc)}") from exc
        try:
            env.close()
        except Exception as exc:
            raise _Failed(f"{_raised(f'a second close() {label}', exc)}; close() must be idempotent: release "
                          "each resource once and forget it") from exc


CHECKS: dict[str, Callable[[_Context], str]] = {
    "docstring": _check_docstring,
    "gymnasium": _check_gymnasium,
    "seeding": _check_seeding,
    "pickle": _check_pickle,
    "sampled_actions": _check_sampled_actions,
    "random_actions": _check_random_actions,
    "oracle": _check_oracle,
    "close": _check_close,
}
"""Check name -> check, in the order :func:`check_agent_env` runs them."""


# ----------------------------------------------------------------------------------------------- entry point


def _episode_limit(env: gym.Env) -> int:
    spec = env.spec
    if spec is not None and spec.max_episode_steps:
        return int(spec.max_episode_steps)
    max_steps = getattr(env.unwrapped, "max_steps", None)
    return int(max_steps) if isinstance(max_steps, int) and max_steps > 0 else _DEFAULT_EPISODE_LIMIT


def _fresh_maker(env: gym.Env, env_id: str | None, env_kwargs: Mapping[str, Any]) -> Callable[[], gym.Env]:
    if env_id is not None:
        return lambda: gym.make(env_id, **env_kwargs)
    if env.spec is not None:
        spec = env.spec
        return lambda: gym.make(spec)
    return lambda: pickle.loads(pickle.dumps(env))


def check_agent_env(
    env_or_id: gym.Env | str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    episodes: int = 10,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> EnvCheckReport:
    """Check that an agent_gym environment does what trainers, rollouts and Gymnasium expect.

    Runs every check of :data:`CHECKS` (see the module docstring) and collects the
    results; one failing check does not stop the others. Failures say what went wrong,
    where (the step, the seed, the file and line of an exception) and what to change.

    Args:
        env_or_id: A registered id (made with ``gym.make(id, **env_kwargs)`` and closed
            at the end) or an env instance (wrapped or not; it is reset and stepped, not
            closed; ``close`` is checked on fresh copies).
        env_kwargs: Keyword arguments for ``gym.make`` (ids only).
        seeds: Reset seeds of the seeding, pickle and oracle checks (the oracle solves
            the task of each seed); sampled episodes start at ``seeds[0]``.
        episodes: Episodes of sampled actions.
        skip: Names of checks not to run (reported as skipped).
        raise_on_failure: Raise :class:`~agent_gym.errors.EnvCheckError` when a check
            failed (the default); False returns the report either way.

    Returns:
        The report of every check.

    Raises:
        EnvCheckError: If a check failed and ``raise_on_failure`` is set.
        TypeError: For arguments of the wrong type.
        agent_gym.errors.ConfigError: For an unknown check name in ``skip``, empty
            ``seeds`` or ``episodes`` < 0.
    """
    skip = {skip} if isinstance(skip, str) else set(skip)
    unknown = sorted(skip - set(CHECKS))
    if unknown:
        raise ConfigError(f"skip: expected names among {', '.join(CHECKS)}, got {unknown[0]!r}")
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ConfigError(f"seeds: expected a non-empty sequence of ints >= 0, got {seeds!r}")
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 0:
        raise ConfigError(f"episodes: expected an int >= 0, got {episodes!r}")
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs: expected a mapping or None, got {type(env_kwargs).__name__}")
    if isinstance(env_or_id, str):
        env_id: str | None = env_or_id
        env = gym.make(env_or_id, **(env_kwargs or {}))
    elif isinstance(env_or_id, gym.Env):
        if env_kwargs:
            raise TypeError("env_kwargs: only for an env id; the env instance is already made")
        env_id, env = None, env_or_id
    else:
        raise TypeError(f"env_or_id: expected a gymnasium.Env or a registered id, got {type(env_or_id).__name__}")

    spec = env.spec
    ctx = _Context(
        env=env,
        name=spec.id if spec is not None else type(env.unwrapped).__qualname__,
        make_fresh=_fresh_maker(env, env_id, env_kwargs or {}),
        seeds=seeds,
        episodes=episodes,
        episode_limit=_episode_limit(env),
        deterministic=spec is None or not spec.nondeterministic,
    )
    results = []
    try:
        for name, check in CHECKS.items():
            if name in skip:
                results.append(CheckResult(name, "skipped"))
                continue
            start = time.perf_counter()
            try:
                note = check(ctx)
            except _Failed as failure:
                results.append(CheckResult(name, "failed", str(failure), time.perf_counter() - start))
            except Exception as exc:
                results.append(CheckResult(name, "failed", f"unexpected {_raised('the check', exc)}",
                                           time.perf_counter() - start))
            else:
                results.append(CheckResult(name, "passed", note, time.perf_counter() - start))
    finally:
        if env_id is not None:
            env.close()
    report = EnvCheckReport(ctx.name, tuple(results))
    if raise_on_failure and not report.ok:
        lines = [f"{ctx.name} failed {len(report.failures)} check(s):"]
        lines += [f"  {r.name}: {r.detail}" for r in report.failures]
        raise EnvCheckError("\n".join(lines), report=report)
    return report
