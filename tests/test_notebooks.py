"""Every notebook in ``notebooks/*.pct.py`` (Jupytext percent format) parses and runs, reduced.

A notebook runs as a plain Python script (``runpy.run_path`` as ``__main__``, so no Jupyter kernel is
needed), in its own empty working folder, in its own namespace and under its own warning filters, with
``MPLBACKEND=Agg`` and ``DPGP_NOTEBOOK_REDUCED=1``: notebooks read that variable (their
``reduce_in_tests(n, test_n)`` helper) to use smaller problems in tests. All the notebooks run one after
another in one fresh child process (TensorFlow imported once, not once per notebook: seconds each on
this 2-core machine); each notebook's exception (or non-zero ``SystemExit``), output and traceback are
reported by its own test.
Notebooks must therefore be valid Python (no IPython magics). A notebook that reads the papers'
data (``load_kung``, ``load_hmeq``, ``load_mnist_binary`` or ``default_data_dir``) is skipped when
the data folder is absent; otherwise the folder is passed on as ``$DPGP_SHARED_DATA``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
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


#: Runs each notebook given on the command line (path, working folder, output file) as ``__main__`` in a
#: fresh namespace, its stdout and stderr to its output file; prints one JSON line of results at the end.
RUNNER = textwrap.dedent("""
    import contextlib, json, os, runpy, sys, traceback, warnings
    results = {}
    for path, folder, log in zip(*[iter(sys.argv[1:])] * 3):
        os.chdir(folder)
        with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \\
                warnings.catch_warnings():
            try:
                runpy.run_path(path, run_name="__main__")
                error = None
            except SystemExit as exc:
                error = None if exc.code in (None, 0) else traceback.format_exc()
            except BaseException:
                error = traceback.format_exc()
        try:
            import matplotlib.pyplot as plt
            plt.close("all")
        except ImportError:
            pass
        results[path] = error
    print("RESULTS " + json.dumps(results))
""")


@pytest.fixture(scope="module")
def notebook_runs(tmp_path_factory) -> dict:
    """{notebook: (None or the error's traceback, its output)} of every notebook that can run here (one
    child process); a notebook that reads the papers' data is left out when the data folder is absent."""
    env = dict(os.environ, MPLBACKEND="Agg", DPGP_NOTEBOOK_REDUCED="1", TF_CPP_MIN_LOG_LEVEL="2")
    data = shared_data_dir()
    if data is not None:
        env["DPGP_SHARED_DATA"] = str(data)
    args, logs = [], {}
    for path in NOTEBOOKS:
        if data is None and NEEDS_DATA.search(path.read_text()):
            continue
        folder = tmp_path_factory.mktemp(path.name.split(".")[0])
        logs[str(path)] = folder / "output.txt"
        args += [str(path), str(folder), str(logs[str(path)])]
    if not args:
        return {}
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S * len(logs))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, (
        f"the notebooks' process failed (exit {proc.returncode})\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}")
    errors = json.loads(lines[-1][len("RESULTS "):])
    return {Path(p): (errors[p], logs[p].read_text() if logs[p].exists() else "") for p in logs}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_reduced(path: Path, notebook_runs):
    if path not in notebook_runs:
        assert shared_data_dir() is None
        pytest.skip(f"{path.name} reads the papers' data: ../shared/data is absent "
                    "(set DPGP_SHARED_DATA to run it)")
    error, output = notebook_runs[path]
    assert error is None, f"{path.name} failed\n--- output ---\n{output[-4000:]}\n--- error ---\n{error[-4000:]}"
