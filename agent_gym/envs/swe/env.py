"""``SWEEnv`` (``agent_gym/SWE-v0``): repair a repository; the edit is captured as a patch and graded apart."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.checks import check_float, check_int
from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.sandboxed import SandboxedEnv
from agent_gym.envs.swe.editor import FileEditor
from agent_gym.envs.swe.grading import DEFAULT_MAX_PATCH_BYTES, REWARD_MODES, SWEReport, grade_patch
from agent_gym.envs.swe.repo import Snapshot, snapshot_for
from agent_gym.envs.swe.runs import GIT_ENV
from agent_gym.envs.swe.tasks import SPLITS, normalize_task, shipped_tasks
from agent_gym.errors import SandboxError
from agent_gym.parsers import ResponseParser
from agent_gym.sandbox import LocalSandbox, SandboxLimits
from agent_gym.sandbox.cgroup import cgroup_unavailable_reason
from agent_gym.tools import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIME_LIMIT, Tool, as_tool
from agent_gym.types import EpisodeStatus

__all__ = ["BACKENDS", "REPO_DIR", "SWEEnv", "capture_patch", "hidden_package_paths", "oracle_solution",
           "package_data_exposed"]

BACKENDS = ("auto", "local", "docker")
"""Sandbox backends: ``auto`` runs tasks that name an ``image`` in Docker and the others locally."""

REPO_DIR = "/app"
"""Where the repository is in the sandbox (the shell's working directory)."""

_PATCH_FILE = "/tmp/.agent_gym_patch.diff"


def package_data_exposed() -> str | None:
    """Why a sandbox that shows the Python installation could read the shipped libraries and task file.

    The local sandbox shows ``/usr`` and the running Python's installation read-only; a regular
    (not editable) install of agent_gym lies there, and with it the clean sources and the gold patches.
    The local sandbox of SWE-v0 hides them (:func:`hidden_package_paths`); a sandbox of your own
    (``sandbox_factory``) must too when this returns a reason. None: they do not lie there.
    """
    here = Path(__file__).resolve()
    roots = {"/usr", sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(os.path.realpath(sys.executable)).parent.parent)}
    for root in sorted(roots):
        real = Path(os.path.realpath(root))
        if str(real) not in ("/", "") and (real == here or real in here.parents):
            return (f"agent_gym is installed under {real}: a sandbox that shows the Python installation lets an agent "
                    "read the shipped libraries' clean sources and the task file's gold patches unless it hides "
                    "hidden_package_paths()")
    return None


def hidden_package_paths() -> tuple[str, ...]:
    """What a local sandbox of SWE-v0 hides: this package's shipped libraries and task files.

    Where agent_gym is installed under the Python prefix (a regular install), the local sandbox
    shows them read-only with the rest of the Python installation; hidden, the clean sources and
    the gold patches cannot be read by the agent (see :func:`package_data_exposed`).
    """
    here = Path(__file__).resolve().parent
    return tuple(str(here / name) for name in ("data", "libraries") if (here / name).exists())


def oracle_solution(gold_patch: str) -> list[list[dict[str, Any]]]:
    """The oracle's turns: apply the gold patch with ``git apply`` in the shell, then ``submit()``."""
    end = "AGENT_GYM_GOLD_PATCH"
    while end in gold_patch:
        end += "_"
    body = gold_patch if gold_patch.endswith("\n") else gold_patch + "\n"
    command = f"cd {REPO_DIR} && git apply --binary --whitespace=nowarn <<'{end}'\n{body}{end}"
    return [[{"name": "bash", "arguments": {"command": command}}], [{"name": "submit", "arguments": {}}]]


def capture_patch(sandbox: Any, base_commit: str, exclude: Sequence[str] = (), limit: int = DEFAULT_MAX_PATCH_BYTES
                  ) -> tuple[str, int]:
    """``(patch, size in bytes)`` of the repository's changes since ``base_commit``, new files included.

    Untracked files are marked with ``git add -N`` and the working tree is diffed against the
    base commit (binary-safe: ``--binary``), whatever the agent did to the index or ``HEAD``;
    ``exclude`` patterns are left out. A patch over ``limit`` comes back empty with its size.

    Raises:
        SandboxError: When git fails (e.g. the agent removed ``.git``).
    """
    excludes = " ".join(shlex.quote(f":(exclude){p}") for p in exclude)
    options = ("-c core.quotePath=true -c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.external= "
               "-c diff.relative=false -c core.fsmonitor=false -c core.autocrlf=false")
    command = (f"cd {REPO_DIR} && git {options} add -N --ignore-errors -- . {excludes} >/dev/null 2>&1; "
               f"git {options} diff --binary --no-color --no-ext-diff --no-textconv --full-index --no-renames "
               f"{shlex.quote(base_commit)} -- . {excludes} > {_PATCH_FILE}; "
               f"status=$?; stat -c %s {_PATCH_FILE}; exit $status")
    result = sandbox.exec(command, timeout=120, env=GIT_ENV)
    if not result.ok:
        raise SandboxError(f"git diff failed: {result.output.strip()[-300:]}")
    size = int((result.output.strip().splitlines() or ["0"])[-1])
    if size > limit:
        return "", size
    data = sandbox.read_file(_PATCH_FILE) if size else b""
    return data.decode("utf-8", "surrogateescape"), size


class SWEEnv(SandboxedEnv):
    """Fix a bug in a repository; the hidden tests of the task grade the patch in a clean sandbox.

    ## Description
    Each episode gets a sandbox (:class:`~agent_gym.sandbox.LocalSandbox`: no network) holding a
    git repository in ``/app`` at the task's base commit: one commit, no later history, no
    reflog, no remote and none of the hidden tests. The model explores and edits with ``bash``,
    ``str_replace_editor`` and ends with ``submit()``. The changes are captured as a patch
    (:func:`capture_patch`) after every process of the episode's sandbox was stopped, and graded in
    fresh sandboxes by :func:`~agent_gym.envs.swe.grading.grade_patch`: the tests run once per task
    on the unpatched base (cached), the patch is checked against the grading policy (test files and
    test configuration it touches are dropped; compiled files, start-up hooks, attribute files and
    shadowing modules are rejected), applied to the clean base with the task's test patch, and the
    tests run in a guarded process whose verdict the patch's code cannot write; SWE-bench's rule
    decides (see docs/swe.md).

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``) with hermes ``<tool_call>`` blocks of
    ``bash(command)``, ``str_replace_editor(command, path, ...)`` (SWE-agent's names: ``view`` with
    ``view_range``, ``create`` with ``file_text``, ``str_replace`` with ``old_str``/``new_str``,
    ``insert`` with ``insert_line``/``new_str``, ``undo_edit``) and ``submit()`` (an ``<answer>``
    also submits).

    ## Observation Space
    The conversation so far (tuple of ``{"role", "content"}`` dicts); tool results come back as
    ``tool`` messages (``bash``: output and ``[exit code: N]``).

    ## Rewards
    ``res_reward`` = ``rewards.correct`` times 1 when the task is resolved (every FAIL_TO_PASS and
    every PASS_TO_PASS test passes), else 0; ``reward_mode="f2p_fraction"`` gives the fraction of
    FAIL_TO_PASS tests passing when no PASS_TO_PASS test broke (named partial credit). Given when
    the episode ends by ``submit``, an ``<answer>`` or ``max_steps``. ``info["swe"]`` then has
    ``outcome``, ``resolved``, ``reason``, ``apply`` (method, dropped files, policy), ``fail_to_pass`` /
    ``pass_to_pass`` (per test), ``f2p_fraction``, ``p2p_fraction``, ``results``, ``exit_code``,
    ``seconds``, ``base`` (the base run), ``violations`` and ``patch_bytes``. A grading that failed
    for reasons of the task or the machine (``outcome == "error"``: the tests do not run on the
    base, a grading sandbox did not start) earns nothing and ends the episode ENV_ERROR
    (``end_reason == "grading_error"``), never a wrong answer; a failure of the run that the base
    did not have is the patch's (0).

    ## Starting State
    A task drawn with the env's seeded RNG (or ``options["task"]`` / ``options["task_index"]``);
    the observation is the system message and the problem statement.

    ## Episode End
    Terminated (ENV_DONE) on ``submit()`` or an ``<answer>``; truncated (MAX_STEPS) after
    ``max_steps`` messages (default 50), or for a policy output cut short or failed (not graded).

    ## Arguments
    * ``tasks``: task dicts (SWE-bench or SWE-smith instances, or this package's format; see
      :mod:`agent_gym.envs.swe.tasks`); default: the shipped tasks of ``split``.
    * ``split``: ``"train"``, ``"test"`` or None (all shipped tasks; default).
    * ``repos``: folder of local repositories (or one repository) for SWE-bench instances.
    * ``command_timeout``: seconds per ``bash`` call (default 30).
    * ``limits`` / ``grading_limits``: :class:`~agent_gym.sandbox.SandboxLimits` of the agent's and
      the grader's sandboxes.
    * ``grading_timeout``: seconds for the test run of the grading (default 120).
    * ``reward_mode``: ``"resolved"`` (default) or ``"f2p_fraction"``.
    * ``max_patch_bytes``: a bigger patch is not applied and scores 0 (default 1 MiB).
    * ``backend``: ``"auto"`` (default: :class:`~agent_gym.sandbox.DockerSandbox` for a task that names an
      ``image``, the local bubblewrap sandbox otherwise), ``"local"`` or ``"docker"``. The image needs
      ``git``, ``tar``, ``python3`` and pytest; Docker needs ``pip install 'agent-gym[terminal]'``.
    * ``docker_image``: the image of tasks without one under ``backend="docker"``.
    * ``docker_pool_size``: pre-started containers kept per image and limits (default 2).
    * ``sandbox_factory``: callable ``(task, role) -> Sandbox`` (``role``: ``"agent"`` or
      ``"grader"``) replacing the local backend.
    * ``tools``: not accepted (:class:`~agent_gym.errors.ConfigError`): the tools are bound to the
      episode's sandbox.
    * ``max_steps`` (default 50), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser`` (the model's formats by vLLM's names), ``tool_time_limit``,
      ``max_tool_output_chars``, ``max_tool_calls_per_step``, ``render_mode``: see :class:`~agent_gym.AgentEnv`.

    ## Version History
    * v0: first version.
    """

    HOST_PATH_TASK_KEYS = ("repo_path", "dir", "repo", "source.repo_path", "source.dir")
    """Task keys read as host paths: ``agent-gym serve-env`` refuses them in a client's task."""

    default_system_prompt = (
        "You are a software engineer fixing a bug in the git repository at /app, in a sandbox with no network. "
        "Use the bash tool to run commands (the shell keeps its state) and str_replace_editor to view and edit "
        "files (absolute paths). Find the cause, change the source code (not the tests), check your fix, then call "
        "submit(). Your changes to the repository are graded by tests."
    )

    tools_not_accepted = ("its tools are bash, str_replace_editor and submit, bound to each episode's sandbox; "
                          "pass sandbox_factory= for another sandbox")

    episode_handles = ("sandbox", "editor")

    bash_description = ("Run a command in the persistent bash shell of the sandbox (working directory /app).\n\n"
                        "Returns: The output (stdout and stderr) and the exit code.")

    submit_description = ("Submit the changes to the repository for grading; this ends the episode.\n\n"
                          "Returns: A confirmation.")

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        split: str | None = None,
        repos: str | os.PathLike[str] | None = None,
        command_timeout: float = 30.0,
        limits: SandboxLimits | None = None,
        grading_limits: SandboxLimits | None = None,
        grading_timeout: float = 120.0,
        reward_mode: str = "resolved",
        max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES,
        backend: str = "auto",
        docker_image: str | None = None,
        docker_pool_size: int = 2,
        sandbox_factory: Callable[[Mapping[str, Any], str], Any] | None = None,
        max_steps: int = 50,
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
        if split is not None and split not in SPLITS:
            raise ValueError(f"split: expected one of {sorted(SPLITS)} or None, got {split!r}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode: expected one of {REWARD_MODES}, got {reward_mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "docker" and docker_image is None:
            raise ValueError("backend='docker' needs docker_image= for tasks that name no image")
        for name, value in (("limits", limits), ("grading_limits", grading_limits)):
            if value is not None and not isinstance(value, SandboxLimits):
                raise TypeError(f"{name}: expected SandboxLimits or None, got {type(value).__name__}")
        if sandbox_factory is not None and not callable(sandbox_factory):
            raise TypeError(f"sandbox_factory: expected a callable or None, got {type(sandbox_factory).__name__}")
        self.split = split
        self.repos = repos
        self.backend = backend
        self.docker_image = docker_image
        self.docker_pool_size = check_int("docker_pool_size", docker_pool_size, low=0)
        self.reward_mode = reward_mode
        self.command_timeout = check_float("command_timeout", command_timeout, low=0.0, low_open=True)
        self.grading_timeout = check_float("grading_timeout", grading_timeout, low=0.0, low_open=True)
        self.max_patch_bytes = check_int("max_patch_bytes", max_patch_bytes, low=1)
        self.limits = limits or SandboxLimits(output_bytes=12000)
        self.grading_limits = grading_limits or SandboxLimits(output_bytes=65536, processes=256)
        self.sandbox_factory = sandbox_factory
        self.editor: FileEditor | None = None
        self.snapshot: Snapshot | None = None
        self.last_patch = ""
        self.last_report: SWEReport | None = None
        # a list: validation depends on this env's arguments (repos=, backend=), never cached per class
        super().__init__(None if tasks is None else list(tasks), tools, max_steps=max_steps,
                         tools_in_prompt=tools_in_prompt, system_prompt=system_prompt, rewards=rewards, parser=parser,
                         tool_parser=tool_parser, reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)

    # ------------------------------------------------------------------ tasks

    def default_tasks(self) -> Sequence[Mapping[str, Any]]:
        """The shipped tasks of ``split`` (see :func:`~agent_gym.envs.swe.tasks.shipped_tasks`).

        The local sandbox hides the package's clean sources and gold patches
        (:func:`hidden_package_paths`); a ``sandbox_factory`` of your own must do the same where
        :func:`package_data_exposed` says the installation is visible.
        """
        return shipped_tasks(self.split)

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Normalise every task (SWE-bench, SWE-smith or this package's format) and add the oracle."""
        checked = []
        for i, raw in enumerate(tasks):
            task = normalize_task(raw, f"tasks[{i}]", repos=self.repos)
            if task.get("image") and self.backend == "local" and self.sandbox_factory is None:
                raise ValueError(f"tasks[{i}]: the task names the image {task['image']!r}; it needs backend='auto' "
                                 "or 'docker'")
            if not task["patch"] and task["bug_patch"]:
                task["patch"] = snapshot_for(task["source"], task["bug_patch"]).gold_patch
            if task["patch"] and "solution" not in task:
                task["solution"] = oracle_solution(task["patch"])
            checked.append(task)
        return super().validate_tasks(checked)

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """0: an ``<answer>`` submits; the tests grade the repository (see :meth:`grade_episode`)."""
        return 0.0

    # ------------------------------------------------------------------ episodes

    def new_sandbox(self, task: Mapping[str, Any], role: str) -> Any:
        """A fresh sandbox for ``role`` (``"agent"`` or ``"grader"``); ``sandbox_factory`` when given."""
        if self.sandbox_factory is not None:
            return self.sandbox_factory(task, role)
        limits = self.limits if role == "agent" else self.grading_limits
        image = self.image_for(task)
        if image is not None:
            from agent_gym.sandbox.docker import DockerSandbox, shared_client

            return DockerSandbox(image, limits, timeout=self.command_timeout, env=GIT_ENV, workdir=REPO_DIR,
                                 pool_size=self.docker_pool_size, client=shared_client())
        # a memory and a pids cgroup bound all the episode's processes together, as in Terminal-v0
        # (where the host cannot make one, the limits hold per process)
        return LocalSandbox(limits, timeout=self.command_timeout, env=GIT_ENV, workdir=REPO_DIR,
                            hide=hidden_package_paths(), cgroup=cgroup_unavailable_reason() is None)

    def image_for(self, task: Mapping[str, Any]) -> str | None:
        """The Docker image an episode of ``task`` runs in (None: the local sandbox), by ``backend``."""
        if self.backend == "local":
            return None
        if self.backend == "docker":
            return str(task.get("image") or self.docker_image)
        return str(task["image"]) if task.get("image") else None

    def episode_tools(self, task: dict[str, Any]) -> Sequence[Tool | Callable[..., Any]] | None:
        """Build (or reuse) the base repository, start the episode's sandbox and extract the repository in it."""
        self.last_patch = ""
        self.last_report = None
        self.snapshot = snapshot_for(task["source"], task["bug_patch"])
        return super().episode_tools(task)

    def open_sandbox(self, task: Mapping[str, Any]) -> Any:
        """The agent's sandbox (:meth:`new_sandbox`) with the base repository extracted in ``/app``."""
        assert self.snapshot is not None
        sandbox = self.new_sandbox(task, "agent")
        try:
            sandbox.write_file("/tmp/.agent_gym_base.tar", self.snapshot.archive)
            result = sandbox.exec(f"tar -xf /tmp/.agent_gym_base.tar -C {REPO_DIR} && rm -f /tmp/.agent_gym_base.tar",
                                  timeout=120)
            if not result.ok:
                raise SandboxError(f"task {task['id']!r}: the repository did not extract: {result.output[-300:]}")
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def sandbox_tools(self) -> Sequence[Tool | Callable[..., Any]]:
        """``bash``, ``str_replace_editor`` (a :class:`~agent_gym.envs.swe.editor.FileEditor`) and ``submit``."""
        limit = self.tool_output_limit
        self.editor = FileEditor(self.sandbox, max_output_chars=limit)
        editor = as_tool(self.editor.str_replace_editor, time_limit=None, max_output_chars=limit + 200)
        return [self.bash_tool(), editor, self.submit_tool()]

    # ------------------------------------------------------------------ grading

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """Capture the patch and grade it in a clean sandbox (see the class docstring).

        A grading that failed (``outcome == "error"``) ends the episode ENV_ERROR with ``end_reason``
        ``"grading_error"`` (:meth:`Grade.infra_failure <agent_gym.env.grade.Grade.infra_failure>`); a policy
        output cut short or failed is not graded.
        """
        if status not in (EpisodeStatus.ENV_DONE, EpisodeStatus.MAX_STEPS):
            return Grade.ungraded()
        report = self.grade_current()
        info["swe"] = {**report.as_info(), "patch_bytes": len(self.last_patch.encode("utf-8", "surrogateescape"))}
        score = report.score(self.reward_mode)
        if score is None:  # outcome "error": not a verdict on the patch
            return Grade.infra_failure("grading_error")
        return Grade.scored(score)

    def grade_current(self) -> SWEReport:
        """Capture the running episode's patch (the agent's shell stopped first) and grade it now."""
        self.submitted = True
        task = self.task or {}
        if self.sandbox is None or self.snapshot is None:
            self.last_report = SWEReport("error", reason="no sandbox: call reset()")
            return self.last_report
        try:
            self.sandbox.stop_shell()
            patch, size = capture_patch(self.sandbox, self.snapshot.commit, task.get("exclude") or (),
                                        self.max_patch_bytes)
        except SandboxError as exc:
            self.last_report = SWEReport("invalid", apply={"method": "failed", "dropped_files": []},
                                         reason=f"the patch could not be captured: {exc}")
            return self.last_report
        self.last_patch = patch
        if size > self.max_patch_bytes:
            self.last_report = SWEReport("invalid", apply={"method": "too_large", "dropped_files": [], "bytes": size},
                                         reason=f"the patch has {size} bytes, over the limit of {self.max_patch_bytes}")
            return self.last_report
        self.last_report = self.grade_patch(task, patch)
        return self.last_report

    def grade_patch(self, task: Mapping[str, Any], patch: str) -> SWEReport:
        """Grade ``patch`` for ``task`` in a fresh sandbox (also without an episode: gold or empty patches)."""
        snapshot = snapshot_for(task["source"], task.get("bug_patch") or "")
        factory = "local" if self.sandbox_factory is None else f"factory {id(self.sandbox_factory)}"
        context = f"{self.image_for(task)}|{self.backend}|{factory}|{self.grading_limits}"
        return grade_patch(task, snapshot, patch, lambda: self.new_sandbox(task, "grader"),
                           timeout=self.grading_timeout, max_patch_bytes=self.max_patch_bytes, context=context)
