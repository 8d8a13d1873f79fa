"""``dpgp release --groups COL`` (issue 28): a public column of person identifiers makes the release
protect all of a person's rows, exactly as ``groups=`` does in the Python API; refusals are one line
with nothing spent."""

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

from test_cli import _ledger, _one_line, _run, _untouched

HYPER = ["--lengthscale", "15", "--variance", "100", "--noise", "10"]
BOUNDS = ("60", "180")


@pytest.fixture(scope="module")
def visits(tmp_path_factory) -> Path:
    """Persons with 1 to 4 visits each, at nearby ages; identifiers are text (as people write them)."""
    d = tmp_path_factory.mktemp("groups")
    rng = np.random.default_rng(3)
    rows = []
    for person in range(25):
        age = rng.uniform(0, 70)
        for _ in range(rng.integers(1, 5)):
            a = age + rng.uniform(0, 2)
            rows.append({"person": f"P{person:03d}", "age": a,
                         "height": 100 + 0.8 * min(a, 20) + rng.normal(0, 3)})
    frame = pd.DataFrame(rows)
    frame.to_csv(d / "visits.csv", index=False)
    pd.DataFrame({"age": [5.0, 30.0, 60.0]}).to_csv(d / "at.csv", index=False)
    return d


def _release(visits: Path, out: str, *extra) -> dict:
    code, err = _run(["release", "visits.csv", "--x", "age", "--y", "height", "--bounds", *BOUNDS, *HYPER,
                      "--at", "at.csv", "--epsilon", "1", "--delta", "0.01", "--seed", "5", "--no-clip", "--quiet",
                      "-o", out, *extra], visits)
    assert code == 0, err
    return read_card(visits / out)


def test_groups_column_gives_the_python_api_release_with_groups(visits):
    card = _release(visits, "grouped.json", "--groups", "person")
    frame = pd.read_csv(visits / "visits.csv")
    sizes = frame.groupby("person").size()
    assert card["releases"][0]["neighbours"].startswith("person")
    assert card["groups"] == {"column": "person", "persons": int(sizes.size), "largest_rows": int(sizes.max())}
    # the same release through the Python API, persons coded independently of the command line
    codes = frame["person"].map({p: i for i, p in enumerate(sorted(frame["person"].unique()))}).to_numpy()
    kernel = gpflow.kernels.SquaredExponential(lengthscales=15.0, variance=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dp.models.DPGPR((frame[["age"]].to_numpy(), frame[["height"]].to_numpy()), kernel,
                                y_bounds=(60.0, 180.0), noise_variance=10.0, hyperparameters_public=True, groups=codes)
        expected = model.release(np.array([[5.0], [30.0], [60.0]]),
                                 epsilon=1.0, delta=0.01, seed=5).unclipped()  # raw, as --no-clip
    released = dp.load(visits / "grouped.json")
    np.testing.assert_allclose(released.noise_std, expected.noise_std, rtol=1e-9)
    np.testing.assert_allclose(released.mean, expected.mean, rtol=1e-9)
    # protecting persons costs more noise than protecting one row
    per_row = _release(visits, "per_row.json")
    assert per_row["releases"][0]["neighbours"] == "row" and "groups" not in per_row
    assert np.all(released.noise_std > dp.load(visits / "per_row.json").noise_std)


def test_groups_column_refusals_are_one_line_and_spend_nothing(visits):
    ledger = _ledger(visits, "groups.sqlite")
    base = ["release", "visits.csv", "--x", "age", "--y", "height", "--bounds", *BOUNDS, *HYPER, "--at", "at.csv",
            "--epsilon", "1", "--delta", "0.01", "--ledger", ledger, "-o", "refused.json"]
    _one_line(*_run([*base, "--groups", "height"], visits), "--groups 'height' is a --y column")
    _one_line(*_run([*base, "--groups", "nobody"], visits), "no column 'nobody' for --groups")
    gap = pd.read_csv(visits / "visits.csv")
    gap.loc[3, "person"] = None
    gap.to_csv(visits / "gap.csv", index=False)
    _one_line(*_run([*base[:1], "gap.csv", *base[2:], "--groups", "person"], visits), "line 5: no person identifier")
    _untouched(ledger)
    assert not (visits / "refused.json").exists()
