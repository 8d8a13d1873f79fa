"""Issue 29: the second red-team pass (on the code after the first round of fixes). Each case is
refused in one line with nothing spent and nothing overwritten, or handled."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.io.format import document_sha256

from test_cli import ENV, _ledger, _one_line, _run, _untouched

PUBLIC = ["--bounds", "60", "180", "--lengthscale", "20", "--variance", "100", "--noise", "10", "--epsilon", "1",
          "--delta", "0.01", "--quiet"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("redteam")
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"age": rng.uniform(0, 80, 40)})
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + rng.normal(0, 3, 40)
    frame.to_csv(d / "data.csv", index=False)
    pd.DataFrame({"age": [5.0, 30.0]}).to_csv(d / "at.csv", index=False)
    return d


def test_the_output_is_never_the_ledger_or_an_input_even_with_force(work):
    ledger = _ledger(work, "same.sqlite")
    before = ledger.read_bytes()
    for out, what in ((ledger, "--ledger"), (work / "data.csv", "data"), (work / "at.csv", "--at")):
        data = work / "data.csv"
        original = data.read_bytes(), (work / "at.csv").read_bytes()
        code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", *PUBLIC, "--at", "at.csv",
                          "--ledger", ledger, "-o", out, "--force"], work)
        _one_line(code, err, f"is the {what} file")
        assert (data.read_bytes(), (work / "at.csv").read_bytes()) == original
    assert ledger.read_bytes() == before
    _untouched(ledger)


def test_numbers_that_read_as_decimal_or_thousands_commas_are_refused_not_guessed(work):
    ledger = _ledger(work, "thousands.sqlite")
    rows = "".join(f"{x};{y}\n" for x, y in [(8, "2,059"), (0, "1,301"), (5, "1,812"), (3, "1,499")])
    (work / "ambiguous.csv").write_text("x;y\n" + rows)
    code, err = _run(["release", "ambiguous.csv", "--x", "x", "--y", "y", "--bounds", "0", "3000", "--lengthscale",
                      "3", "--variance", "1e5", "--noise", "1e4", "--grid", "5", "--epsilon", "1", "--delta", "1e-3",
                      "--ledger", ledger, "-o", "ambiguous.json"], work)
    _one_line(code, err, "give --decimal ',' or --thousands ','")
    _untouched(ledger)
    # either flag settles it, and the values are read as pandas reads them with that flag
    for flag, pandas_option in (("--thousands", {"thousands": ","}), ("--decimal", {"decimal": ","})):
        from dpgp_gpflow.cli import columns, csv_format, read_table
        table = read_table(work / "ambiguous.csv", *csv_format(None, None if flag == "--thousands" else ",",
                                                                "," if flag == "--thousands" else None))
        expected = pd.read_csv(work / "ambiguous.csv", sep=";", **pandas_option)["y"].to_numpy()
        np.testing.assert_array_equal(columns(table, ["y"], private=True)[:, 0], expected)


def test_predict_refuses_a_card_whose_columns_are_not_names(work):
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "--bounds", "60", "180",
                      "--lengthscale", "20", "--variance", "100", "--noise", "10", "--epsilon", "1", "--delta",
                      "0.01", "--quiet", "--sparse", "5", "-o", "fn.json"], work)
    assert code == 0, err
    for bad in (5, [["age"]], "age", ["age", "weight"]):
        raw = json.loads((work / "fn.json").read_text())
        raw["card"]["columns"] = bad
        raw["sha256"] = document_sha256(raw)
        (work / "bad.json").write_text(json.dumps(raw))
        _one_line(*_run(["predict", "bad.json", "--at", "at.csv", "-o", "p.csv", "--force"], work),
                  "card's columns must be 1 column name(s)")


def test_a_full_release_whose_map_would_not_fit_is_refused_before_anything_is_read(work):
    """A 1,000,000-point --grid over 200 rows is a 10^6 x 200 map (and more of that size): refused in one line
    (the red-team's run of this ended in an out-of-memory traceback), before the ledger is touched."""
    ledger = _ledger(work, "big.sqlite")
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"age": rng.uniform(0, 80, 200), "w": rng.uniform(40, 100, 200)})
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + rng.normal(0, 3, 200)
    frame.to_csv(work / "two.csv", index=False)
    from dpgp_gpflow.cli import MAX_MAP_ENTRIES
    assert 1000 ** 2 * 200 > MAX_MAP_ENTRIES >= 300 ** 2 * 200  # the refused grid, and one that is not
    _one_line(*_run(["release", "two.csv", "--x", "age", "w", "--y", "height", *PUBLIC[:3], "--lengthscale", "20",
                     "20", *PUBLIC[5:], "--grid", "1000", "--ledger", ledger, "-o", "big.json"], work),
              "release at fewer inputs")
    _untouched(ledger)


def test_a_closed_pipe_ends_quietly(work):
    ledger = _ledger(work, "pipe.sqlite")
    code = "import sys, dpgp_gpflow.cli; sys.exit(dpgp_gpflow.cli.main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "budget", "show", str(ledger)], cwd=work, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader (| head) has gone
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err


@pytest.mark.parametrize("outputs", [[True, False] * 20, [str(v) for v in np.linspace(1, 2, 40)],
                                     [[True]] * 40])
def test_a_local_chunk_source_given_python_lists_checks_their_values_type(outputs):
    X = np.linspace(0.0, 1.0, 40)[:, None]
    with pytest.raises(TypeError, match="Y must hold real numbers"):
        dp.streaming.LocalChunks(X, outputs, chunk_size=10)


def test_engine_publish_clips_outputs_to_the_bound_its_plan_assumes():
    """issue 29 red-team: engine.publish released unclipped outputs (its docstring assumed the caller clipped).
    Outputs beyond the bound now give the release of the clipped outputs, seed for seed."""
    from dpgp_gpflow import engine
    from dpgp_gpflow.calibration import gaussian_multiplier

    rng = np.random.default_rng(0)
    C = rng.normal(size=(4, 12)) * 0.2
    s = gaussian_multiplier(1.0, 1e-3, "analytic")
    plan = engine.noise_plan(C, noise_multiplier=s, data_sensitivity=2.0, output_bound=1.0)
    y = rng.uniform(-1.0, 1.0, 12)
    wild = y.copy()
    wild[[0, 5]] = [50.0, -50.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = engine.publish(plan, np.clip(wild, -1.0, 1.0), np.zeros(4), np.zeros(4), epsilon=1.0, delta=1e-3,
                           data_sensitivity=2.0, output_bound=1.0, seed=9)
        b = engine.publish(plan, wild, np.zeros(4), np.zeros(4), epsilon=1.0, delta=1e-3, data_sensitivity=2.0,
                           output_bound=1.0, seed=9)
    np.testing.assert_array_equal(a.mean, b.mean)
