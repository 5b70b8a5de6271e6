"""Execute every notebook in notebooks/ with the interpreter running the tests.

The notebooks run two at a time (each in its own kernel process): much of a notebook's time is spent
waiting for the servers and subprocesses it starts, so the pairs overlap. Each notebook still is its
own test, which waits for its notebook's run and fails with that notebook's error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
AT_ONCE = 2
"""Notebooks executed at the same time."""


def _execute(path: Path) -> list[str]:
    """Run every cell of ``path``; return the kernel's command line."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        raise AssertionError(f"{path.name}: {exc}\n\nwhat the cells before it printed:\n{_printed(notebook)}") from exc
    return client.km.kernel_spec.argv if client.km is not None and client.km.kernel_spec else []


def _printed(notebook: object, limit: int = 6000) -> str:
    """The text the executed cells printed (streams and plain-text results), the last ``limit`` characters."""
    parts = []
    for index, cell in enumerate(getattr(notebook, "cells", [])):
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain") or ""
            if text:
                parts.append(f"[cell {index}] {text}")
    return "".join(parts)[-limit:]


@pytest.fixture(scope="module")
def notebook_runs(request, tmp_path_factory) -> Iterator[dict[Path, Future[list[str]]]]:
    """The selected notebooks submitted at once to ``AT_ONCE`` workers, with this interpreter's kernelspec."""
    from ipykernel.kernelspec import install

    selected = [item.callspec.params["path"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_notebook_executes"]
    prefix = tmp_path_factory.mktemp("jupyter")
    install(kernel_name="python3", prefix=str(prefix))
    kernels = str(prefix / "share" / "jupyter")
    patch = pytest.MonkeyPatch()
    patch.setenv("JUPYTER_PATH", os.pathsep.join([kernels, os.environ.get("JUPYTER_PATH", "")]))
    patch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pool = ThreadPoolExecutor(max_workers=AT_ONCE, thread_name_prefix="notebook")
    try:
        yield {path: pool.submit(_execute, path) for path in selected}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        patch.undo()


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, notebook_runs):
    argv = notebook_runs[path].result(timeout=1400)
    assert not argv or Path(argv[0]).resolve() == Path(sys.executable).resolve()
