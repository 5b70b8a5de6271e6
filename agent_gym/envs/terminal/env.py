"""``TerminalEnv`` (``agent_gym/Terminal-v0``): solve tasks in a sandboxed shell, graded by tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from agent_gym.checks import check_float, check_int
from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.sandboxed import SandboxedEnv
from agent_gym.envs.terminal.baseline import BASELINES, Baseline, baseline_key, judge
from agent_gym.envs.terminal.grading import REWARD_MODES, TestReport, grade_test_run
from agent_gym.envs.terminal.loader import builtin_tasks, find_task_dirs, load_task
from agent_gym.envs.terminal.runner import run_tests_on
from agent_gym.envs.terminal.sandboxes import BACKENDS, SandboxSpec, open_task_sandbox, select_backend
from agent_gym.errors import ConfigError, SandboxError
from agent_gym.parsers import ResponseParser
from agent_gym.sandbox import LocalSandbox, SandboxLimits
from agent_gym.sandbox.local import sandbox_base_env
from agent_gym.sandbox.rootfs import writable_root_unavailable_reason
from agent_gym.tools import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIME_LIMIT, Tool
from agent_gym.types import EpisodeStatus

__all__ = ["SOLUTION_PATH", "TEST_ENV", "TerminalEnv", "parse_pytest_summary"]

_SOLUTION_END = "__AGENT_GYM_SOLUTION_END__"
SOLUTION_PATH = "/tmp/solution.sh"
"""Where the reference solution's ``solution.sh`` is written and run from as a file (``bash`` reads
the file, so a command in it that reads standard input cannot swallow the rest of the script)."""

TEST_ENV: dict[str, str] = {"TEST_DIR": "/tests", "HOME": "/tmp", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""Environment of the test command (on top of the sandbox's, never the agent's shell's). The
pytest plugins that happen to be installed on the host are not loaded (a task's tests must not
depend on them, as in a task image with a plain pytest; they also cost seconds per grading); a
task that needs one names it (``pytest -p NAME``)."""


def parse_pytest_summary(output: str) -> tuple[int, int]:
    """``(passed, total)`` from the short test summary of ``pytest -rA``, as Terminal-Bench counts them.

    Read line by line (:func:`~agent_gym.envs.terminal.grading.parse_pytest`): ``SKIPPED`` and
    ``XFAIL`` pass, ``XPASS`` fails; ``(0, 0)`` without a summary.
    """
    report = grade_test_run(output, 0, False, "pytest")
    return report.passed, report.total


class TerminalEnv(SandboxedEnv):
    """Do a task in a Linux shell; the task's tests decide the reward.

    ## Description
    Each episode gets its own sandbox (:class:`~agent_gym.sandbox.LocalSandbox`:
    bubblewrap namespaces, no network, a writable copy-on-write root where the host allows
    it, a persistent bash session in the task's ``WORKDIR``, ``/app`` by default), set up from
    the task's Dockerfile as a build would (see ``docs/terminal_bench.md``). The model calls
    ``bash(command)`` and ``submit()``; after the episode every process of the sandbox is
    stopped, the task's tests are copied to ``/tests`` and run in a fresh process of the same
    sandbox, never in the agent's shell (also for ``run_tests_in_same_shell`` tasks).

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``) with hermes
    ``<tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>`` blocks,
    or a ``submit`` call (an ``<answer>`` also submits).

    ## Observation Space
    The conversation so far (tuple of ``{"role", "content"}`` dicts); each ``bash`` call
    comes back as a ``tool`` message with the output (stdout and stderr interleaved, cut
    at ``max_output_bytes`` with a marker) and ``[exit code: N]``.

    ## Rewards
    ``res_reward`` = Terminal-Bench's verdict on the test run, read by the task's
    ``parser_name`` (:mod:`~agent_gym.envs.terminal.grading`): 1 when every test passed, else
    0 (``reward_mode="resolved"``, the default), or the fraction of tests that passed
    (``reward_mode="fraction"``); Harbor tasks: the reward written to
    ``/logs/verifier/reward.txt`` (1 or not under ``resolved``). On the local sandbox, pytest
    reports its results to the grader on a private channel with a key of the run
    (:mod:`~agent_gym.envs.terminal.verdict`): what the agent's programs print during the tests
    does not count. Given when the episode ends (also at ``max_steps``; not when the policy
    output was cut short or failed); the text of an ``<answer>`` earns nothing by itself. A test
    run that grades nothing (timeout, runner could not run, unreadable output, no tests) is
    judged against the task's initial state (:meth:`baseline`): if the runner grades the
    initial state, the failure is the agent's (outcome ``invalid``, reward 0, ENV_DONE);
    otherwise it earns nothing and ends the episode ENV_ERROR (see :meth:`grade_episode`).
    ``toolcall_reward`` shapes tool use as in
    :class:`~agent_gym.env.core.AgentEnv`. ``info["tests"]`` has ``outcome``, ``passed``,
    ``total``, ``resolved``, ``results``, ``exit_code`` and ``reason`` at the end.

    ## Starting State
    A task drawn with the env's seeded RNG (or ``options["task"]`` / ``options["task_index"]``) in a
    fresh sandbox holding the task's files, its setup commands run. The observation is the system
    message and the task's instruction as a user message; ``info`` has ``task``, ``tools`` (the
    ``bash`` and ``submit`` schemas; ``[]`` when ``tools_in_prompt``), ``tools_in_prompt`` and
    ``episode_id``.

    ## Episode End
    Terminated (ENV_DONE) on ``submit()`` (``end_reason`` ``"submit"``; calls after it in the
    same message are not run) or an ``<answer>`` (``"answer"``); truncated (MAX_STEPS) after
    ``max_steps`` messages (default 30, the only step limit), or TRUNCATION / PROMPT_TRUNCATION
    / POLICY_ERROR for a policy output cut short or failed.

    ## Arguments
    * ``tasks``: task directories (Terminal-Bench or Harbor layout, or directories holding
      them) or task dicts from :func:`~agent_gym.envs.terminal.loader.load_task`; default: the
      shipped tasks.
    * ``command_timeout``: seconds per ``bash`` call (default 30; capped by the task's agent timeout).
    * ``limits``: :class:`~agent_gym.sandbox.SandboxLimits` of the sandbox.
    * ``backend``: ``"auto"`` (default: :class:`~agent_gym.sandbox.DockerSandbox` for a task
      that names an image, :class:`~agent_gym.sandbox.LocalSandbox` otherwise), ``"local"`` or
      ``"docker"`` (see :func:`select_backend`). Docker needs ``pip install 'agent-gym[terminal]'``.
    * ``docker_image``: image for tasks without one under ``backend="docker"`` (default: the
      task Dockerfile's ``FROM``); the Dockerfile's files and ``RUN`` steps are applied to it.
    * ``docker_pool_size``: pre-started containers kept per image (default 2).
    * ``reward_mode``: ``"resolved"`` (default: 1 only when every test passed) or ``"fraction"``.
    * ``writable_root``: give the local sandbox its copy-on-write root and memory cgroup (default:
      where the host allows it, see :func:`~agent_gym.sandbox.rootfs.writable_root_unavailable_reason`);
      without it a ``COPY``/``RUN`` that writes outside the workspace folders fails at reset.
    * ``sandbox_factory``: callable ``(task, env_vars) -> Sandbox`` replacing the backends.
    * ``tools``: not accepted (:class:`~agent_gym.errors.ConfigError`): the tools are ``bash``
      and ``submit`` bound to each episode's sandbox (see :attr:`tools_not_accepted`).
    * ``max_steps`` (default 30), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser`` (the model's formats by vLLM's names),
      ``tool_time_limit``, ``max_tool_output_chars``, ``max_tool_calls_per_step``, ``render_mode``:
      see :class:`~agent_gym.env.core.AgentEnv`.

    The ``bash`` tool enforces its own timeout inside the sandbox (killing the command's
    processes), so the tool layer runs it without a time limit of its own.

    ## Version History
    * v0: graded as Terminal-Bench grades (``parser_name``, resolved-only reward, Dockerfile
      semantics, ``solution.sh`` run as a file; ungraded runs end ENV_ERROR); ``tools=`` raises
      instead of being ignored; one step limit (``max_steps``); tool calls after ``submit`` are
      refused; ``info["end_reason"]``; tests never run in the agent's shell, pytest's results come
      on a private channel, a runner the agent broke scores 0 (``invalid``); first version.
    """

    HOST_PATH_TASK_KEYS = ("path", "dockerfile", "compose")
    """Task keys read as host paths: ``agent-gym serve-env`` refuses them in a client's task."""

    default_system_prompt = (
        "You are an expert Linux user working in a bash shell inside a sandbox with no network. "
        "You start in the task's working directory (usually /app). Run shell commands with the bash tool; "
        "the shell keeps its state (directory, variables, functions) between calls, and commands get no input "
        "on stdin. "
        "When the task is done, call submit()."
    )

    tools_not_accepted = ("its tools are bash and submit, bound to each episode's sandbox; pass sandbox_factory= "
                          "for another sandbox, or subclass TerminalEnv and override episode_tools")

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any] | str | os.PathLike[str]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        command_timeout: float = 30.0,
        limits: SandboxLimits | None = None,
        sandbox_factory: Callable[[Mapping[str, Any], Mapping[str, str]], Any] | None = None,
        backend: str = "auto",
        docker_image: str | None = None,
        docker_pool_size: int = 2,
        reward_mode: str = "resolved",
        writable_root: bool | None = None,
        max_steps: int = 30,
        tools_in_prompt: bool = False,
        system_prompt: str | None = None,
        rewards: RewardConfig | Mapping[str, float] | None = None,
        parser: ResponseParser | str | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tool_time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_tool_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_tool_calls_per_step: int = 8,
        render_mode: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode: expected one of {REWARD_MODES}, got {reward_mode!r}")
        self.reward_mode = reward_mode
        if writable_root is None:
            writable_root = writable_root_unavailable_reason() is None
        self.writable_root = bool(writable_root)
        self.docker_image = docker_image
        self.docker_pool_size = check_int("docker_pool_size", docker_pool_size, low=0)
        self.command_timeout = check_float("command_timeout", command_timeout, low=0.0, low_open=True)
        if limits is not None and not isinstance(limits, SandboxLimits):
            raise TypeError(f"limits: expected SandboxLimits or None, got {type(limits).__name__}")
        self._limits_given = limits is not None
        self.limits = limits or SandboxLimits(output_bytes=8000)
        if sandbox_factory is not None and not callable(sandbox_factory):
            raise TypeError(f"sandbox_factory: expected a callable or None, got {type(sandbox_factory).__name__}")
        self.sandbox_factory = sandbox_factory
        self.test_env = dict(TEST_ENV)
        self.last_test_output = ""
        self._graded: tuple[int, int, float] | None = None
        self.last_report: TestReport | None = None
        checked_later = cast("Sequence[Mapping[str, Any]] | None", tasks)  # validate_tasks loads the paths
        super().__init__(checked_later, tools, max_steps=max_steps, tools_in_prompt=tools_in_prompt,
                         system_prompt=system_prompt, rewards=rewards, parser=parser,
                         tool_parser=tool_parser, reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)

    # ------------------------------------------------------------------ tasks

    def default_tasks(self) -> Sequence[Mapping[str, Any]]:
        """The shipped tasks (see :mod:`agent_gym.envs.terminal.loader`)."""
        return builtin_tasks()

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Load task directories given as paths, then check every task."""
        loaded: list[Any] = []
        for item in tasks:
            if isinstance(item, (str, os.PathLike)):
                loaded.extend(load_task(p) for p in find_task_dirs(item))
            else:
                loaded.append(item)
        checked = super().validate_tasks(loaded)
        for i, task in enumerate(checked):
            for key in ("solution_script", "test_files", "test_command"):
                if key not in task:
                    raise ValueError(f"tasks[{i}]: expected key {key!r} (load tasks with load_task), "
                                     f"got keys {sorted(task)}")
            if "solution" not in task:
                task["solution"] = [
                    [{"name": "bash", "arguments": {"command": self._solution_command(task["solution_script"])}}],
                    [{"name": "submit", "arguments": {}}],
                ]
        return checked

    @staticmethod
    def _solution_command(script: str) -> str:
        """Write ``solution.sh`` to :data:`SOLUTION_PATH` and run it as a file, as Terminal-Bench does."""
        end = _SOLUTION_END
        while end in script:
            end += "_"
        return f"cat > {SOLUTION_PATH} <<'{end}'\n{script.rstrip()}\n{end}\nbash {SOLUTION_PATH}"

    # ------------------------------------------------------------------ episodes

    def episode_tools(self, task: dict[str, Any]) -> Sequence[Tool | Callable[..., Any]] | None:
        """Start the episode's sandbox, lay out the task's files and return ``bash`` and ``submit``."""
        self._graded = None
        self.last_report = None
        return super().episode_tools(task)

    def open_sandbox(self, task: Mapping[str, Any]) -> Any:
        """A sandbox of :meth:`sandbox_spec` with the task's files and setup (see ``docs/terminal_bench.md``)."""
        return open_task_sandbox(task, self.sandbox_spec())

    def command_time_limit(self) -> float:
        """``command_timeout``, capped by the task's agent timeout."""
        return min(self.command_timeout, float((self.task or {}).get("agent_timeout") or self.command_timeout))

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """0: an ``<answer>`` submits, and the tests grade the sandbox (see :meth:`grade_episode`)."""
        return 0.0

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """Run the tests once the episode ended by the model (submit, answer) or by ``max_steps``.

        Adds ``info["tests"]`` (``outcome``, ``passed``, ``total``, ``resolved``, ``reason``,
        ``exit_code``, ``results``; see :class:`~agent_gym.envs.terminal.grading.TestReport`). A
        run that did not grade the work (timeout, runner could not run, unreadable output, no
        tests) earns nothing and ends the episode ENV_ERROR (:meth:`Grade.infra_failure
        <agent_gym.env.grade.Grade.infra_failure>`), never a wrong answer, unless the agent broke a
        runner that grades the task's initial state (outcome ``invalid``: 0). ``info["end_reason"]``
        then names the outcome (``"tests_timeout"``, ``"tests_could_not_run"``,
        ``"tests_parse_error"``, ``"tests_no_tests"``), so a trainer masks the episode
        (:data:`~agent_gym.integrations.contract.INFRA_FAILURE_STATUSES`) instead of learning from
        it. A policy output cut short or failed is not graded.
        """
        if status not in (EpisodeStatus.ENV_DONE, EpisodeStatus.MAX_STEPS):
            return Grade.ungraded()
        passed, total, score = self._grade()
        report = self.last_report
        info["tests"] = report.as_info() if report is not None else {"passed": passed, "total": total}
        if report is not None and not report.scored:
            return Grade.infra_failure(f"tests_{report.outcome}")
        return Grade.scored(score)

    def _grade(self) -> tuple[int, int, float]:
        """Grade once per episode (see :meth:`run_tests`) and end the agent's turn."""
        if self._graded is None:
            self.submitted = True
            self._graded = self.run_tests()
        return self._graded

    def run_tests(self) -> tuple[int, int, float]:
        """Run the task's tests now on the sandbox's current state: ``(passed, total, score)``.

        Every process of the sandbox is stopped (files stay), the task's test files are copied
        to a fresh ``/tests`` (and ``/logs``), and the test command runs in a fresh process with
        :meth:`test_environment` in the task's working directory, never in the agent's shell
        (:func:`~agent_gym.envs.terminal.runner.run_tests_on`). pytest's own report comes back on
        the local sandbox's private channel (:mod:`~agent_gym.envs.terminal.verdict`); otherwise
        the output is read by the task's ``parser_name``. A run that did not grade is judged
        against the task's initial state (:meth:`baseline`): the agent's doing scores 0
        (``invalid``), the runner's own failure is not graded
        (:func:`~agent_gym.envs.terminal.baseline.judge`). The report is kept in :attr:`last_report`
        and the output in ``last_test_output``; ``score`` is the reward of ``reward_mode`` (0 when
        the run graded nothing). The episode goes on (the next ``bash`` call starts a new shell
        with the saved state); :meth:`grade_episode` calls this once when the episode ends.
        """
        task = self.task or {}
        sandbox = self.sandbox
        self.last_test_output = ""
        self.last_report = None
        if sandbox is None:
            return (0, 0, 0.0)
        run = run_tests_on(sandbox, task, self.test_environment(sandbox))
        self.last_test_output = run.output
        report = judge(run, lambda: self.baseline(task), float(task.get("test_timeout", 60.0)))
        self.last_report = report
        score = report.score(self.reward_mode)
        return (report.passed, report.total, 0.0 if score is None else score)

    def test_environment(self, sandbox: Any) -> dict[str, str]:
        """The test command's variables: :attr:`test_env`, with the local sandbox's own ``PATH`` first.

        The task's ``PATH`` entries follow the sandbox's (``/usr/bin``, the Python it runs), so
        a program the agent wrote into a directory of the task's ``PATH`` cannot stand in for
        ``python3`` or ``bash``; a ``PATH`` in :attr:`test_env` is used as it is.
        """
        env = dict(self.test_env)
        if "PATH" not in env and isinstance(sandbox, LocalSandbox):
            own = sandbox_base_env()["PATH"].split(":") + str(sandbox.env.get("PATH", "")).split(":")
            env["PATH"] = ":".join(dict.fromkeys(p for p in own if p))
        return env

    def baseline(self, task: Mapping[str, Any]) -> Baseline | None:
        """What the task's test runner gives on its initial state: a fresh sandbox of the task, tested untouched.

        Computed once per task and process (:data:`~agent_gym.envs.terminal.baseline.BASELINES`),
        only when a run did not grade by itself; None when no sandbox could be opened for it.
        """
        spec = self.sandbox_spec()
        factory = spec.sandbox_factory
        where = ("factory", id(factory)) if factory is not None else (select_backend(task, spec.backend),
                                                                       spec.docker_image, spec.writable_root)
        key = baseline_key(task, where, spec.limits, sorted(self.test_env.items()))
        return BASELINES.get(key, lambda: self._probe(task, spec))

    def _probe(self, task: Mapping[str, Any], spec: SandboxSpec) -> Baseline | None:
        try:
            sandbox = open_task_sandbox(task, spec)
        except (SandboxError, ConfigError):
            return None
        try:
            return Baseline.of(run_tests_on(sandbox, task, self.test_environment(sandbox)))
        finally:
            sandbox.close()

    def sandbox_spec(self) -> SandboxSpec:
        """How this env opens its sandboxes (from its current settings)."""
        return SandboxSpec(backend=self.backend, limits=self.limits, limits_given=self._limits_given,
                           command_timeout=self.command_timeout, docker_image=self.docker_image,
                           docker_pool_size=self.docker_pool_size, writable_root=self.writable_root,
                           sandbox_factory=self.sandbox_factory)
