"""Whole-row classifiers go everywhere a release goes (issue 36): ``save``, ``dp.load``, the card's checks without
TensorFlow (``dp.io.read_card``, ``dpgp show``), ``dp.audit`` and the ledger's wording.

Independent references: predictions of the loaded object against the original object's; the card's sensitivity
against ``sqrt(K J)`` written here from the closed form of docs/whole_rows.md#sensitivity (the package adds only
the sums' rounding and the sampler's grid, ~1e-9 of it); each part's noise std against ``s Delta`` over its scale;
the audit's ``mu`` against the same closed form evaluated on the noise the release carries."""

from __future__ import annotations

import base64
import copy
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.io import ReleaseFileError
from dpgp_gpflow.io import format as release_file

from forgery import forged

BOX = [(-3.0, 3.0), (-3.0, 3.0)]
Z = wr.inducing_grid(BOX, 3)  # M = 9
M = 9
SHARES = (0.30, 0.70, 1e-6)  # the classifiers' default squared shares
XQ = np.random.default_rng(7).uniform(-4.0, 4.0, (11, 2))  # inside and outside the box


def _rows(n, seed, classes=None):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (n, 2))
    if classes is None:
        return X, np.where(X[:, :1] * X[:, 1:] > 0, 1.0, -1.0)
    return X, (np.arctan2(X[:, 1], X[:, 0]) + np.pi).astype(int) * classes // 7 % classes


def _model(num_classes, X=None, Y=None):
    if X is None:
        X, Y = _rows(90, 1, num_classes)
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=1.5)
    build = dict(private_inputs=True, x_bounds=BOX, hyperparameters_public=True)
    if num_classes is None:
        return dp.models.DPSparseLaplaceGPC((X, Y), kernel, Z, **build)
    return dp.models.DPSparseMulticlassLaplaceGPC((X, Y), kernel, Z, num_classes=num_classes, **build)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier_files")
    out = {}
    for name, K in (("binary", None), ("three", 3)):
        model = _model(K)
        acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
            released = model.release(epsilon=1.0, delta=1e-3, seed=4, accountant=acc)
        out[name] = (model, released, released.save(folder / f"{name}.json"), acc)
    return out


def _array(raw, name) -> np.ndarray:
    entry = raw["arrays"][name]
    return np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()


def _set_array(raw, name, values) -> None:
    raw["arrays"][name] = release_file.encode_array(np.asarray(values, dtype=np.float64))


def _closed_form_J(shares) -> float:
    """J of docs/whole_rows.md#sensitivity for squared shares (normalised here)."""
    w = np.asarray(shares, dtype=float) / math.fsum(shares)
    w_S2, w_b2, w_q2 = w
    g = w_S2 + w_b2**2 / (16.0 * w_S2) if w_b2 <= 4.0 * w_S2 else w_b2 / 2.0
    return min(1.0, max(w_S2 + w_b2 / 4.0, g + w_b2 / 2.0) + w_q2)


@pytest.mark.parametrize("name", ["binary", "three"])
def test_a_loaded_classifier_predicts_as_the_saved_one(saved, name):
    _, original, path, _ = saved[name]
    loaded = dp.load(path)
    assert type(loaded).__name__ == "WholeRowsClassifier" and loaded.num_classes == original.num_classes
    for method in ("predict_f", "predict_y"):
        for a, b in zip(getattr(loaded, method)(XQ), getattr(original, method)(XQ)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(loaded.predict_class(XQ), original.predict_class(XQ))
    for k, v in original.statistics.items():
        np.testing.assert_array_equal(loaded.statistics[k], v)
        np.testing.assert_array_equal(loaded.statistics_noise_std[k], original.statistics_noise_std[k])
    assert repr(loaded) == repr(original)
    assert loaded.privacy_card() == original.privacy_card()


@pytest.mark.parametrize("name, K", [("binary", 1), ("three", 3)])
def test_the_card_records_the_closed_form_sensitivity_and_noise(saved, name, K):
    _, original, path, _ = saved[name]
    card = dp.io.read_card(path)
    expected = math.sqrt(K * _closed_form_J(SHARES))  # one row, K blocks
    assert expected <= card["sensitivity"] <= expected * (1 + 1e-6)
    raw = json.loads(Path(path).read_text())
    w_b = math.sqrt(SHARES[1] / sum(SHARES))
    # b's scale is w_b / d with the labels' width d = 2
    np.testing.assert_allclose(_array(raw, "noise_std/b"), card["noise_multiplier"] * card["sensitivity"] * 2.0 / w_b,
                               rtol=1e-12)
    assert sorted(k for k in raw["arrays"] if k.startswith("statistics/")) == sorted(
        f"statistics/{a}/{p}" for a in range(K) for p in "Sbq")
    assert _array(raw, "statistics/0/S").shape == (M * (M + 1) // 2,)


#: Consistent forgeries (hash recomputed) of the three-class file: each refused in one line.
FORGERIES = {
    "the sensitivity lowered": lambda raw: raw["card"].update(sensitivity=raw["card"]["sensitivity"] / 2),
    "the noise multiplier": lambda raw: raw["card"].update(noise_multiplier=raw["card"]["noise_multiplier"] * 1.1),
    "fewer classes": lambda raw: raw["card"].update(num_classes=2),
    "binary claimed": lambda raw: raw["card"].update(num_classes=None),
    "num_classes not a count": lambda raw: raw["card"].update(num_classes=3.0),
    "the shares": lambda raw: raw["card"].update(shares=[0.2, 0.78, 0.02]),
    "persons as rows": lambda raw: raw["card"].update(person_rows=2),
    "two Newton steps": lambda raw: raw["card"].update(newton_steps=2),
    "clipped latents": lambda raw: raw["card"].update(clip_to_bounds=True),
    "the noise std of b": lambda raw: _set_array(raw, "noise_std/b", _array(raw, "noise_std/b") * 0.5),
    "S of a class without a row": lambda raw: _set_array(raw, "statistics/1/S", _array(raw, "statistics/1/S")[:-1]),
    "b of a class as a matrix": lambda raw: _set_array(raw, "statistics/2/b", _array(raw, "statistics/2/b")[None]),
    "a class missing": lambda raw: raw["arrays"].pop("statistics/2/q"),
    "the mechanism": lambda raw: raw["card"].update(mechanism="gaussian (whole-row statistics)"),
}
#: Forgeries only the loader sees (the card itself is consistent): refused by dp.load.
LOAD_FORGERIES = {
    "the kernel variance": lambda raw: raw["card"].update(kernel_variance=raw["card"]["kernel_variance"] * 2),
    "k_max": lambda raw: raw["content"].update(k_max=raw["content"]["k_max"] * 2),
    "k_max with the card's kernel variance": lambda raw: (raw["content"].update(k_max=1.0),  # loaded before
                                                          raw["card"].update(kernel_variance=1.0)),
    "an extra array": lambda raw: _set_array(raw, "rows/X", np.zeros((3, 2))),
    "a fourth class's statistics": lambda raw: _set_array(raw, "statistics/3/b", np.zeros(M)),
    "Z of another shape": lambda raw: _set_array(raw, "inducing_inputs", np.zeros((M, 3))),
}


@pytest.mark.parametrize("what", sorted(FORGERIES))
def test_a_forged_card_is_refused_by_the_card_checks_and_by_load(saved, tmp_path, what):
    path = forged(saved["three"][2], tmp_path, FORGERIES[what])
    for read in (dp.io.read_card, dp.load):
        with pytest.raises(ReleaseFileError) as caught:
            read(path)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("what", sorted(LOAD_FORGERIES))
def test_a_forgery_of_the_public_pieces_is_refused_by_load(saved, tmp_path, what):
    path = forged(saved["three"][2], tmp_path, LOAD_FORGERIES[what])
    with pytest.raises(ReleaseFileError) as caught:
        dp.load(path)
    assert "\n" not in str(caught.value)


def test_a_forged_binary_card_is_refused(saved, tmp_path):
    for edit in (lambda raw: raw["card"].update(num_classes=3),  # 3 blocks claimed, sensitivity of one
                 lambda raw: raw["card"].update(sensitivity=raw["card"]["sensitivity"] * 0.9)):
        with pytest.raises(ReleaseFileError, match="sensitivity"):
            dp.io.read_card(forged(saved["binary"][2], tmp_path, edit))


def test_the_card_is_checked_and_shown_without_tensorflow(saved):
    """What ``dpgp show`` runs (io/card.py's checks and the one-line summary) imports neither TensorFlow nor GPflow,
    and its line is the loaded object's repr."""
    _, original, path, _ = saved["three"]
    child = ("import sys\n"
             "from dpgp_gpflow.io.card import read_checked_card, whole_rows_summary\n"
             "checked = read_checked_card(sys.argv[1])\n"
             "print([m for m in ('tensorflow', 'gpflow') if m in sys.modules])\n"
             "print(checked.kind, checked.releases)\n"
             "print(whole_rows_summary(checked.card))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", child, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "WholeRowsClassifier ()", repr(original)]
    assert repr(original).startswith("WholeRowsClassifier(3 classes (one-vs-rest), n=90, M=9, epsilon=1, ")


def test_the_ledger_says_classes(saved):
    (event,) = saved["three"][3].history()
    assert "3 classes" in event["description"] and "candidate" not in event["description"], event["description"]


def _closed_form_mu(release, K, person_rows=1) -> float:
    """G sqrt(K T J(a^2 / T)) of docs/whole_rows.md#sensitivity from the noise the release carries (labels'
    width d = 2)."""
    std = release.statistics_noise_std
    S = np.reshape(std["S"], (-1, M, M))[0]
    a2 = np.array([2.0 / S[0, 0] ** 2, 4.0 / np.ravel(std["b"])[0] ** 2, 1.0 / np.ravel(std["q"])[0] ** 2])
    T = a2.sum()
    return person_rows * math.sqrt(K * T * _closed_form_J(a2 / T))


@pytest.mark.parametrize("name, K", [("binary", 1), ("three", 3)])
def test_an_honest_classifier_passes_the_audit_with_the_mu_of_its_noise(saved, name, K):
    model, original, path, _ = saved[name]
    for released in (original, dp.load(path)):
        report = dp.audit(released, model)
        assert report.passed and report.noise_test == "passed", report
        mu = report.releases[0].mu
        assert mu == pytest.approx(_closed_form_mu(released, K), rel=1e-12)
        assert mu <= 1.0 / released.noise_multiplier * (1 + 1e-9)  # what the release charged for
        assert report.epsilon <= released.epsilon * (1 + 1e-6)


def test_a_forged_classifier_with_less_noise_fails_the_audit(saved):
    model, original, _, _ = saved["three"]
    cheat = dp.load(saved["three"][2])
    cheat._noise_std = {k: v / 2.0 for k, v in original.statistics_noise_std.items()}  # claims half the noise
    # its posteriors the post-processing of what it claims (else the audit refuses it for its posteriors)
    cheat.offdiag_std, cheat.floor, cheat._S_hat, cheat.posteriors = wr.classification.classifier_posteriors(
        cheat.statistics, cheat._noise_std, cheat.kernel_variance, 3)
    report = dp.audit(cheat, model)
    assert not report.passed and report.epsilon > original.epsilon
    assert report.releases[0].mu == pytest.approx(2.0 * _closed_form_mu(original, 3), rel=1e-12)


@pytest.mark.parametrize("name", ["binary", "three"])
def test_a_classifier_predicting_from_other_weights_is_refused(saved, name):
    """Found by review: the classifier's audit had no posterior check, so a copy with forged weights (here the
    first block's weights' mean moved by 1 %) passed. NumPy reference for the honest weights: one Newton step,
    ``(S^ + 4 / k_max I)^{-1} 2 b~`` of the first block."""
    model, original, _, _ = saved[name]
    S_hat = original._S_hat.numpy()
    b = np.reshape(original.statistics["b"], (-1, M))[0]
    lam = 4.0 / original.features.k_max
    assert np.allclose(original.posteriors[0].mean.numpy(), np.linalg.solve(S_hat + lam * np.eye(M), 2.0 * b),
                       rtol=1e-8, atol=1e-10)
    forged_copy = copy.copy(original)
    first = original.posteriors[0]
    forged_copy.posteriors = (first._replace(mean=first.mean * 1.01), *original.posteriors[1:])
    assert np.max(np.abs(forged_copy.predict_f(XQ)[0] - original.predict_f(XQ)[0])) > 1e-4  # it predicts otherwise
    with pytest.raises(ValueError, match="weights' mean is not the one its released statistics give"):
        dp.audit(forged_copy, model)
    assert dp.audit(original, model).passed


def test_the_audit_reads_the_model_and_refuses_another(saved):
    model, original, _, _ = saved["three"]
    X, Y = _rows(90, 1, 3)
    other = _model(3, np.tile(X, (20, 1)), np.tile(Y, 20))  # twenty times the rows: S, b and q move far
    report = dp.audit(original, other)
    assert not report.passed and "too much noise" in report.noise_test
    with pytest.raises(ValueError, match="not the release's"):
        dp.audit(original, _model(4, X, Y % 4))
    with pytest.raises(ValueError, match="not the release's"):
        dp.audit(saved["binary"][1], saved["three"][0])


def test_a_classifier_of_persons_saves_and_audits_with_their_size(tmp_path):
    """Persons of 3 rows: the card's sensitivity is 3 times the closed form, the file loads, and the audit's mu
    (from the model's persons, never the card) is 3 times that of the noise carried."""
    X, Y = _rows(90, 2, 3)
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=1.5)
    model = dp.models.DPSparseMulticlassLaplaceGPC((X, Y), kernel, Z, num_classes=3, groups=np.repeat(np.arange(30), 3),
                                                   private_inputs=True, x_bounds=BOX, hyperparameters_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release(epsilon=1.0, delta=1e-3, seed=6)
    card = dp.io.read_card(released.save(tmp_path / "persons.json"))
    expected = 3 * math.sqrt(3 * _closed_form_J(SHARES))
    assert card["person_rows"] == 3 and expected <= card["sensitivity"] <= expected * (1 + 1e-6)
    loaded = dp.load(tmp_path / "persons.json")
    report = dp.audit(loaded, model)
    assert report.passed and report.releases[0].mu == pytest.approx(_closed_form_mu(loaded, 3, 3), rel=1e-12)


@pytest.mark.parametrize("name", ["binary", "three"])
def test_dpgp_show_and_predict_read_a_classifier_file(saved, name, tmp_path):
    """``dpgp show`` prints the file's one line (it crashed on a classifier: no PrivateRelease parts) and ``dpgp
    predict`` writes the classifier's probabilities and labels at new inputs, equal to the saved object's."""
    import contextlib
    import io

    import pandas as pd

    from dpgp_gpflow.cli import main

    _, original, path, _ = saved[name]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(path)]) == 0
    assert out.getvalue().startswith(f"{path}: WholeRowsClassifier(")
    pd.DataFrame(XQ, columns=["x0", "x1"]).to_csv(tmp_path / "at.csv", index=False)
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["predict", str(path), "--at", str(tmp_path / "at.csv"), "--output", str(tmp_path / "p.csv"),
                     "--quiet"]) == 0
    table = pd.read_csv(tmp_path / "p.csv")
    P = original.predict_y(XQ)[0]
    np.testing.assert_allclose(table[["x0", "x1"]].to_numpy(), XQ, rtol=1e-12)
    if name == "binary":
        np.testing.assert_allclose(table["probability"].to_numpy(), P[:, 0], rtol=1e-9)
        np.testing.assert_array_equal(table["predicted_label"].to_numpy(), np.where(P[:, 0] >= 0.5, 1, -1))
    else:
        np.testing.assert_allclose(table[[f"p_class_{c}" for c in range(3)]].to_numpy(), P, rtol=1e-9)
        np.testing.assert_array_equal(table["predicted_class"].to_numpy(), P.argmax(axis=1))


def test_a_classifier_of_a_kernel_once_unsavable_saves_and_loads(tmp_path):
    """Polynomial and Periodic had no file form: the release was charged, then save refused. The loaded file now
    predicts as the in-memory classifier (the reference)."""
    X, Y = _rows(60, 4)
    kernel = (gpflow.kernels.Polynomial(degree=2.0, offset=1.0, variance=0.1)
              + gpflow.kernels.Periodic(gpflow.kernels.SquaredExponential(active_dims=[0]), period=3.0))
    model = dp.models.DPSparseLaplaceGPC((X, Y), kernel, Z, private_inputs=True, x_bounds=BOX,
                                         hyperparameters_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release(epsilon=1.0, delta=1e-3, seed=2)
    loaded = dp.load(released.save(tmp_path / "poly.json"))
    for a, b in zip(released.predict_f(XQ), loaded.predict_f(XQ)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-300)
