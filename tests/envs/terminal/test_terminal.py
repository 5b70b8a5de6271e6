import os
import pickle
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest
from sandbox_helpers import sandbox_processes

import agent_gym  # noqa: F401
from agent_gym.envs.terminal import BUILTIN_TASK_DIR, TerminalEnv, builtin_tasks, load_task
from agent_gym.envs.terminal.env import parse_pytest_summary
from agent_gym.errors import ConfigError
from agent_gym.rollout import collect
from agent_gym.sandbox import bwrap_available
from agent_gym.types import EpisodeStatus

pytestmark = pytest.mark.skipif(bwrap_available() is None,
                                reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")

SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
TASK_IDS = [t["id"] for t in builtin_tasks()]


def bash(command):
    import json
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


@pytest.fixture(scope="module")
def env():
    environment = TerminalEnv()
    yield environment
    environment.close()


def test_at_least_24_tasks_across_categories():
    tasks = builtin_tasks()
    assert len(tasks) >= 24
    assert {"file-manipulation", "text-processing", "csv", "git", "python", "build", "permissions", "processes",
            "stateful"} <= {t["category"] for t in tasks}


def _check_task(index):
    """In one sandbox: the tests fail on the untouched task, then the oracle's episode earns the full reward."""
    env = TerminalEnv()
    try:
        env.reset(options={"task_index": index})
        passed, total, score = env.run_tests()
        problems = []
        if not (total >= 1 and score < 1.0):
            problems.append(f"doing nothing scored {passed}/{total}: {env.last_test_output[-800:]}")
        env.step(env.oracle_action())
        _, _, terminated, truncated, info = env.step(env.oracle_action())
        if not (terminated and not truncated and info.get("res_reward") == 1.0
                and info["tests"]["passed"] == info["tests"]["total"] >= 1):
            problems.append(f"the reference solution scored {info.get('tests')}: {env.last_test_output[-800:]}")
        return problems
    finally:
        env.close()


def test_every_reference_solution_passes_and_doing_nothing_fails():
    # Four tasks at a time: most of a check is waiting for the sandbox's processes.
    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(TASK_IDS, pool.map(_check_task, range(len(TASK_IDS))), strict=True))
    failures = {task_id: problems for task_id, problems in results.items() if problems}
    assert len(results) == len(builtin_tasks()) and failures == {}


def test_submit_with_nothing_done_scores_below_one(env):
    env.reset(options={"task_index": TASK_IDS.index("csv-join")})
    _, reward, terminated, _, info = env.step(SUBMIT)
    assert terminated and info["res_reward"] == 0.0 and info["status"] == "ENV_DONE"
    assert (info["tests"]["passed"], info["tests"]["total"], info["tests"]["outcome"]) == (0, 1, "graded")


def test_observation_has_output_and_exit_code_and_state_persists(env):
    env.reset(options={"task_index": 0})
    obs, *_ = env.step(bash("cd /tmp && export A=5"))
    obs, _, _, _, info = env.step(bash("echo $A; pwd; false"))
    assert obs[-1] == {"role": "tool", "content": "5\n/tmp\n[exit code: 1]"}
    assert info["tool_calls"][0]["ok"]


def test_timeout_is_an_observation(env):
    env.unwrapped.command_timeout = 1.0
    try:
        env.reset(options={"task_index": 0})
        obs, *_ = env.step(bash("sleep 30"))
        assert "timed out after 1 s" in obs[-1]["content"] and "[exit code: 124]" in obs[-1]["content"]
    finally:
        env.unwrapped.command_timeout = 30.0


def test_grading_ignores_agent_planted_files_and_processes(env):
    env.reset(options={"task_index": TASK_IDS.index("create-greeting-file")})
    env.step(bash("mkdir -p /tests && printf 'def test_fake():\\n    pass\\n' > /tests/test_outputs.py; "
                  "echo 'import sys' > /app/pytest.py; (while :; do echo 'PASSED x'; sleep 0.1; done &)"))
    *_, info = env.step(SUBMIT)
    assert info["res_reward"] == 0.0


def test_reset_releases_the_previous_sandbox(env):
    env.reset(options={"task_index": 0})
    first = env.sandbox
    env.step(bash("sleep 500 &"))
    env.reset(options={"task_index": 1})
    assert not first.alive and sandbox_processes(first) == []


def test_close_and_pickle():
    environment = gym.make("agent_gym/Terminal-v0")
    environment.reset(seed=0)
    box = environment.unwrapped.sandbox
    clone = pickle.loads(pickle.dumps(environment))
    assert clone.unwrapped.sandbox is None
    environment.close()
    environment.close()
    assert sandbox_processes(box) == []


def test_user_task_directories_in_both_layouts(tmp_path):
    harbor = tmp_path / "hello-harbor"
    (harbor / "environment").mkdir(parents=True)
    (harbor / "solution").mkdir()
    (harbor / "tests").mkdir()
    (harbor / "instruction.md").write_text("Write hi to /app/out.txt\n")
    (harbor / "task.toml").write_text("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n")
    (harbor / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\nENV GREETING=hi\n"
                                                        "RUN echo seed > /app/seed.txt\n")
    (harbor / "solution" / "solve.sh").write_text("echo $GREETING > /app/out.txt\n")
    (harbor / "tests" / "test.sh").write_text(
        "if [ \"$(cat /app/out.txt)\" = hi ] && [ -f /app/seed.txt ]; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    tb = tmp_path / "copied-tb"
    import shutil
    shutil.copytree(BUILTIN_TASK_DIR / "count-error-lines", tb)
    environment = gym.make("agent_gym/Terminal-v0", tasks=[str(tmp_path)])
    try:
        assert sorted(t["id"] for t in environment.unwrapped.tasks) == ["copied-tb", "hello-harbor"]
        for index in range(2):
            environment.reset(options={"task_index": index})
            environment.step(environment.unwrapped.oracle_action())
            *_, info = environment.step(environment.unwrapped.oracle_action())
            assert info["res_reward"] == 1.0
        environment.reset(options={"task_index": 1})
        *_, info = environment.step(SUBMIT)
        assert info["res_reward"] == 0.0
    finally:
        environment.close()
    with pytest.raises(ConfigError):
        load_task(tmp_path / "missing")


def test_parse_pytest_summary_reads_only_the_summary():
    out = "PASSED fake\n===== short test summary info =====\nPASSED t.py::a\nFAILED t.py::b - x\nERROR t.py::c\n"
    assert parse_pytest_summary(out) == (1, 3)
    assert parse_pytest_summary("PASSED t.py::a") == (0, 0)


class _Scripted:
    """Writes a file named after its session with a background process, then looks around, then submits."""

    def act(self, messages, *, session_id, tools=None):
        calls = sum(m["role"] == "tool" for m in messages)
        name = session_id.replace("/", "_")
        if calls == 0:
            return bash(f"id -u; echo {name} > /app/{name}.txt; sleep 300 &")
        if calls == 1:
            time.sleep(0.01)  # let the other episodes write their files meanwhile
            return bash("ls /app; echo ---; ps -e -o args= | grep -c '^sleep 300'; cat /app/*.txt")
        return SUBMIT

    async def aact(self, messages, *, session_id, tools=None):
        return self.act(messages, session_id=session_id, tools=tools)

    def close_session(self, session_id):
        pass


def test_16_parallel_episodes_under_collect_are_isolated_and_leave_nothing():
    task = builtin_tasks()[TASK_IDS.index("create-greeting-file")]
    before = set(os.listdir("/tmp"))
    children = set(_children())  # e.g. the sandbox of this module's shared env
    batch = collect(lambda: TerminalEnv(tasks=[task]), _Scripted(), tasks=[task], num_episodes=16, n_parallel=16,
                    progress=False, seed=3)
    assert len(batch) == 16
    uids, names = set(), set()
    for trajectory in batch:
        steps = trajectory.steps
        assert trajectory.status == EpisodeStatus.ENV_DONE and len(steps) == 3, trajectory.status
        first, second = steps[1].observation, steps[2].observation  # each step receives the previous output
        uid = int(first.split("\n")[0])
        listing, rest = second.split("---\n")
        name = listing.split("\n")[0][: -len(".txt")]
        # Only its own file in /app, only its own background process, its own name in the file.
        assert listing.split("\n")[:-1] == [f"{name}.txt"] and rest.startswith(f"1\n{name}\n[exit code: 0]")
        uids.add(uid)
        names.add(name)
    assert len(names) == 16
    if os.geteuid() == 0:  # every sandbox ran under its own user id; none has a process left
        assert len(uids) == 16
        assert [pid for uid in uids for pid in sandbox_processes(_Gone(uid))] == []
    mine = [p for p in set(_children()) - children if p[1] in ("bwrap", "bash", "sleep", "python3")]
    assert mine == [], "processes of the sandboxes outlived the batch"
    assert not {n for n in set(os.listdir("/tmp")) - before if "sandbox" in n or "agent_gym" in n}


class _Gone:
    def __init__(self, uid):
        self.uid, self.host_pid = uid, -1


def _children():
    """(pid, name) of this process's children, from /proc."""
    found = []
    me = str(os.getpid())
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
        except OSError:
            continue
        comm = data[data.index("(") + 1:data.rindex(")")]
        if data[data.rindex(")") + 2:].split()[1] == me:
            found.append((int(name), comm))
    return found


def test_interrupted_rollout_leaves_nothing(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, time\nfrom agent_gym.envs.terminal import TerminalEnv\n"
        "envs = [TerminalEnv() for _ in range(4)]\n"
        "for e in envs:\n    e.reset(options={'task_index': 0})\n"
        "    e.step('<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"sleep 600 &\"}}</tool_call>')\n"
        "print(' '.join(str(e.sandbox.uid) for e in envs), flush=True)\n"
        "envs[0].step('<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"sleep 20\"}}</tool_call>')\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[3]))
    uids = [int(u) for u in proc.stdout.readline().split()]
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)

    class Box:
        def __init__(self, uid):
            self.uid, self.host_pid = uid, -1
    import time
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(sandbox_processes(Box(u)) for u in uids):
        time.sleep(0.1)
    assert len(uids) == 4 and all(sandbox_processes(Box(u)) == [] for u in uids)
