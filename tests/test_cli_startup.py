"""Issue 34 item 4: the ``dpgp`` commands that need no model answer without TensorFlow.

``dpgp budget init|show`` and every refusal of an argument, a file or a column are decided before the
library's TensorFlow modules are imported (``dpgp_gpflow.cli`` imports them once every such check has
passed). Each command line runs in ONE fresh process through the console script's entry point, and the
test reads ``sys.modules`` after each one: a module imported by any of them stays imported, so the list
after each command is what it and the ones before it imported. No timing here: the start-up times are
measured by ``benchmarks/cli_startup.py``."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

#: A user's environment: TensorFlow's log level unset (the suite's conftest sets one).
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
#: Modules a command without a model must not import.
TENSORFLOW = ("tensorflow", "gpflow", "tensorflow_probability")

_CHILD = """
import contextlib, io, json, sys
import dpgp_gpflow.cli
watch = json.loads(sys.argv[2])
results = []
for argv in json.loads(sys.argv[1]):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = dpgp_gpflow.cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue(), out.getvalue(), sorted(m for m in watch if m in sys.modules)])
print(json.dumps(results))
"""


def _fresh(argvs, cwd: Path, watch=TENSORFLOW + ("dp_accounting", "pandas", "scipy"), process_stderr=None) -> list:
    """``[exit code, stderr, stdout, watched modules imported so far]`` for each command line, all run in one
    fresh process in ``cwd``; the process's own stderr (what no command's captured stderr took: TensorFlow's
    start-up log would be there) appended to ``process_stderr`` if given."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(argvs), json.dumps(list(watch))], cwd=cwd,
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(argvs)
    if process_stderr is not None:
        process_stderr.append(proc.stderr)
    return results


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("startup")
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.uniform(0, 80, 30)})
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + rng.normal(0, 3, 30)
    frame.to_csv(d / "data.csv", index=False)
    (d / "exists.json").write_text("{}")
    return d


DATA = ["data.csv", "--x", "age", "--y", "height", "--bounds", "40", "200", "--epsilon", "1", "--delta", "1e-5"]
#: Command lines refused before any model is built: (argv, what the one error line says).
REFUSALS = [
    (["release", "data.csv", "--x", "agee", "--y", "height", "--bounds", "40", "200", "--epsilon", "1", "--delta",
      "1e-5", "--grid", "5", "-o", "out.json"], "no column(s) ['agee']"),
    (["release", "data.csv", "--x", "age", "--y", "heightt", "--bounds", "40", "200", "--epsilon", "1", "--delta",
      "1e-5", "--grid", "5", "-o", "out.json"], "no column(s) ['heightt']"),
    (["release", "nofile.csv", *DATA[1:], "--grid", "5", "-o", "out.json"], "no such file"),
    (["release", *DATA, "--at", "nofile.csv", "-o", "out.json"], "no such file"),
    (["release", *DATA, "--grid", "5", "-o", "exists.json"], "exists"),
    (["release", *DATA, "--grid", "5", "--ledger", "nothere.sqlite", "-o", "out.json"], "no ledger there"),
    (["release", *DATA, "--grid", "5", "--lengthscale", "1", "2", "--variance", "1", "--noise", "1", "-o", "o.json"],
     "--lengthscale takes one value"),
    (["release", *DATA[:-4], "--epsilon", "0", "--delta", "1e-5", "--grid", "5", "-o", "out.json"], "epsilon"),
    (["release", *DATA, "--grid", "5", "--selection-share", "1e-320", "-o", "out.json"], "--selection-share"),
    (["select", "data.csv", "--x", "agee", "--y", "height", "--bounds", "40", "200", "--epsilon", "1"],
     "no column(s) ['agee']"),
    (["predict", "nofile.json", "--at", "data.csv", "-o", "pred.csv"], "no such file"),
    (["show", "nofile.json"], "no such file"),
]


def test_budget_commands_and_refusals_import_no_tensorflow(work):
    budget = [["budget", "init", "ledger.sqlite", "--epsilon", "2", "--delta", "1e-4"],
              ["budget", "show", "ledger.sqlite"]]
    results = _fresh(budget + [argv for argv, _ in REFUSALS], work)
    (init, show), refusals = results[:2], results[2:]
    assert init[0] == 0 and "created ledger.sqlite" in init[2], init
    assert show[0] == 0 and "budget (epsilon=2.0, delta=0.0001)" in show[2], show
    assert show[3] == [], show[3]  # a basic ledger: no TensorFlow, dp_accounting (PLD only), pandas or SciPy
    assert refusals[0][3] == [], refusals[0][3]  # a CSV's missing column: refused before pandas and SciPy
    for (argv, message), (code, stderr, _, imported) in zip(REFUSALS, refusals):
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("dpgp: error:") and message in lines[0], \
            (argv, stderr)
        assert not set(imported) & set(TENSORFLOW), (argv, imported)
    assert not (work / "out.json").exists()


def _forgeries(source: Path, folder: Path) -> list:
    """(file name, what the one error line says) of consistent forgeries of ``source`` (hash recomputed but
    for the first), written to ``folder``: what ``dpgp show`` must refuse without TensorFlow."""
    from forgery import forged

    from dpgp_gpflow.io.format import encode_array

    def first(field, value):
        return lambda raw: raw["card"]["releases"][0].update({field: value})

    def negative_variance(raw):
        entry = raw["arrays"]["releases/0/variance"]
        values = -1.0 - np.abs(np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8"))
        raw["arrays"]["releases/0/variance"] = encode_array(values.reshape(entry["shape"]))

    cases = [
        (first("neighbours", "banana"), "'banana' is not a neighbouring relation"),
        (first("neighbours", "row (3 outputs)"), "is not a neighbouring relation of a release of 1 output"),
        (negative_variance, "variance has negative values"),
        (lambda raw: raw.update(format_version=1.0), "format version 1.0 is not supported"),
        (lambda raw: raw["card"].update(reproducible=False), "card.reproducible False is not that of the releases"),
        (first("noise_multiplier", 0.5), "card.releases[0].noise_multiplier 0.5 is not the analytic multiplier"),
        (first("sensitivity", 0.5), "is below the data sensitivity"),
        (lambda raw: raw.update(kind="PrivateOracle"), "unknown kind of released object 'PrivateOracle'"),
    ]
    out = []
    for i, (edit, message) in enumerate(cases):
        path = forged(source, folder, edit).rename(folder / f"forged-{i}.json")
        out.append((path.name, message))
    tampered = json.loads(source.read_text())
    tampered["card"]["epsilon"] = 0.001  # the hash not recomputed: damaged or edited
    (folder / "tampered.json").write_text(json.dumps(tampered))
    return [*out, ("tampered.json", "does not match its SHA-256")]


@pytest.mark.slow  # a release first (TensorFlow in this process)
def test_show_imports_no_tensorflow_and_refuses_a_forged_card_in_one_line(work):
    """``dpgp show`` checks the card as dp.load does (io/card.py) without TensorFlow or GPflow (SciPy recomputes
    the analytic noise multiplier); its first line is the loaded object's repr; a forged or damaged file is
    one line, exit code 2, still without TensorFlow. Last, in the same fresh process, ``dpgp predict`` starts
    TensorFlow (no tracing: a light command) and the process's stderr has no TensorFlow start-up log: the
    console script's quiet start-up (tests/test_cli_process.py runs a release after the demo started it)."""
    import dpgp_gpflow as dp
    from test_cli import _run

    code, err = _run(["release", *DATA, "--grid", "3", "--lengthscale", "10", "--variance", "400", "--noise", "50",
                      "--seed", "1", "--quiet", "-o", "shown.json"], work)
    assert code == 0, err
    code, err = _run(["release", *DATA, "--sparse", "4", "--lengthscale", "10", "--variance", "400", "--noise", "50",
                      "--seed", "1", "--quiet", "-o", "fn.json"], work)
    assert code == 0, err
    forgeries = _forgeries(work / "shown.json", work)
    process_stderr: list = []
    results = _fresh([["show", "shown.json"], *(["show", name] for name, _ in forgeries),
                      ["predict", "fn.json", "--at", "data.csv", "-o", "pred.csv", "--quiet"]], work,
                     watch=TENSORFLOW + ("dp_accounting", "pandas"), process_stderr=process_stderr)
    *results, (code, stderr, _, imported) = results
    assert code == 0 and stderr == "" and "tensorflow" in imported, (stderr, imported)  # TensorFlow started here
    assert process_stderr == [""], process_stderr  # quietly: no start-up log, no warning
    expected = dp.load(work / "fn.json").predict(pd.read_csv(work / "data.csv")[["age"]].to_numpy())
    np.testing.assert_allclose(pd.read_csv(work / "pred.csv")["mean"], expected.mean[:, 0], rtol=1e-10)
    (code, stderr, stdout, imported), refused = results[0], results[1:]
    assert code == 0 and "clip_to_bounds" in stdout, stderr
    assert stdout.splitlines()[0] == f"shown.json: {dp.load(work / 'shown.json')!r}"
    assert imported == [], imported
    for (name, message), (code, stderr, stdout, imported) in zip(forgeries, refused):
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"dpgp: error: {name}: ") and message in lines[0], \
            (name, stderr)
        assert imported == [], (name, imported)
        with pytest.raises(ValueError, match=re.escape(message)):  # dp.load refuses each as well
            dp.load(work / name)
