"""Execute every notebook in notebooks/ with the interpreter running the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory):
    """Install a "python3" kernelspec for this interpreter and put it first on the Jupyter path."""
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    install(kernel_name="python3", prefix=str(prefix))
    return prefix / "share" / "jupyter"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(kernel_path), os.environ.get("JUPYTER_PATH", "")]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    argv = client.km.kernel_spec.argv if client.km is not None and client.km.kernel_spec else []
    assert not argv or Path(argv[0]).resolve() == Path(sys.executable).resolve()
