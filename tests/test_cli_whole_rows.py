"""``dpgp release --private-inputs --x-bounds ...`` (issue 36 item 6): the whole-row release from the command line,
in this process, against the Python API with the same seed (statistics, choice, predictions), the ledger's one
charge against the analytic Gaussian multiplier computed here (tests/reference.py), and its one-line refusals."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Tuple

import gpflow
import numpy as np
import pandas as pd
import pytest
from scipy.stats import qmc

import dpgp_gpflow as dp
from dpgp_gpflow.cli import main

from reference import reference_multiplier

BOX = [(0.0, 80.0), (40.0, 100.0)]  # age, weight: public, declared without the data
EPSILON, DELTA = 1.0, 1e-3


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli_whole_rows")
    rng = np.random.default_rng(1)
    n = 50
    frame = pd.DataFrame({"age": rng.uniform(0, 80, n), "weight": rng.uniform(40, 100, n)})
    frame.loc[0, "age"] = 95.0  # one row outside the box: clipped to it (by default)
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + 0.1 * frame["weight"] + rng.normal(0, 3, n)
    frame["person"] = np.arange(n) // 2  # two rows per person
    frame.to_csv(d / "data.csv", index=False)
    frame.loc[1:].to_csv(d / "inside.csv", index=False)
    pd.DataFrame({"age": [5.0, 30.0, 60.0, 120.0], "weight": [50.0, 70.0, 90.0, 60.0]}).to_csv(d / "new.csv",
                                                                                                 index=False)
    return d


def _run(argv: list, work: Path) -> Tuple[int, str, str]:
    """``dpgp argv`` in this process, in ``work``: (exit code, stdout, stderr); the package's warnings as the
    command line prints them (one line each)."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            contextlib.chdir(work):
        warnings.simplefilter("always")
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _ledger(work: Path, name: str) -> Path:
    assert _run(["budget", "init", name, "--epsilon", "5", "--delta", "0.5"], work)[0] == 0
    return work / name


def _data(work: Path, name: str = "data.csv") -> Tuple[np.ndarray, np.ndarray]:
    frame = pd.read_csv(work / name)
    return frame[["age", "weight"]].to_numpy(), frame[["height"]].to_numpy()


def _assert_same_release(got, expected) -> None:
    for key in ("S", "b", "q"):
        np.testing.assert_allclose(got.statistics[key], expected.statistics[key], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.statistics_noise_std[key], expected.statistics_noise_std[key], rtol=1e-12)


def test_release_with_given_hyperparameters_is_the_python_apis_charged_once(work):
    ledger = _ledger(work, "given.sqlite")
    code, _, stderr = _run(["release", "data.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60", "180",
                            "--private-inputs", "--x-bounds", *np.ravel(BOX), "--sparse", "9", "--inducing", "grid",
                            "--lengthscale", "20", "30", "--variance", "100", "--noise", "10", "--epsilon", EPSILON,
                            "--delta", DELTA, "--seed", "7", "--ledger", ledger, "-o", "given.json"], work)
    assert code == 0, stderr
    # the one row outside the box is counted (the box is public, the count for the data owner only)
    assert "dpgp: warning: 1 of 50 private rows had inputs outside the public box" in stderr
    X, Y = _data(work)
    Xc = np.clip(X, [lo for lo, _ in BOX], [hi for _, hi in BOX])  # the clipping rule, here in NumPy
    axes = [np.linspace(lo, hi, 3) for lo, hi in BOX]  # the grid from the box alone, here in NumPy
    Z = np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=[20.0, 30.0], variance=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPSGPR((Xc, Y), kernel, Z, noise_variance=10.0, y_bounds=(60.0, 180.0), x_bounds=BOX,
                                 private_inputs=True, hyperparameters_public=True)
        expected = model.release_function(epsilon=EPSILON, delta=DELTA, seed=7)
    got = dp.load(work / "given.json")
    assert isinstance(got, dp.whole_rows.WholeRowsRelease)
    np.testing.assert_array_equal(got.features.Z, Z)
    _assert_same_release(got, expected)
    assert (got.variances, got.kernel_variance, got.noise_variance) == ("given", 100.0, 10.0)
    assert got.neighbours == "row (inputs and outputs)" and got.selection is None
    # charged once: one event at (epsilon, delta) with mu = 1 / s, s the analytic multiplier (computed here)
    events = dp.PrivacyAccountant.open(ledger).ledger
    assert len(events) == 1 and dp.PrivacyAccountant.open(ledger).held == (0.0, 0.0)
    assert (events[0].epsilon, events[0].delta, events[0].kind) == (EPSILON, DELTA, "gaussian")
    assert events[0].mu == pytest.approx(1.0 / reference_multiplier(EPSILON, DELTA), rel=1e-8)
    # dpgp show (no TensorFlow needed) and dpgp predict (free) on the file
    code, stdout, stderr = _run(["show", "given.json"], work)
    assert code == 0 and "WholeRowsRelease" in stdout and "neighbours: row (inputs and outputs)" in stdout, stderr
    code, _, stderr = _run(["predict", "given.json", "--at", "new.csv", "-o", "given.csv", "--quiet"], work)
    assert code == 0, stderr
    pred = pd.read_csv(work / "given.csv")
    assert list(pred.columns) == ["age", "weight", "mean", "variance", "noise_std"] and len(pred) == 4
    reference = expected.predict(pred[["age", "weight"]].to_numpy())
    for name in ("mean", "variance", "noise_std"):
        np.testing.assert_allclose(pred[name], getattr(reference, name)[:, 0], rtol=1e-9)
    assert np.all((pred["mean"] >= 60.0) & (pred["mean"] <= 180.0))  # clipped to the bounds (free)
    assert len(dp.PrivacyAccountant.open(ledger).ledger) == 1  # predictions cost nothing


@pytest.mark.filterwarnings("ignore::dpgp_gpflow.VarianceFitWarning")  # a small problem's fit may end on an edge
def test_release_without_hyperparameters_chooses_them_as_the_python_api(work):
    ledger = _ledger(work, "default.sqlite")
    code, _, stderr = _run(["release", "inside.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60",
                            "180", "--private-inputs", "--x-bounds", *np.ravel(BOX), "--sparse", "12",
                            "--no-clip-inputs", "--epsilon", EPSILON, "--delta", DELTA, "--seed", "3", "--ledger",
                            ledger, "-o", "default.json", "--quiet"], work)
    assert code == 0, stderr
    X, Y = _data(work, "inside.csv")
    lo, hi = np.array(BOX).T
    Z = qmc.scale(qmc.Halton(d=2, scramble=True, seed=0).random(12), lo, hi)  # the default design, from the box
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPSGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=np.ones(2)), Z,
                                 y_bounds=(60.0, 180.0), x_bounds=BOX, private_inputs=True)
        expected = model.release_function(epsilon=EPSILON, delta=DELTA, seed=3)  # the API's defaults
    got = dp.load(work / "default.json")
    np.testing.assert_allclose(got.features.Z, Z, rtol=1e-12)
    _assert_same_release(got, expected)
    assert got.variances == "fit" and expected.variances == "fit"
    np.testing.assert_allclose(got.lengthscales, expected.lengthscales, rtol=1e-12)
    np.testing.assert_allclose((got.kernel_variance, got.noise_variance),
                               (expected.kernel_variance, expected.noise_variance), rtol=1e-9)
    # the default grid: 0.1, 0.2 and 0.4 of the box's width per column (docs/guides/whole_rows.md), chosen
    # inside the one release
    width = hi - lo
    np.testing.assert_allclose(np.asarray(got.selection["lengthscales"], dtype=float),
                               [f * width for f in (0.1, 0.2, 0.4)], rtol=1e-12)
    events = dp.PrivacyAccountant.open(ledger).ledger
    assert len(events) == 1 and (events[0].epsilon, events[0].delta) == (EPSILON, DELTA)
    assert events[0].mu == pytest.approx(1.0 / reference_multiplier(EPSILON, DELTA), rel=1e-8)


WHOLE = ["--x", "age", "weight", "--y", "height", "--bounds", "60", "180", "--epsilon", "1", "--delta", "1e-3",
         "--sparse", "9"]
BOX_ARGS = ["--x-bounds", *map(str, np.ravel(BOX))]
REFUSALS = {
    "box without --private-inputs": ([*BOX_ARGS], "--x-bounds is the public box of private inputs"),
    "no box": (["--private-inputs"], "--private-inputs needs --x-bounds"),
    "odd count": (["--private-inputs", "--x-bounds", "0", "80", "40"], "one LO HI pair per --x column (4 number"),
    "one pair for two columns": (["--private-inputs", "--x-bounds", "0", "80"], "got 2 number(s)"),
    "lo >= hi": (["--private-inputs", "--x-bounds", "80", "0", "40", "100"], "lo < hi"),
    "lo == hi": (["--private-inputs", "--x-bounds", "0", "80", "40", "40"], "lo < hi"),
    "not finite": (["--private-inputs", "--x-bounds", "0", "inf", "40", "100"], "finite"),
    "kmeans": (["--private-inputs", *BOX_ARGS, "--inducing", "kmeans"], "k-means on the private inputs"),
    "grid of a non-square": (["--private-inputs", *BOX_ARGS, "--inducing", "grid", "--sparse", "10"], "m^2"),
    "no --sparse": (["--private-inputs", *BOX_ARGS, "--sparse", "0"], "--sparse must be at least 1"),
    "--at": (["--private-inputs", *BOX_ARGS, "--at", "new.csv"], "--at with --private-inputs"),
    "--grid": (["--private-inputs", *BOX_ARGS, "--grid", "5"], "--grid with --private-inputs"),
    "partial variances": (["--private-inputs", *BOX_ARGS, "--variance", "10"], "--variance given without --noise"),
    "selection share": (["--private-inputs", *BOX_ARGS, "--selection-share", "0.2"], "--selection-share with"),
    "objective": (["--private-inputs", *BOX_ARGS, "--objective", "mse"], "--objective with --private-inputs"),
    "box design without private inputs": (["--inducing", "halton"], "--inducing halton builds"),
    "outside the box, clipping off": (["--private-inputs", *BOX_ARGS, "--no-clip-inputs"],
                                      "outside the public box x_bounds and clipping is off (--no-clip-inputs)"),
    "more rows of inducing inputs than rows": (["--private-inputs", *BOX_ARGS, "--sparse", "64"],
                                               "between 1 and the number of rows (50)"),
    "over budget": (["--private-inputs", *BOX_ARGS, "--epsilon", "6"], "budget"),
    "residual without private inputs": (["--residual", "--lengthscale", "20"], "--residual releases residual sums"),
    "residual fractions not summing to 1": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--residual",
                                             "0.5", "0.4"], "summing to 1 (the statistics' first"),
    "one residual fraction": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--residual", "1"],
                              "two or more fractions"),
    "residual classifier": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--variance", "4", "--classes",
                             "2", "--residual"], "without --classes"),
    "residual nonsense": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--residual", "half", "half"],
                          "--residual takes no number (the default fractions), histogram"),
    "histogram without variances": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--residual",
                                     "histogram"], "--residual histogram needs --lengthscale, --variance and --noise"),
    "histogram with fractions": (["--private-inputs", *BOX_ARGS, "--lengthscale", "20", "--variance", "100",
                                  "--noise", "10", "--residual", "histogram", "0.5"], "--residual takes no number"),
    "histogram grid over the cap": (["--private-inputs", *BOX_ARGS, "--lengthscale", "0.5", "--variance", "100",
                                     "--noise", "10", "--residual", "histogram"],
                                    "320^2 cells (half a lengthscale per cell over --x-bounds), more than 4096: use "
                                    "--residual without histogram"),
}


def test_refusals_are_one_line_and_spend_nothing(work):
    ledger = _ledger(work, "refused.sqlite")
    for case, (extra, message) in REFUSALS.items():
        code, _, stderr = _run(["release", "data.csv", *WHOLE, *extra, "--ledger", ledger, "-o", "refused.json"],
                               work)
        lines = stderr.strip().splitlines()
        assert code == 2 and lines and lines[-1].startswith("dpgp: error:") and message in lines[-1], (case, stderr)
        assert all(line.startswith("dpgp: warning:") for line in lines[:-1]), (case, stderr)
        assert not (work / "refused.json").exists(), case
    acc = dp.PrivacyAccountant.open(ledger)
    assert acc.ledger == () and acc.held == (0.0, 0.0)


def test_a_private_inputs_bad_cell_is_refused_without_its_value(work):
    frame = pd.read_csv(work / "inside.csv").astype({"age": object})
    frame.loc[3, "age"] = "12,345"  # what a value looks like is private too
    frame.to_csv(work / "bad.csv", index=False)
    code, _, stderr = _run(["release", "bad.csv", *WHOLE, "--private-inputs", *BOX_ARGS, "-o", "bad.json"], work)
    assert code == 2 and stderr.count("\n") == 1 and "the private column 'age'" in stderr, stderr
    assert "12" not in stderr.split("line 5")[-1] and "345" not in stderr, stderr
    assert not (work / "bad.json").exists()


def test_groups_release_protects_persons_as_the_python_api(work):
    code, _, stderr = _run(["release", "inside.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60", "180",
                            "--groups", "person", "--private-inputs", "--x-bounds", *np.ravel(BOX), "--sparse", "8",
                            "--inducing", "sobol", "--lengthscale", "20", "--variance", "100", "--noise", "10",
                            "--epsilon", EPSILON, "--delta", DELTA, "--seed", "5", "-o", "persons.json", "--quiet"],
                           work)
    assert code == 0, stderr
    frame = pd.read_csv(work / "inside.csv")
    X, Y = frame[["age", "weight"]].to_numpy(), frame[["height"]].to_numpy()
    ids = frame["person"].to_numpy()  # persons 0 to 24, two rows each but person 0 (its first row is not here)
    lo, hi = np.array(BOX).T
    Z = qmc.scale(qmc.Sobol(d=2, scramble=True, seed=0).random_base2(3), lo, hi)  # 8 points, from the box
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPSGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=20.0, variance=100.0), Z,
                                 noise_variance=10.0, y_bounds=(60.0, 180.0), x_bounds=BOX, private_inputs=True,
                                 groups=ids, hyperparameters_public=True)
        expected = model.release_function(epsilon=EPSILON, delta=DELTA, seed=5)
    got = dp.load(work / "persons.json")
    np.testing.assert_allclose(got.features.Z, Z, rtol=1e-12)
    _assert_same_release(got, expected)
    assert got.neighbours == "person (groups, up to 2 rows) (inputs and outputs)"
    card = dp.io.read_card(work / "persons.json")
    assert card["groups"] == {"column": "person", "persons": 25, "largest_rows": 2}


@pytest.mark.parametrize("fractions, lengthscales", [((), (20.0, 30.0)), ((0.6, 0.4), (20.0, 30.0)), ((), None)])
def test_residual_releases_are_the_python_apis_charged_once(work, fractions, lengthscales):
    """``--residual`` (the default fractions) or ``--residual F1 F2``: the statistics then residual releases, as
    ``release_function(..., residual_fractions=...)`` with the same seed (without ``--lengthscale``: the default
    grid's candidates in the first stage, the chosen one's residual releases); one ledger event at (epsilon,
    delta); every stage's multiplier ``s / sqrt(f_j)`` (Gaussian-DP split, computed here) stated by ``dpgp show``."""
    name = f"residual{len(fractions)}{'' if lengthscales else 'grid'}"
    given = [] if lengthscales is None else ["--lengthscale", *lengthscales]
    ledger = _ledger(work, f"{name}.sqlite")
    code, _, stderr = _run(["release", "inside.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60", "180",
                            "--private-inputs", "--x-bounds", *np.ravel(BOX), "--sparse", "9", "--inducing", "grid",
                            *given, "--variance", "100", "--noise", "10", "--epsilon", EPSILON,
                            "--delta", DELTA, "--seed", "11", "--ledger", ledger, "--residual", *fractions,
                            "-o", f"{name}.json", "--quiet"], work)
    assert code == 0, stderr
    X, Y = _data(work, "inside.csv")
    axes = [np.linspace(lo, hi, 3) for lo, hi in BOX]
    Z = np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    expected_fractions = fractions or (0.5, 0.25, 0.25)  # the default (docs/whole_rows.md#residual-releases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = gpflow.kernels.SquaredExponential(lengthscales=lengthscales or np.ones(2), variance=100.0)
        model = dp.models.DPSGPR((X, Y), kernel, Z, noise_variance=10.0, y_bounds=(60.0, 180.0), x_bounds=BOX,
                                 private_inputs=True, hyperparameters_public=True)
        expected = model.release_function(epsilon=EPSILON, delta=DELTA, seed=11, lengthscales=None if lengthscales
                                          else "default", residual_fractions=fractions or "default")
    got = dp.load(work / f"{name}.json")
    assert type(got).__name__ == "ResidualRelease"
    _assert_same_release(got, expected)
    np.testing.assert_allclose(got.statistics["residual_b"], expected.statistics["residual_b"], rtol=1e-12,
                               atol=1e-12)
    assert got.statistics["residual_b"].shape[0] == len(expected_fractions) - 1
    Xnew = np.array([[5.0, 50.0], [60.0, 90.0]])
    np.testing.assert_allclose(got.predict(Xnew).mean, expected.predict(Xnew).mean, rtol=1e-10)
    s = reference_multiplier(EPSILON, DELTA)
    events = dp.PrivacyAccountant.open(ledger).ledger
    assert len(events) == 1 and (events[0].epsilon, events[0].delta) == (EPSILON, DELTA)
    assert events[0].mu == pytest.approx(1.0 / s, rel=1e-8)
    code, stdout, stderr = _run(["show", f"{name}.json"], work)
    assert code == 0, stderr
    assert f"whole-row statistics + {len(expected_fractions) - 1} residual release(s)" in stdout
    shown = {line.split(":", 1)[0].strip(): line.split(":", 1)[1] for line in stdout.splitlines()[1:] if ":" in line}
    np.testing.assert_allclose(json.loads(shown["residual_fractions"]), expected_fractions, rtol=1e-12)
    np.testing.assert_allclose(json.loads(shown["stage_multipliers"]), s / np.sqrt(expected_fractions), rtol=1e-8)
    if lengthscales is None:  # the default grid: 0.1, 0.2 and 0.4 of each column's width (computed here)
        width = np.diff(np.array(BOX), axis=1)[:, 0]
        np.testing.assert_allclose(json.loads(shown["lengthscale_candidates"]), [f * width for f in (0.1, 0.2, 0.4)],
                                   rtol=1e-12)
        np.testing.assert_array_equal(got.first_stage.lengthscales, expected.first_stage.lengthscales)


def test_histogram_release_then_show_and_predict(work):
    """``--residual histogram``: the histogram scheme as ``release_function(..., residual_fractions="histogram")``
    with the same seed (the stages' released values equal), charged once at (epsilon, delta) with mu = 1 / s
    (computed here); ``dpgp show`` prints its one line and every stage's multiplier s / sqrt(f_j); ``dpgp predict``
    (free) gives the API's predictions."""
    ledger = _ledger(work, "histogram.sqlite")
    code, _, stderr = _run(["release", "inside.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60", "180",
                            "--private-inputs", "--x-bounds", *np.ravel(BOX), "--sparse", "9", "--inducing", "grid",
                            "--lengthscale", "20", "30", "--variance", "100", "--noise", "10", "--epsilon", EPSILON,
                            "--delta", DELTA, "--seed", "13", "--ledger", ledger, "--residual", "histogram",
                            "-o", "histogram.json", "--quiet"], work)
    assert code == 0, stderr
    X, Y = _data(work, "inside.csv")
    axes = [np.linspace(lo, hi, 3) for lo, hi in BOX]
    Z = np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = gpflow.kernels.SquaredExponential(lengthscales=[20.0, 30.0], variance=100.0)
        model = dp.models.DPSGPR((X, Y), kernel, Z, noise_variance=10.0, y_bounds=(60.0, 180.0), x_bounds=BOX,
                                 private_inputs=True, hyperparameters_public=True)
        expected = model.release_function(epsilon=EPSILON, delta=DELTA, seed=13, residual_fractions="histogram")
    got = dp.load(work / "histogram.json")
    assert type(got).__name__ == "HistogramResidualRelease" and got.neighbours == "row (inputs and outputs)"
    assert got.centres.shape == (64, 2)  # 8 cells of half the shortest lengthscale over the widest column, squared
    for key, value in expected.statistics.items():
        np.testing.assert_allclose(got.statistics[key], value, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.statistics_noise_std[key], expected.statistics_noise_std[key], rtol=1e-12)
    s = reference_multiplier(EPSILON, DELTA)
    events = dp.PrivacyAccountant.open(ledger).ledger
    assert len(events) == 1 and (events[0].epsilon, events[0].delta) == (EPSILON, DELTA)
    assert events[0].mu == pytest.approx(1.0 / s, rel=1e-8)
    code, stdout, stderr = _run(["show", "histogram.json"], work)
    assert code == 0, stderr
    assert stdout.splitlines()[0] == f"histogram.json: {got!r}"
    assert "HistogramResidualRelease(mechanism='whole-row histogram + 4 residual release(s)'" in stdout
    shown = {line.split(":", 1)[0].strip(): line.split(":", 1)[1] for line in stdout.splitlines()[1:] if ":" in line}
    fractions = (0.3, 0.15, 0.15, 0.15, 0.25)  # the scheme's (docs/whole_rows.md#residual-releases)
    np.testing.assert_allclose(json.loads(shown["stage_multipliers"]), s / np.sqrt(fractions), rtol=1e-8)
    code, _, stderr = _run(["predict", "histogram.json", "--at", "new.csv", "-o", "histogram.csv", "--quiet"], work)
    assert code == 0, stderr
    pred = pd.read_csv(work / "histogram.csv")
    reference = expected.predict(pred[["age", "weight"]].to_numpy())
    for name in ("mean", "variance", "noise_std"):
        np.testing.assert_allclose(pred[name], getattr(reference, name)[:, 0], rtol=1e-9)
    assert len(dp.PrivacyAccountant.open(ledger).ledger) == 1  # predictions cost nothing
