import pytest
from sandbox_helpers import SMALL, needs_bwrap, sandbox_processes

from agent_gym.errors import SandboxError, SandboxUnavailableError
from agent_gym.sandbox import LocalSandbox, Result, Sandbox, SandboxLimits
from agent_gym.sandbox import local as local_module

pytestmark = needs_bwrap


def test_protocol_and_result(box):
    assert isinstance(box, Sandbox)
    result = box.run("echo hi")
    assert result == Result(exit_code=0, output="hi\n") and result.ok


def test_state_persists_across_commands(box):
    box.run("cd /tmp && mkdir -p d && cd d")
    box.run("export GREETING=hello; plain=7; greet() { echo \"$GREETING $1\"; }; alias ll='echo listed'")
    box.run("declare -a arr=(a b c)")
    result = box.run("pwd; echo $plain ${arr[2]}; greet world; ll; false")
    assert result.output == "/tmp/d\n7 c\nhello world\nlisted\n"
    assert result.exit_code == 1
    assert box.run("echo $?").output == "1\n"


def test_stdout_and_stderr_interleaved_in_order(box):
    result = box.run("echo one; echo two >&2; echo three")
    assert result.output == "one\ntwo\nthree\n"


def test_heredoc_of_20kb_and_a_1mb_single_line_command(box):
    body = "".join(f"line {i:05d} " + "x" * 40 + "\n" for i in range(400))
    assert len(body) > 20_000
    result = box.run(f"cat > /app/big.txt <<'EOF'\n{body}EOF\nwc -c < /app/big.txt")
    assert result.output.strip() == str(len(body))
    assert box.read_file("/app/big.txt").decode() == body
    long = "a" * 1_000_000
    result = box.run(f"X={long}; echo ${{#X}}")
    assert result.output == "1000000\n"


def test_commands_waiting_for_input_get_eof(box):
    result = box.run("cat; read -r line; echo \"read=$? line=[$line]\"; python3 -c 'input()'", timeout=5)
    assert not result.timed_out
    assert "read=1 line=[]" in result.output and "EOFError" in result.output


def test_timeout_kills_the_command_tree_and_keeps_the_session(box):
    box.run("export KEEP=1; cd /tmp")
    result = box.run("sleep 300 & (sleep 301 &) ; setsid sleep 302 & sleep 303", timeout=1)
    assert result.timed_out and result.exit_code == 124 and "timed out after 1 s" in result.output
    after = box.run("ps -eo args | grep -c '^sleep 30[0-3]'; echo $KEEP; pwd")
    assert after.output.endswith("0\n1\n/tmp\n")  # bash may first report the killed background job


def test_timeout_of_a_shell_builtin_loop_restarts_the_shell_with_state(box):
    box.run("export KEEP=2; f() { echo kept; }; cd /tmp")
    result = box.run("while :; do :; done", timeout=1)
    assert result.timed_out and "new shell was started" in result.output
    assert box.run("echo $KEEP; f; pwd").output == "2\nkept\n/tmp\n"


def test_exit_restarts_the_shell(box):
    box.run("export KEEP=3")
    result = box.run("exit 4")
    assert result.exit_code == 4 and "shell exited" in result.output
    assert box.run("echo $KEEP").output == "3\n"


def test_background_jobs_survive_later_commands(box):
    box.run("sleep 300 &")
    assert box.run("ps -eo args | grep -c '^sleep 300'").output == "1\n"


def test_output_is_cut_with_a_marker(box):
    result = box.run("seq 1 100000")
    assert result.truncated and "output truncated" in result.output
    assert result.output.startswith("1\n2\n") and result.output.rstrip().endswith("100000")
    assert len(result.output) < SMALL.output_bytes + 200


def test_files_exec_and_stop_shell(box):
    box.write_file("sub/dir/f.txt", "data\n", mode=0o600)
    assert box.run("cat sub/dir/f.txt; stat -c %a sub/dir/f.txt").output == "data\n600\n"
    assert box.read_file("/app/sub/dir/f.txt") == b"data\n"
    with pytest.raises(SandboxError):
        box.read_file("/app/missing")
    box.run("export AGENT_VAR=1; sleep 300 &")
    fresh = box.exec("echo [$AGENT_VAR] $ONLY; pwd", env={"ONLY": "x"})
    assert fresh.output == "[] x\n/app\n"
    box.stop_shell()
    assert box.exec("ps -eo args | grep -c '^sleep 300'").output == "0\n"
    assert box.run("echo back").output == "back\n"


def test_exec_times_out(box):
    result = box.exec("sleep 100 & sleep 100", timeout=0.5)
    assert result.timed_out and result.exit_code == 124
    assert box.exec("ps -eo args | grep -c '^sleep 100'").output == "0\n"


def test_close_is_idempotent_and_later_calls_report_an_error():
    sandbox = LocalSandbox(SMALL)
    with sandbox as same:
        assert same is sandbox and sandbox.alive
    sandbox.close()
    assert not sandbox.alive and sandbox_processes(sandbox) == []
    assert sandbox.run("echo hi").exit_code == 125
    with pytest.raises(SandboxError):
        sandbox.write_file("x", "y")


def test_sandboxes_do_not_see_each_other():
    boxes = [LocalSandbox(SMALL) for _ in range(3)]
    try:
        for i, b in enumerate(boxes):
            b.run(f"echo {i} > /app/mine; echo {i} > /tmp/mine; sleep 300 &")
        for i, b in enumerate(boxes):
            assert b.run("cat /app/mine /tmp/mine; ps -e | grep -c sleep").output == f"{i}\n{i}\n1\n"
    finally:
        for b in boxes:
            b.close()
    assert all(sandbox_processes(b) == [] for b in boxes)


def test_missing_bwrap_refuses_to_start(monkeypatch):
    monkeypatch.setattr(local_module.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        LocalSandbox()


def test_argument_checks():
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(TypeError):
        LocalSandbox(limits={"memory_mb": 1})
    with pytest.raises(ValueError, match="binds"):
        LocalSandbox(binds=["relative"])
    with pytest.raises(ValueError, match="hide"):
        LocalSandbox(hide=["/no/such/path"])


def test_hidden_host_paths_cannot_be_read_or_changed():
    # Task data installed beside the Python the sandbox shows (here: this test package's own files).
    import sys
    from pathlib import Path

    import sandbox_helpers

    python_dir = Path(sys.prefix).resolve()
    visible = Path(pytest.__file__).resolve()
    assert python_dir in visible.parents or Path(sys.base_prefix).resolve() in visible.parents
    hidden_dir, hidden_file = str(visible.parent), str(Path(sandbox_helpers.__file__).resolve())
    with LocalSandbox(SMALL, hide=[hidden_dir, hidden_file], binds=[str(Path(hidden_file).parent)]) as box:
        assert box.run(f"ls -A {hidden_dir}").output == ""
        assert box.run(f"touch {hidden_dir}/x").exit_code != 0
        assert box.run(f"cat {hidden_file}").exit_code != 0
        assert box.run(f"ls {Path(hidden_file).parent}").exit_code == 0  # the rest of the directory stays
    with LocalSandbox(SMALL) as box:  # without hide= the same paths are visible
        assert "__init__.py" in box.run(f"ls {hidden_dir}").output


@needs_bwrap
def test_driver_errors_come_back_intact(box):
    # The driver writes its JSON replies without the json module: quotes, control characters,
    # non-ASCII and characters beyond the BMP must survive.
    name = '/nonexistent/"q"\\\x01é😀'
    with pytest.raises(SandboxError) as caught:
        box.read_file(name)
    assert "FileNotFoundError" in str(caught.value) and repr(name)[1:-1] in str(caught.value)
    assert box.run("echo still fine").output == "still fine\n"
