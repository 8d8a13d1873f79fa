"""``dpgp release --y COL COL ...`` (issue 28): several private output columns released together, one
person's outputs per row, exactly as ``DPGPR`` with ``Y`` [N, P] in the Python API; the parts that do not
support several outputs refuse in one line with nothing spent."""

from __future__ import annotations

import warnings
from pathlib import Path

import gpflow
import numpy as np
import pandas as pd
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.io.loading import read_card

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
        expected = model.release(np.array([[5.0], [30.0], [60.0]]), epsilon=1.0, delta=0.01, seed=3)
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
    _one_line(*_run([*base, "--y", "height", "weight", "--bounds", *BOUNDS, *HYPER, "--sparse", "5"], work),
              "several outputs per row are released by DPGPR only")
    _one_line(*_run([*base, "--y", "height", "weight", "--bounds", *BOUNDS, "--at", "at.csv"], work),
              "hyperparameter selection does not support several outputs")  # no hyperparameters given
    _untouched(ledger)
    assert not (work / "refused.json").exists()
