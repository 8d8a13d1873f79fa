"""Every notebook in ``notebooks/*.pct.py`` (Jupytext percent format) parses and runs, reduced.

A notebook runs as a plain Python script in a fresh process (so no Jupyter kernel is needed), in
an empty working folder, with ``MPLBACKEND=Agg`` and ``DPGP_NOTEBOOK_REDUCED=1``: notebooks read
that variable (their ``reduce_in_tests(n, test_n)`` helper) to use smaller problems in tests.
Notebooks must therefore be valid Python (no IPython magics). A notebook that reads the papers'
data (``load_kung``, ``load_hmeq``, ``load_mnist_binary`` or ``default_data_dir``) is skipped when
the data folder is absent; otherwise the folder is passed on as ``$DPGP_SHARED_DATA``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, shared_data_dir

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.pct.py"))
NEEDS_DATA = re.compile(r"\b(load_kung|load_hmeq|load_mnist_binary|default_data_dir)\b")
TIMEOUT_S = 600


def test_notebooks_exist():
    assert NOTEBOOKS, "no notebooks/*.pct.py found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_parses(path: Path):
    jupytext = pytest.importorskip("jupytext")
    nb = jupytext.read(path)
    kinds = {cell.cell_type for cell in nb.cells}
    assert {"markdown", "code"} <= kinds, f"{path.name}: expected markdown and code cells, got {kinds}"
    assert nb.metadata["jupytext"]["text_representation"]["format_name"] == "percent"
    compile(path.read_text(), str(path), "exec")  # runs as a script: no IPython magics


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_reduced(path: Path, tmp_path: Path):
    env = dict(os.environ, MPLBACKEND="Agg", DPGP_NOTEBOOK_REDUCED="1", TF_CPP_MIN_LOG_LEVEL="2")
    if NEEDS_DATA.search(path.read_text()):
        data = shared_data_dir()
        if data is None:
            pytest.skip(f"{path.name} reads the papers' data: ../shared/data is absent "
                        "(set DPGP_SHARED_DATA to run it)")
        env["DPGP_SHARED_DATA"] = str(data)
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, (
        f"{path.name} failed (exit {proc.returncode})\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
