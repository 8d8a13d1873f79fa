"""Issue 29: the second red-team pass (on the code after the first round of fixes). Each case is
refused in one line with nothing spent and nothing overwritten, or handled."""

from __future__ import annotations

import contextlib
import io
import json
import os
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
        from dpgp_gpflow.io.tables import columns, csv_format, read_table
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


# ---------------------------------------------------------------------------------------------
# Issue 34 (the third review): the command line's findings. Each refused in one line, nothing spent.


def test_a_constant_input_without_hyperparameters_is_refused_before_anything_is_reserved(work):
    """The default grid's lengthscales come from the inputs' spread: a constant --x column has none. Was a
    ValueError traceback from default_grid, inside the reservation."""
    ledger = _ledger(work, "constant.sqlite")
    frame = pd.read_csv(work / "data.csv").assign(site=3.0)
    frame.to_csv(work / "constant.csv", index=False)
    code, err = _run(["release", "constant.csv", "--x", "site", "--y", "height", "--bounds", "40", "200", "--epsilon",
                      "1", "--delta", "1e-5", "--grid", "5", "--ledger", ledger, "-o", "constant.json"], work)
    _one_line(code, err, "cannot build the default grid")
    assert "give --lengthscale, --variance and --noise" in err
    _untouched(ledger)
    assert not (work / "constant.json").exists()


def test_an_epsilon_and_delta_whose_noise_overflows_are_refused_in_one_line(work):
    """--epsilon 1e-300 --delta 1e-300: was a FloatingPointError traceback. Whatever the library raises for
    a noise scale beyond the floats is one line, with nothing held or charged."""
    ledger = _ledger(work, "tiny.sqlite")
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", *PUBLIC[:9], "--epsilon", "1e-300",
                      "--delta", "1e-300", "--grid", "5", "--ledger", ledger, "-o", "tiny.json"], work)
    _one_line(code, err, "")
    _untouched(ledger)
    assert not (work / "tiny.json").exists()


@pytest.mark.parametrize("share", ["1e-320", "1e-4", "0.000999", "1", "1.5", "-0.2", "-1e-3", "nan", "inf", "abc"])
def test_a_selection_share_outside_its_rule_is_refused_when_parsed(work, share):
    """--selection-share 1e-320 gave two NumPy RuntimeWarnings and 'utilities must be finite'. The share is
    0 (no selection) or in [0.001, 1): anything else is refused by the parser, before any file is read
    (nofile.csv is never looked for)."""
    from dpgp_gpflow.cli import main

    err = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err), contextlib.chdir(work):
        warnings.simplefilter("always")
        with pytest.raises(SystemExit) as exit_:
            main(["release", "nofile.csv", "--x", "age", "--y", "height", "--bounds", "40", "200", "--epsilon", "1",
                  "--delta", "1e-5", "--grid", "5", "--selection-share", share, "-o", "share.json"])
    assert exit_.value.code == 2 and not caught
    _one_line(2, err.getvalue(), "argument --selection-share: ")
    assert "[0.001, 1)" in err.getvalue() and "expected" not in err.getvalue()


def test_a_selection_share_in_its_rule_is_accepted():
    from dpgp_gpflow.cli import build_parser

    for share, value in (("0", 0.0), ("0.001", 0.001), ("1e-3", 0.001), ("0.5", 0.5), ("0.999", 0.999)):
        args = build_parser().parse_args(["release", "d.csv", "--x", "a", "--y", "b", "--bounds", "0", "1",
                                          "--epsilon", "1", "--delta", "0.1", "--selection-share", share, "-o", "o"])
        assert args.selection_share == value


#: The required arguments of each command that takes numeric options (the numeric option under test is
#: appended: argparse keeps its last occurrence).
_REQUIRED = {
    "dpgp release": ["release", "d.csv", "--x", "a", "--y", "b", "--bounds", "0", "1", "--epsilon", "1", "--delta",
                     "0.1", "-o", "o.json"],
    "dpgp select": ["select", "d.csv", "--x", "a", "--y", "b", "--bounds", "0", "1", "--epsilon", "1"],
    "dpgp budget init": ["budget", "init", "f.sqlite", "--epsilon", "1", "--delta", "0.1"],
    "dpgp demo": ["demo"],
}


@pytest.mark.parametrize("text", ["-1e-3", "-1E+2", "-.5e1", "-2.5e-300"])
def test_every_numeric_option_reads_a_negative_number_in_scientific_notation(capsys, text):
    """--bounds -1e-3 10 was "expected at least one argument" (argparse took -1e-3 for an option) while -0.001
    worked. Every option of every command that reads a number reads it as one: a float option gets its
    value (and refuses it later if it must be positive), an int option says it is not an integer, the
    selection share states its rule; none says "expected ... argument"."""
    from test_cli import _parsers

    from dpgp_gpflow.cli import build_parser, selection_share_value

    number = float(text)
    seen = set()
    for name, parser in _parsers():
        for action in parser._actions:
            if not action.option_strings or action.type not in (float, int, selection_share_value):
                continue
            option = action.option_strings[-1]
            seen.add(option)
            assert name in _REQUIRED, (name, option)  # a command with numeric options not covered here
            extra = [text, "10"] if option == "--bounds" else [text]
            try:
                args = build_parser().parse_args([*_REQUIRED[name], option, *extra])
            except SystemExit as exc:
                assert exc.code == 2
                message = capsys.readouterr().err
                assert "expected" not in message, (name, option, message)
                assert action.type is not float, (name, option, message)  # a float option reads it
                assert (f"invalid int value: '{text}'" in message if action.type is int
                        else "must be 0 (no selection)" in message), (name, option, message)
                continue
            assert action.type is float, (name, option)
            value = getattr(args, action.dest)
            expected = [number, 10.0] if option == "--bounds" else [number] if action.nargs in ("+", "*") else number
            assert value == expected, (name, option, value)
    assert {"--bounds", "--epsilon", "--delta", "--variance", "--noise", "--lengthscale", "--grid-lengthscale",
            "--release-epsilon", "--release-delta", "--selection-share", "--seed", "--grid", "--sparse",
            "--folds", "--split-seed"} <= seen


def test_bounds_below_zero_in_scientific_notation_release(work):
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "--bounds", "-1e-3", "200",
                      *PUBLIC[3:], "--grid", "3", "--seed", "5", "-o", "negative.json"], work)
    assert code == 0, err
    released = dp.load(work / "negative.json")
    assert released.y_bounds == (-0.001, 200.0)
    assert np.all((released.mean >= -0.001) & (released.mean <= 200.0))  # clipped to the bounds as given


def _read_only(path: Path) -> None:
    """Make ``path`` unwritable, even for root (``chattr +i``: root ignores the mode bits)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root and chattr +i is not available: cannot make a file read-only")


def test_a_read_only_ledger_is_refused_in_one_line(work):
    ledger = _ledger(work, "read-only.sqlite")
    before = ledger.read_bytes()
    _read_only(ledger)
    try:
        code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", *PUBLIC, "--grid", "3", "--ledger",
                          ledger, "-o", "read-only.json"], work)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(ledger)], capture_output=True)
        ledger.chmod(0o644)
    _one_line(code, err, "")
    assert ledger.read_bytes() == before and not (work / "read-only.json").exists()
    _untouched(ledger)
