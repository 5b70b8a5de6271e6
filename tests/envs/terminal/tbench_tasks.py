"""Task directories in the Terminal-Bench layout, written by the tests, each reproducing one grading rule."""

import json
import textwrap
from pathlib import Path

PYTEST_RUNNER = ('#!/bin/bash\ncd "${TEST_DIR:-/tests}" || exit 1\n'
                 "python3 -m pytest test_outputs.py -rA -p no:cacheprovider\n")


def write_task(root, name, *, dockerfile=None, solution="true\n", tests=None, run_tests=PYTEST_RUNNER,
               files=None, meta=None, compose=None):
    """A Terminal-Bench task directory under ``root``; returns its path."""
    task = Path(root) / name
    (task / "tests").mkdir(parents=True)
    yaml_meta = {"instruction": f"Do the {name} task.", "parser_name": "pytest", "max_agent_timeout_sec": 120,
                 "max_test_timeout_sec": 60, **(meta or {})}
    (task / "task.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in yaml_meta.items()))
    if dockerfile is not None:
        (task / "Dockerfile").write_text(textwrap.dedent(dockerfile).lstrip())
    (task / "solution.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solution).lstrip())
    (task / "run-tests.sh").write_text(run_tests)
    if tests is not None:
        (task / "tests" / "test_outputs.py").write_text(textwrap.dedent(tests).lstrip())
    for rel, content in (files or {}).items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if compose is not None:
        (task / "docker-compose.yaml").write_text(textwrap.dedent(compose).lstrip())
    return task


def dockerfile_task(root, base="python:3.11-slim"):
    """ARG/ENV in order with expansion, WORKDIR, COPY into /opt and /etc, RUN as root writing /usr/local,
    and a solution.sh with a ``read`` that would swallow the rest of the script if fed on stdin."""
    return write_task(
        root, "dockerfile-semantics",
        dockerfile=f"""
            ARG BASE={base}
            FROM ${{BASE}}
            ARG TOOL_HOME=/opt/tool
            RUN echo "greeting=[$GREETING] tool=[$TOOL_HOME]" > /tmp/order.txt
            ENV GREETING=hello \\
                TOOL_HOME=${{TOOL_HOME}}
            ENV PATH=${{TOOL_HOME}}/bin:${{PATH}} SHOUT=${{GREETING:-none}}-${{UNSET_VAR:-fallback}}
            COPY tool.sh ${{TOOL_HOME}}/bin/mytool
            COPY config.ini /etc/mytool/config.ini
            RUN chmod 755 $TOOL_HOME/bin/mytool && mkdir -p /usr/local/share/mytool && \\
                cp /tmp/order.txt /usr/local/share/mytool/order.txt && id -u > /usr/local/share/mytool/setup_uid
            WORKDIR /srv
            WORKDIR work
            COPY data.txt ./
            """,
        files={"tool.sh": "#!/bin/sh\necho \"tool-ok $(cat /etc/mytool/config.ini)\"\n",
               "config.ini": "level=3\n", "data.txt": "payload\n"},
        solution="""
            read -r skipped
            mytool > result.txt
            echo "$GREETING $SHOUT" >> result.txt
            cat data.txt >> result.txt
            """,
        tests="""
            from pathlib import Path

            def test_result():
                lines = Path("/srv/work/result.txt").read_text().splitlines()
                assert lines == ["tool-ok level=3", "hello hello-fallback", "payload"]

            def test_setup_order_and_root():
                share = Path("/usr/local/share/mytool")
                assert (share / "order.txt").read_text() == "greeting=[] tool=[/opt/tool]\\n"
                assert (share / "setup_uid").read_text().strip() == "0"
            """,
    )


def swebench_task(root):
    """A ``parser_name: swebench`` task: the verdict is the block between the markers (noise around it)."""
    return write_task(
        root, "swebench-style",
        meta={"parser_name": "swebench"},
        solution="touch /app/fixed\n",
        run_tests=textwrap.dedent("""\
            #!/bin/bash
            echo "PASSED tests/test_other.py::test_unrelated_1"
            echo "PASSED tests/test_other.py::test_unrelated_2"
            echo "FAILED tests/test_target.py::test_bug"
            echo "SWEBench results starts here"
            if [ -f /app/fixed ]; then echo PASSED; else echo FAILED; fi
            echo "SWEBench results ends here"
            """),
    )


def same_shell_task(root, same_shell):
    """The tests read a variable the agent exported in its shell (which never reaches them)."""
    return write_task(
        root, f"same-shell-{same_shell}".lower(),
        meta={"run_tests_in_same_shell": same_shell},
        tests="""
            import os

            def test_exported():
                assert os.environ.get("ANSWER") == "42"
            """,
    )


def fraction_task(root):
    """Two tests, the solution passes one of them."""
    return write_task(
        root, "two-tests",
        solution="echo one > /app/one.txt\n",
        tests="""
            from pathlib import Path

            def test_one():
                assert Path("/app/one.txt").exists()

            def test_two():
                assert Path("/app/two.txt").exists()
            """,
    )
