"""``dpgp release --y COL COL ...`` (issue 28): several private output columns released together, one
person's outputs per row, exactly as ``DPGPR`` (``DPGPRFITC`` with ``--sparse``) with ``Y`` [N, P] in the Python
API, seed for seed: with hyperparameters given, selected privately for all the columns together (``dpgp release``
without them, ``dpgp select``), and as a function (``--sparse``, then ``dpgp predict``); bad input refuses in one
line with nothing spent."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pandas as pd
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.io.loading import read_card
from dpgp_gpflow.models import kmeans_inducing_inputs
from dpgp_gpflow.selection import default_grid, select_hyperparameters

from test_cli import _ledger, _one_line, _run, _untouched

HYPER = ["--lengthscale", "20", "--variance", "100", "--noise", "10"]
BOUNDS = ["60", "180", "20", "120"]  # height, then weight


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("outputs")
    rng = np.random.default_rng(6)
    frame = pd.DataFrame({"age": rng.uniform(0, 70, 50)})
    frame["height"] = 100 + 0.8 * frame["age"].clip(upper=20) + rng.normal(0, 3, 50)
    frame["weight"] = 20 + 0.6 * frame["age"].clip(upper=25) + rng.normal(0, 2, 50)
    frame.to_csv(d / "data.csv", index=False)
    pd.DataFrame({"age": [5.0, 30.0, 60.0]}).to_csv(d / "at.csv", index=False)
    return d


def test_several_outputs_give_the_python_api_release(work):
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", *BOUNDS, *HYPER,
                      "--at", "at.csv", "--epsilon", "1", "--delta", "0.01", "--seed", "3", "--no-clip", "--quiet",
                      "-o", "two.json"], work)
    assert code == 0, err
    frame = pd.read_csv(work / "data.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPGPR((frame[["age"]].to_numpy(), frame[["height", "weight"]].to_numpy()),
                                gpflow.kernels.SquaredExponential(lengthscales=20.0, variance=100.0),
                                y_bounds=[[60.0, 180.0], [20.0, 120.0]], noise_variance=10.0,
                                hyperparameters_public=True)
        expected = model.release(np.array([[5.0], [30.0], [60.0]]),
                                 epsilon=1.0, delta=0.01, seed=3).unclipped()  # raw, as --no-clip
    released = dp.load(work / "two.json")
    assert released.mean.shape == (3, 2)
    np.testing.assert_allclose(released.mean, expected.mean, rtol=1e-9)
    np.testing.assert_allclose(released.noise_std, expected.noise_std, rtol=1e-9)
    card = read_card(work / "two.json")
    assert card["output_columns"] == ["height", "weight"]
    code, err = _run(["show", "two.json"], work)
    assert code == 0, err


def test_show_prints_one_mean_and_noise_column_per_output(work, capsys):
    capsys.readouterr()
    code, _ = _run(["show", "two.json"], work)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "mean_height" in line).split()
    assert code == 0 and header == ["age", "mean_height", "mean_weight", "noise_std_height", "noise_std_weight"]
    released = dp.load(work / "two.json")
    first = next(line for line in out.splitlines() if line.strip().startswith("5 ")).split()
    np.testing.assert_allclose([float(v) for v in first[1:]], [*released.mean[0], *released.noise_std[0]], rtol=1e-5)


def test_several_outputs_refusals_are_one_line_and_spend_nothing(work):
    ledger = _ledger(work, "outputs.sqlite")
    base = ["release", "data.csv", "--x", "age", "--epsilon", "1", "--delta", "0.01", "--ledger", ledger,
            "-o", "refused.json"]
    _one_line(*_run([*base, "--y", "height", "weight", "--bounds", "60", "180", "20", *HYPER, "--at", "at.csv"],
                    work), "one LO HI per --y column (4 numbers)")
    _one_line(*_run([*base, "--y", "height", "height", "--bounds", "60", "180", *HYPER, "--at", "at.csv"], work),
              "--y names the column(s) ['height'] more than once")
    _one_line(*_run([*base, "--y", "height", "age", "--bounds", "60", "180", *HYPER, "--at", "at.csv"], work),
              "--y 'age' is also an --x column")
    _one_line(*_run([*base, "--y", "height", "weight", "--bounds", *BOUNDS, "--at", "at.csv", "--selection-share", "0"],
                    work), "no hyperparameters")
    _one_line(*_run(["select", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", "60", "180", "20",
                     "--epsilon", "1", "--ledger", ledger], work), "one LO HI per --y column (4 numbers)")
    _untouched(ledger)
    assert not (work / "refused.json").exists()


def _frame(work):
    frame = pd.read_csv(work / "data.csv")
    return frame[["age"]].to_numpy(), frame[["height", "weight"]].to_numpy()


def _python_selection(work, model, epsilon, folds, seed, grid=default_grid, **release):
    """The Python API's private selection from the default grid (``grid``: the function giving it), seed for seed as
    the command line runs it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selection = select_hyperparameters(model, grid(model), epsilon=epsilon, folds=folds, seed=seed, **release)
    selection.apply(model)
    return selection


@pytest.mark.slow
def test_release_of_several_outputs_selects_their_hyperparameters_privately_as_the_python_api(work, small_default_grid):
    """No hyperparameters: 0.2 of epsilon selects them from the default grid for both columns together (a row's
    two outputs are one person), the release gets the rest; the same choice, mean and noise as the Python API."""
    ledger = _ledger(work, "select-two.sqlite")
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", *BOUNDS, "--at",
                      "at.csv", "--epsilon", "1", "--delta", "0.01", "--seed", "4", "--no-clip", "--ledger", ledger,
                      "-o", "selected.json"], work)
    assert code == 0, err
    assert "selected privately from the default grid" in err
    X, Y = _frame(work)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0),
                                y_bounds=[[60.0, 180.0], [20.0, 120.0]], noise_variance=1.0)
    selection = _python_selection(work, model, 0.2, 5, 4, grid=small_default_grid, epsilon_release=0.8,
                                  delta_release=0.01)
    assert selection.neighbours == "row (2 outputs)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model.release(np.array([[5.0], [30.0], [60.0]]),
                                 epsilon=0.8, delta=0.01, seed=4).unclipped()  # raw, as --no-clip
    card = read_card(work / "selected.json")
    hyper = card["hyperparameters"]
    assert hyper["lengthscales"] == pytest.approx(selection.chosen[".kernel.lengthscales"])
    assert hyper["kernel_variance"] == pytest.approx(selection.chosen[".kernel.variance"])
    assert hyper["noise_variance"] == pytest.approx(selection.chosen[".likelihood.variance"])
    assert card["output_columns"] == ["height", "weight"] and card["selection"]["epsilon"] == pytest.approx(0.2)
    released = dp.load(work / "selected.json")
    np.testing.assert_allclose(released.mean, expected.mean, rtol=1e-9)
    np.testing.assert_allclose(released.noise_std, expected.noise_std, rtol=1e-9)
    spent = dp.PrivacyAccountant.open(ledger)
    assert [e.epsilon for e in spent.ledger] == pytest.approx([0.2, 0.8]) and spent.spent == pytest.approx((1.0, 0.01))


def test_select_of_several_outputs_prints_the_python_api_choice(work, capsys):
    """dpgp select with two --y columns (given lengthscales, public variances): the Python API's choice, seed for
    seed; with -o it then releases both columns."""
    capsys.readouterr()
    code, err = _run(["select", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", *BOUNDS, "--epsilon",
                      "0.5", "--folds", "3", "--seed", "2", "--grid-lengthscale", "2", "20", "200", "--variance", "100",
                      "--noise", "10", "--release-epsilon", "1", "--release-delta", "0.01", "--at", "at.csv",
                      "--no-clip", "--quiet", "-o", "select-two.json"], work)
    assert code == 0, err
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    X, Y = _frame(work)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=1.0, variance=100.0),
                                y_bounds=[[60.0, 180.0], [20.0, 120.0]], noise_variance=10.0,
                                hyperparameters_public=True)
        grid = [{".kernel.lengthscales": ls} for ls in (2.0, 20.0, 200.0)]
        selection = select_hyperparameters(model, grid, epsilon=0.5, folds=3, seed=2, epsilon_release=1.0,
                                           delta_release=0.01)
        selection.apply(model)
        expected = model.release(np.array([[5.0], [30.0], [60.0]]),
                                 epsilon=1.0, delta=0.01, seed=2).unclipped()  # raw, as --no-clip
    assert out["lengthscale"] == pytest.approx(selection.chosen[".kernel.lengthscales"])
    assert (out["kernel_variance"], out["noise_variance"], out["configurations"]) == (100.0, 10.0, 3)
    released = dp.load(work / "select-two.json")
    np.testing.assert_allclose(released.mean, expected.mean, rtol=1e-9)
    np.testing.assert_allclose(released.noise_std, expected.noise_std, rtol=1e-9)


def test_sparse_function_of_several_outputs_then_predict(work):
    """--sparse with several --y: DPGPRFITC's function of both columns (hyperparameters given), as the Python API's
    release_function seed for seed; dpgp predict writes a mean, variance and noise std per output column."""
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", *BOUNDS, *HYPER,
                      "--sparse", "6", "--epsilon", "1", "--delta", "0.01", "--seed", "3", "--no-clip", "--quiet",
                      "-o", "two-fn.json"], work)
    assert code == 0, err
    X, Y = _frame(work)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(lengthscales=20.0, variance=100.0),
                                    kmeans_inducing_inputs(X, 6), y_bounds=[[60.0, 180.0], [20.0, 120.0]],
                                    noise_variance=10.0, hyperparameters_public=True)
        expected = model.release_function(epsilon=1.0, delta=0.01, seed=3).unclipped()  # raw, as --no-clip
    released = dp.load(work / "two-fn.json")
    np.testing.assert_allclose(released.release.mean, expected.release.mean, rtol=1e-9)
    np.testing.assert_allclose(released.release.noise_std, expected.release.noise_std, rtol=1e-9)
    assert read_card(work / "two-fn.json")["output_columns"] == ["height", "weight"]
    code, err = _run(["predict", "two-fn.json", "--at", "at.csv", "-o", "two-pred.csv", "--quiet"], work)
    assert code == 0, err
    table = pd.read_csv(work / "two-pred.csv")
    assert list(table.columns) == ["age", "mean_height", "mean_weight", "variance_height", "variance_weight",
                                   "noise_std_height", "noise_std_weight"]
    pred = expected.predict(np.array([[5.0], [30.0], [60.0]]))
    np.testing.assert_allclose(table[["mean_height", "mean_weight"]].to_numpy(), pred.mean, rtol=1e-6)
    np.testing.assert_allclose(table[["noise_std_height", "noise_std_weight"]].to_numpy(), pred.noise_std, rtol=1e-6)


@pytest.mark.slow
def test_sparse_function_of_several_outputs_with_private_selection(work, small_default_grid):
    """--sparse and no hyperparameters with several --y: selected privately for both columns, then released."""
    ledger = _ledger(work, "sparse-select.sqlite")
    code, err = _run(["release", "data.csv", "--x", "age", "--y", "height", "weight", "--bounds", *BOUNDS, "--sparse",
                      "6", "--epsilon", "1", "--delta", "0.01", "--ledger", ledger, "-o", "two-fn-sel.json"], work)
    assert code == 0, err
    assert "selected privately from the default grid" in err
    card = read_card(work / "two-fn-sel.json")
    assert card["selection"]["epsilon"] == pytest.approx(0.2) and card["output_columns"] == ["height", "weight"]
    assert dp.load(work / "two-fn-sel.json").release.mean.shape == (6, 2)
    assert dp.PrivacyAccountant.open(ledger).spent == pytest.approx((1.0, 0.01))
