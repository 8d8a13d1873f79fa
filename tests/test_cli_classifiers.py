"""``dpgp release --classes K``: the Laplace GP classifiers from the command line (docs/getting_started.md#classifiers).

Each mode's file equals the one the Python API writes with the same seed (the same model, kernel, inducing inputs
and card extras, built here independently); ``dpgp predict`` prints the probabilities the saved object gives;
refusals (labels, options) leave the ledger as it was and write nothing; a release is one ledger event. In process
(``main``), small data: every test is fast."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pandas as pd
import pytest
from reference import reference_multiplier
from test_cli import _run

import dpgp_gpflow as dp
from dpgp_gpflow.models import (
    DPLaplaceGPC,
    DPSparseLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
    kmeans_inducing_inputs,
)
from dpgp_gpflow.whole_rows import inducing_design, inducing_grid

N = 30
EPS, DELTA, SEED = 1.0, 1e-3, 7
BOX = [(0.0, 10.0), (0.0, 10.0)]
HYPER = ["--lengthscale", "3", "--variance", "2"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("classifiers")
    rng = np.random.default_rng(4)
    X = np.round(rng.uniform(0.0, 10.0, (N, 2)), 3)
    frame = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "sick": (X[:, 0] + X[:, 1] > 10.0).astype(int),
                          "kind": np.minimum(X[:, 0] // 3.4, 2).astype(int), "person": np.arange(N) // 2})
    frame.to_csv(d / "data.csv", index=False)
    frame.assign(sick=frame["sick"] * 2).to_csv(d / "bad2.csv", index=False)  # a label 2 with --classes 2
    frame.assign(kind=frame["kind"] + 0.5).to_csv(d / "bad_half.csv", index=False)  # labels not integers
    pd.DataFrame({"a": [1.0, 5.0, 9.0], "b": [2.0, 5.0, 8.0]}).to_csv(d / "at.csv", index=False)
    return d




def _document(path: Path) -> dict:
    """A release file without what differs between two writes of the same release (creation time, digest)."""
    doc = json.loads(path.read_text())
    doc.pop("sha256")
    doc["card"].pop("created")
    return doc


def _api_release(mode: str, frame: pd.DataFrame, path: Path) -> object:
    """The Python API's release of ``mode`` with the command's choices, written with the command's card extras."""
    X = frame[["a", "b"]].to_numpy(np.float64)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=3.0, variance=2.0)
    sick = 2.0 * frame[["sick"]].to_numpy(np.float64) - 1.0
    kind = frame["kind"].to_numpy(np.int64)
    extras: dict = {"labels": {"column": "kind" if mode.endswith("3") else "sick",
                               "classes": 3 if mode.endswith("3") else 2}}
    options = {"epsilon": EPS, "delta": DELTA, "seed": SEED, "hyperparameters_public": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "full2":
            released = DPLaplaceGPC((X, sick), kernel, hyperparameters_public=True).release(
                steps=2, objective="mse", **options)
        elif mode == "sparse2":
            released = DPSparseLaplaceGPC((X, sick), kernel, kmeans_inducing_inputs(X, 4),
                                          hyperparameters_public=True).release(objective="mse", **options)
        elif mode == "sparse3":
            groups = frame["person"].to_numpy(np.int64)
            extras["groups"] = {"column": "person", "persons": N // 2, "largest_rows": 2}
            released = DPSparseMulticlassLaplaceGPC((X, kind), kernel, kmeans_inducing_inputs(X, 4), num_classes=3,
                                                    hyperparameters_public=True, groups=groups).release(
                objective="mse", **options)
        else:  # whole rows: inducing inputs from the box alone
            Z = inducing_grid(BOX, 3) if mode == "rows2" else inducing_design(BOX, 8, kind="halton")
            extras["inducing"] = {"design": "grid" if mode == "rows2" else "halton", "points": int(Z.shape[0])}
            if mode == "rows2":
                released = DPSparseLaplaceGPC((X, sick), kernel, Z, private_inputs=True, x_bounds=BOX,
                                              hyperparameters_public=True).release(**options)
            else:
                released = DPSparseMulticlassLaplaceGPC((X, kind), kernel, Z, num_classes=3, private_inputs=True,
                                                        x_bounds=BOX, hyperparameters_public=True).release(**options)
        released.save(path, columns=["a", "b"], dataset="data.csv",
                      hyperparameters={"lengthscales": [3.0], "kernel_variance": 2.0}, **extras)
    return released


MODES = {
    "full2": ["--y", "sick", "--classes", "2", "--steps", "2"],
    "sparse2": ["--y", "sick", "--classes", "2", "--sparse", "4"],
    "sparse3": ["--y", "kind", "--classes", "3", "--sparse", "4", "--groups", "person"],
    "rows2": ["--y", "sick", "--classes", "2", "--sparse", "9", "--inducing", "grid", "--private-inputs", "--x-bounds",
              "0", "10", "0", "10"],
    "rows3": ["--y", "kind", "--classes", "3", "--sparse", "8", "--private-inputs", "--x-bounds", "0", "10", "0", "10"],
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_file_equals_the_python_apis_and_predict_prints_its_probabilities(work, mode):
    ledger = work / f"{mode}.sqlite"
    assert _run(["budget", "init", ledger.name, "--epsilon", "2", "--delta", "0.01"], work)[0] == 0
    argv = ["release", "data.csv", "--x", "a", "b", *MODES[mode], *HYPER, "--epsilon", EPS, "--delta", DELTA,
            "--seed", SEED, "--ledger", ledger.name, "--quiet", "-o", f"{mode}.json"]
    code, err = _run(argv, work)
    assert code == 0, err
    released = _api_release(mode, pd.read_csv(work / "data.csv"), work / f"{mode}-api.json")
    assert _document(work / f"{mode}.json") == _document(work / f"{mode}-api.json")
    (event,) = dp.PrivacyAccountant.open(ledger).history()  # charged once, at the budget given
    assert event["status"] == "committed" and (event["epsilon"], event["delta"]) == (EPS, DELTA)
    assert _run(["predict", f"{mode}.json", "--at", "at.csv", "-o", f"{mode}.csv", "--quiet"], work)[0] == 0
    table = pd.read_csv(work / f"{mode}.csv")
    Xq = table[["a", "b"]].to_numpy(np.float64)
    P = np.asarray(released.predict_y(Xq)[0])
    if mode.endswith("3"):
        np.testing.assert_allclose(table[["p_class_0", "p_class_1", "p_class_2"]].to_numpy(), P, rtol=1e-12)
        np.testing.assert_array_equal(table["predicted_class"], np.argmax(P, axis=1))
    else:  # the probability of label 1, and the label 0 / 1 the command line reads
        np.testing.assert_allclose(table["probability"].to_numpy(), P[:, 0], rtol=1e-12)
        np.testing.assert_array_equal(table["predicted_label"], (P[:, 0] >= 0.5).astype(int))


def test_show_prints_a_multi_step_binary_files_composition(work):
    """``dpgp show`` of a binary classifier of T = 3 Newton steps prints its Gaussian-DP whole: composition, mu =
    1 / s(epsilon, delta) (s by root-finding, tests/reference.py) and steps, as it prints a multi-class file's."""
    argv = ["release", "data.csv", "--x", "a", "b", "--y", "sick", "--classes", "2", "--steps", "3", *HYPER,
            "--epsilon", EPS, "--delta", DELTA, "--quiet", "-o", "steps3.json"]
    assert _run(argv, work)[0] == 0
    out = io.StringIO()
    assert _run(["show", "steps3.json"], work, out)[0] == 0
    lines = [line.strip() for line in out.getvalue().splitlines()]
    assert lines[0].startswith("steps3.json: PrivateLaplaceClassifier(") and "releases=3" in lines[0]
    assert "composition: gaussian-dp" in lines and "steps: 3" in lines
    (mu,) = [float(line.split(": ")[1]) for line in lines if line.startswith("mu: ")]
    assert mu == pytest.approx(1.0 / reference_multiplier(EPS, DELTA), rel=1e-9)


REFUSALS = [
    (["bad2.csv", "--y", "sick", "--classes", "2", *HYPER], "labels must be integers 0..1"),
    (["bad_half.csv", "--y", "kind", "--classes", "3", "--sparse", "4", *HYPER], "labels must be integers 0..2"),
    (["data.csv", "--y", "kind", "--classes", "2", *HYPER], "labels must be integers 0..1"),
    (["data.csv", "--y", "sick", "--classes", "1", *HYPER], "--classes must be an integer >= 2"),
    (["data.csv", "--y", "sick", "--classes", "2", "--bounds", "0", "1", *HYPER], "--bounds with --classes"),
    (["data.csv", "--y", "sick", "--classes", "2", "--noise", "1", *HYPER], "--noise with --classes"),
    (["data.csv", "--y", "sick", "--classes", "2", "--grid", "5", *HYPER], "--grid with --classes"),
    (["data.csv", "--y", "sick", "--classes", "2", "--lengthscale", "3"], "needs --lengthscale and --variance"),
    (["data.csv", "--y", "sick", "--classes", "2", "--sparse", "4", "--steps", "2", *HYPER], "--steps is for"),
    (["data.csv", "--y", "sick", "--steps", "2", *HYPER], "give it with --classes"),
    (["data.csv", "--y", "sick", "--classes", "2", "--private-inputs", *HYPER], "go together"),
    (["data.csv", "--y", "sick", "kind", "--classes", "2", *HYPER], "one --y column"),
    (["data.csv", "--y", "sick", "--classes", "2", "--sparse", "4", "--private-inputs", "--x-bounds", "0", "10",
      "0", "10", "--objective", "entropy", *HYPER], "--objective with --private-inputs"),
    (["data.csv", "--y", "sick", "--classes", "2", "--sparse", "9", "--private-inputs", "--x-bounds", "0", "5",
      "0", "5", "--no-clip-inputs", *HYPER], "outside"),
]


@pytest.mark.parametrize("argv, message", REFUSALS, ids=[m for _, m in REFUSALS])
def test_refusals_are_one_line_and_charge_nothing(work, argv, message):
    ledger = work / "refusals.sqlite"
    if not ledger.exists():
        assert _run(["budget", "init", ledger.name, "--epsilon", "2", "--delta", "0.01"], work)[0] == 0
    data, rest = argv[0], argv[1:]
    code, err = _run(["release", data, "--x", "a", "b", *rest, "--epsilon", EPS, "--delta", DELTA, "--ledger",
                      ledger.name, "-o", "refused.json"], work)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpgp: error:") and message in lines[0], err
    assert not (work / "refused.json").exists()
    acc = dp.PrivacyAccountant.open(ledger)
    assert acc.history() == [] and acc.spent == (0.0, 0.0)


def test_regression_still_needs_bounds(work):
    code, err = _run(["release", "data.csv", "--x", "a", "--y", "b", "--epsilon", "1", "--delta", "1e-3",
                      "--sparse", "4", "-o", "r.json"], work)
    assert code == 2 and "required" in err and "--bounds" in err


def test_a_private_inputs_classifier_with_lengthscale_one_is_released(work):
    """--lengthscale is required with --classes, so a given 1 is deliberate: released with the kernel's own
    lengthscale (review V, session 19: refused as 'GPflow's default, read as none given')."""
    argv = ["release", "data.csv", "--x", "a", "b", *MODES["rows2"], "--lengthscale", "1", "--variance", "2",
            "--epsilon", EPS, "--delta", DELTA, "--seed", SEED, "--quiet", "-o", "one.json"]
    code, err = _run(argv, work)
    assert code == 0, err
    assert dp.load(work / "one.json").features.kernel.lengthscales.numpy() == 1.0
