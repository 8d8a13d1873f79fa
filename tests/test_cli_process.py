"""The command lines in ONE fresh process (one TensorFlow start-up and one tf.function tracing, not one each):
what only a fresh process shows, in a user's environment (TensorFlow's log level unset, no PYTHONWARNINGS).

First ``python -m dpgp_gpflow demo`` (``runpy.run_module(..., alter_sys=True)``, what ``-m`` does; TensorFlow
starts in it): its exit code, its table and PNG, and its stderr, one line (its own ``--seed`` warning), so no
TensorFlow start-up log. Then the ``dpgp`` console script's entry point (``dpgp_gpflow.cli.main``): a release
whose outputs are clipped (its stderr is the process's own: exactly the ClippingWarning's one line, no
TensorFlow log line or traceback), then CSV refusals (tests/test_cli_tables.py), each one line. ``dpgp``'s own
cold start of TensorFlow (quiet, in a fresh process) is tests/test_cli_startup.py's ``dpgp predict``; that it
imports no TensorFlow before a model is needed, tests/test_cli_startup.py and tests/test_entry_point.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_cli import ENV, _ledger, _one_line, _untouched
from test_cli_tables import CLIP_BOUNDS, CSV_REFUSALS, FRESH_CASES, _release
from test_cli_tables import work  # noqa: F401  (the tables' module fixture: data.csv)
from test_demo import ROWS, _png_size

#: Printed to stdout and stderr between the demo and the ``dpgp`` command lines.
MARK = "----- dpgp -----"

#: The demo as ``python -m dpgp_gpflow demo`` runs it, TensorFlow not yet imported; then the clipped release
#: through the console script's entry point, its stderr the process's own; then the refusals, each one's stderr
#: captured, warnings ignored as the suite's PYTHONWARNINGS=ignore would.
_CHILD = """
import contextlib, io, json, runpy, sys, warnings
demo, first, rest = (json.loads(a) for a in sys.argv[1:4])
assert "tensorflow" not in sys.modules
sys.argv = ["dpgp_gpflow", *demo]
try:
    runpy.run_module("dpgp_gpflow", run_name="__main__", alter_sys=True)
    demo_code = None
except SystemExit as exc:
    demo_code = exc.code
sys.stdout.flush()
sys.stderr.flush()
print(MARK, flush=True)
print(MARK, file=sys.stderr, flush=True)
import dpgp_gpflow.cli
code = dpgp_gpflow.cli.main(first)
warnings.simplefilter("ignore")
results = []
for argv in rest:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            results.append([dpgp_gpflow.cli.main(argv), None])
        except SystemExit as exc:
            results.append([exc.code, None])
    results[-1][1] = err.getvalue()
print(json.dumps([demo_code, code, results]))
""".replace("MARK", repr(MARK))


@pytest.fixture(scope="module")
def fresh_process(work, tmp_path_factory) -> dict:  # noqa: F811  (work: the imported fixture)
    """The demo's (exit code, stdout, stderr, PNG folder); the clipped release's exit code and the rest of the
    process's stderr (everything the refusals did not write to their own captured stderr); each refusal's
    (exit code, stderr); the refusals' ledger."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    demo = ["demo", "--output", str(out), "--seed", "0", "--epsilon", "1.0", "--delta", "0.01"]
    ledger = _ledger(work, "fresh.sqlite")
    argvs = []
    for i, case in enumerate(FRESH_CASES):
        text, extra, _ = CSV_REFUSALS[case]
        (work / f"fresh-{i}.csv").write_text(text)
        argvs.append([str(a) for a in _release(work, f"fresh-{i}.csv", *extra, "--ledger", ledger, "-o", "f.json")])
    lo, hi = CLIP_BOUNDS
    clip = ["release", "data.csv", "--x", "age", "--y", "height", "--bounds", str(lo), str(hi), "--lengthscale", "20",
            "--variance", "100", "--noise", "10", "--epsilon", "1", "--delta", "0.01", "--grid", "4", "--quiet",
            "-o", "clip.json"]
    env = {k: v for k, v in ENV.items() if k != "PYTHONWARNINGS"}  # a user's warnings, not the suite's
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(demo), json.dumps(clip), json.dumps(argvs)],
                       cwd=work, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr
    demo_out, _, rest_out = r.stdout.partition(MARK + "\n")
    demo_err, _, rest_err = r.stderr.partition(MARK + "\n")
    demo_code, clip_code, refusals = json.loads(rest_out.strip().splitlines()[-1])
    return {"demo": (demo_code, demo_out, demo_err, out), "ledger": ledger, "refusals": refusals,
            "clip": (clip_code, rest_err)}


@pytest.mark.slow
def test_demo_runs_quietly_and_writes_table_and_png(fresh_process):
    """``python -m dpgp_gpflow demo`` in a fresh process prints no TensorFlow start-up log, its table and a
    PNG."""
    code, stdout, stderr, out = fresh_process["demo"]
    assert code in (None, 0), stderr
    # the one line on stderr is the demo's own warning about --seed (an explicit seed is announced once);
    # nothing from TensorFlow
    assert len(stderr.splitlines()) == 1 and "NOT private" in stderr, stderr

    pngs = list(out.glob("*.png"))
    assert len(pngs) == 1
    data = pngs[0].read_bytes()
    width, height = _png_size(data)
    assert width >= 600 and height >= 300 and len(data) > 20_000
    import matplotlib.image

    pixels = matplotlib.image.imread(pngs[0])
    assert pixels.std() > 0.05  # something was drawn

    lines = stdout.splitlines()
    values = {}
    for name in ROWS:
        (line,) = [ln for ln in lines if ln.startswith(name + " ")]
        numbers = [float(t) for t in line[len(name):].split()]
        assert len(numbers) == 6, line  # epsilon, delta, sensitivity, median std, RMSE DP, RMSE non-DP
        assert all(math.isfinite(v) for v in numbers), line
        values[name] = numbers
    for eps, delta, sens, std, rmse_dp, rmse_nondp in values.values():
        assert (eps, delta) == (1.0, 0.01)
        assert sens > 0 and std > 0 and rmse_dp > 0 and rmse_nondp > 0
    # the cloaking sensitivity is d = 346 - 25 when the noise covariance is optimal
    assert values["cloaking (mse)"][2] == pytest.approx(321.0, rel=1e-6)
    # cloaking adds far less noise than the standard mechanism, and mse less than entropy
    assert values["cloaking (mse)"][3] < values["cloaking (entropy)"][3] < values["standard (Hall et al.)"][3]
    assert len({v[5] for v in values.values()}) == 1  # one non-DP RMSE
    assert any(ln.startswith("cloaking (mse), grid") for ln in lines)
    assert "spent (2, 0.02) on 2 releases" in stdout
    assert "all four releases together: (4, 0.04)" in stdout


@pytest.mark.slow
def test_refusals_are_one_line_in_a_fresh_process(work, fresh_process):  # noqa: F811
    # the console script's own process: no traceback, no pandas warning, one line each; nothing spent
    results = fresh_process["refusals"]
    assert len(results) == len(FRESH_CASES)
    for case, (code, stderr) in zip(FRESH_CASES, results):
        _one_line(code, stderr, CSV_REFUSALS[case][2])
    assert not (work / "f.json").exists()
    _untouched(fresh_process["ledger"])


@pytest.mark.slow
def test_clipping_warning_is_one_line_on_the_command_line(work, fresh_process):  # noqa: F811
    frame = pd.read_csv(work / "data.csv")
    lo, hi = CLIP_BOUNDS
    clipped = int(np.sum((frame["height"] < lo) | (frame["height"] > hi)))  # counted here, independently
    assert 0 < clipped < len(frame)
    code, stderr = fresh_process["clip"]
    assert code == 0, stderr
    assert (work / "clip.json").is_file()
    expected = (f"dpgp: warning: {clipped} of {len(frame)} private outputs lay outside the public bounds "
                f"({lo}, {hi}) and were clipped")
    # the rest of the process's stderr: no path, no source line, once, no TensorFlow log line
    assert stderr.strip().splitlines() == [expected], stderr
