"""DPMulticlassLaplaceGPC and DPSparseMulticlassLaplaceGPC against independent references.

The references are NumPy and SciPy: the analytic-Gaussian multiplier solved here from the Balle-Wang
profile (``auditing.gaussian_delta``), the Newton-step cloaking matrices, the SoR weight map, the
whitened shifts ``d F^+ c_i`` of every released step (``auditing.whiten``) and the probit
probabilities; the binary classifier is the reference for two classes.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
from conftest import classifier_kernel as kernel
from reference import CLASSIFIER_LS, CLASSIFIER_VAR, K_np, newton_map_np
from scipy import optimize, special

import dpgp_gpflow as dp
import dpgp_gpflow.mechanisms.cloaking as cloaking_module
import dpgp_gpflow.models.multiclass as multiclass_module
import dpgp_gpflow.sampling as sampling_module
from dpgp_gpflow import BudgetExceededError, PrivacyAccountant, PrivacyLeakError, ReproducibleNoiseWarning
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.models import (
    DPLaplaceGPC,
    DPMulticlassLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
    PrivateMulticlassClassifier,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402

EPS, DELTA = 1.0, 0.01
VAR, LS = CLASSIFIER_VAR, CLASSIFIER_LS
D = 2.0  # a binary label moves from -1 to +1
JITTER = 1e-6
K_CLASSES = 3


def s_reference(epsilon: float, delta: float) -> float:
    """The smallest s with delta(eps; mu = 1/s) <= delta, solved from the Balle-Wang profile."""
    return optimize.brentq(lambda s: auditing.gaussian_delta(epsilon, 1.0 / s) - delta, 0.05, 100.0, xtol=1e-14)


def seed_reference(seed: int, num_classes: int, label: int) -> int:
    return int(np.random.SeedSequence([seed, num_classes, label]).generate_state(1, dtype=np.uint32)[0])


def quiet(fn, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        return fn(**kwargs)


def make_problem(n: int = 24, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 2))
    labels = np.clip(np.floor(X[:, 0] / 2.0 + 0.3 * rng.standard_normal(n)), 0, K_CLASSES - 1).astype(int)
    return X, labels, rng.uniform(-0.5, 6.5, (6, 2))


@pytest.fixture(scope="module")
def problem():
    return make_problem()


@pytest.fixture(scope="module")
def model(problem):
    X, labels, _ = problem
    return DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=K_CLASSES, hyperparameters_public=True)


@pytest.fixture(scope="module")
def sparse_model(problem):
    X, labels, _ = problem
    return DPSparseMulticlassLaplaceGPC((X, labels), kernel(), X[::3], num_classes=K_CLASSES,
                                        hyperparameters_public=True)


@pytest.fixture(scope="module")
def releases(model):
    return {T: quiet(model.release, epsilon=EPS, delta=DELTA, steps=T, seed=30 + T) for T in (1, 2)}


def full_maps(X: np.ndarray, classifier) -> list:
    """The NumPy cloaking matrix of each released step of one class: step 1 at f = 0, step t + 1 at the
    released latents of step t."""
    K = K_np(X)
    fs = [np.zeros(len(X))] + [r.mean[:, 0] for r in classifier.releases[:-1]]
    return [newton_map_np(K, f) for f in fs]


def sparse_map(X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    Lzz = np.linalg.cholesky(K_np(Z) + JITTER * np.eye(len(Z)))
    Phi = np.linalg.solve(Lzz, K_np(Z, X)).T
    return 0.5 * np.linalg.solve(np.eye(len(Z)) + Phi.T @ Phi / 4.0, Phi.T)


def largest_move(released: PrivateMulticlassClassifier, maps: list) -> float:
    """Brute force over every row i and every class move a -> b: the norm of the stacked whitened shifts
    ``d F^+ c_i`` of the 2T changed mechanisms (problems a and b, every step); the other problems do not move."""
    per_class = []  # [K][n]: sum over steps of the squared whitened shift of row i
    for classifier, class_maps in zip(released.classifiers, maps):
        total = 0.0
        for rel, C in zip(classifier.releases, class_maps):
            U, _, _ = auditing.noise_span(rel.noise_factor)
            # the release publishes P C y + noise (P onto span F): the shift is d P c_i, whitened by F^+
            total = total + np.sum(auditing.whiten(rel.noise_factor, (D * C).T) ** 2, axis=1)
        per_class.append(total)
    K = len(per_class)
    return max(float(np.sqrt(np.max(per_class[a] + per_class[b]))) for a in range(K) for b in range(K) if a != b)


# ---------------------------------------------------------------------------------------------
# Calibration and the ledger


@pytest.mark.parametrize("steps", [1, 2])
def test_each_step_is_released_at_sqrt_2T_times_the_analytic_multiplier(releases, steps):
    s = s_reference(EPS, DELTA)
    released = releases[steps]
    assert len(released.classifiers) == K_CLASSES and len(released.releases) == K_CLASSES * steps
    for rel in released.releases:
        assert rel.noise_multiplier == pytest.approx(math.sqrt(2 * steps) * s, rel=1e-9)
        # each step records its own guarantee at delta: eps_step with delta(eps_step; 1/s_step) = delta
        assert auditing.gaussian_delta(rel.epsilon, 1.0 / rel.noise_multiplier) == pytest.approx(DELTA, rel=1e-6)
        assert rel.delta == DELTA and rel.classifier_latent
    assert released.epsilon == EPS and released.delta == DELTA
    assert released.mu == pytest.approx(1.0 / s, rel=1e-9)


@pytest.mark.parametrize("composition", ["basic", "gdp"])
def test_one_ledger_event_for_the_whole_release(model, composition):
    acc = PrivacyAccountant(epsilon=3.0, delta=0.05, composition=composition)
    model.release(epsilon=EPS, delta=DELTA, steps=2, accountant=acc)
    (event,) = acc.ledger
    assert (event.epsilon, event.delta, event.kind) == (EPS, DELTA, "gaussian")
    assert event.mu == pytest.approx(1.0 / s_reference(EPS, DELTA), rel=1e-9)
    assert acc.held == (0.0, 0.0)
    if composition == "basic":
        assert acc.spent == (EPS, DELTA)


def test_budget_is_refused_before_anything_is_drawn(model, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("noise drawn before the budget was checked")

    monkeypatch.setattr(sampling_module, "standard_normal", forbidden)
    acc = PrivacyAccountant(epsilon=0.9, delta=0.05)
    with pytest.raises(BudgetExceededError):
        model.release(epsilon=EPS, delta=DELTA, accountant=acc)
    assert acc.ledger == () and acc.held == (0.0, 0.0)


def test_classical_calibration_is_refused_before_anything_is_reserved(model, draws):
    acc = PrivacyAccountant(epsilon=3.0, delta=0.05)
    with pytest.raises(NotImplementedError, match="analytic"):
        model.release(epsilon=EPS, delta=DELTA, calibration="classical", accountant=acc)
    assert acc.ledger == () and acc.held == (0.0, 0.0) and draws == []


@pytest.mark.parametrize("how", ["full", "sparse", "streamed"])
def test_a_meaningless_rtol_or_tol_is_refused_before_anything_is_reserved(model, sparse_model, draws, how):
    """The one validation of every release (mechanisms.release_request): rtol outside [0, 1) or below the
    mse floor, tol not a finite number > 0; refused naming the option, nothing drawn, held or cancelled."""
    release = {"full": model.release, "sparse": sparse_model.release, "streamed": sparse_model.release_streamed}[how]
    acc = PrivacyAccountant(epsilon=30.0, delta=0.5)
    for options in (dict(rtol=-1.0), dict(rtol=-1.0, objective="entropy"), dict(rtol=float("nan")),
                    dict(rtol=1.5, objective="entropy"), dict(tol=float("nan")), dict(tol=-1.0), dict(tol=0.0),
                    dict(tol=None)):
        key = "rtol" if "rtol" in options else "tol"
        with pytest.raises((ValueError, TypeError), match=rf"^{key}[ =]"):
            release(epsilon=EPS, delta=DELTA, accountant=acc, seed=1, **options)
    assert acc.history() == [] and acc.held == (0.0, 0.0) and draws == []


def _raising_publish(monkeypatch, at_call: int):
    original, calls = cloaking_module.publish_cloaking, []

    def publish(**kwargs):
        calls.append(1)
        if len(calls) == at_call:
            raise FloatingPointError("refused midway (test)")
        return original(**kwargs)

    monkeypatch.setattr(cloaking_module, "publish_cloaking", publish)
    return calls


@pytest.mark.parametrize("at_call, charged", [(1, False), (2, True), (4, True)])
def test_a_refusal_charges_the_event_once_something_was_drawn(model, monkeypatch, draws, at_call, charged):
    """Call 1 is class 0's first step (nothing drawn yet); later calls follow draws, which stay charged:
    the one event, whole (it bounds any part of the release), and nothing left held."""
    acc = PrivacyAccountant(epsilon=3.0, delta=0.05)
    _raising_publish(monkeypatch, at_call)
    with pytest.raises(FloatingPointError, match="midway"):
        model.release(epsilon=EPS, delta=DELTA, steps=2, accountant=acc)
    assert len(draws) == at_call - 1
    assert acc.held == (0.0, 0.0)
    assert acc.spent == ((EPS, DELTA) if charged else (0.0, 0.0)) and len(acc.ledger) == int(charged)


# ---------------------------------------------------------------------------------------------
# Privacy: brute force over every row and every class move


@pytest.mark.parametrize("steps", [1, 2])
def test_every_class_move_shifts_the_2T_changed_steps_by_at_most_one_over_s(problem, releases, steps):
    X, _, _ = problem
    released = releases[steps]
    maps = [full_maps(X, c) for c in released.classifiers]
    worst = largest_move(released, maps)
    bound = 1.0 / s_reference(EPS, DELTA)
    assert worst <= bound * (1.0 + 1e-9)
    assert worst >= 0.9 * bound  # tight: the bound is what the calibration spends


def test_calibrating_each_problem_at_s_alone_fails_the_brute_force_check(problem, model, monkeypatch):
    monkeypatch.setattr(multiclass_module, "multiclass_step_multiplier", lambda s, steps, moved=2: s)  # the broken variant
    X, _, _ = problem
    released = model.release(epsilon=EPS, delta=DELTA)
    worst = largest_move(released, [full_maps(X, c) for c in released.classifiers])
    assert worst > 1.3 / s_reference(EPS, DELTA)  # ~ sqrt(2) / s: two problems move, each by up to 1/s


def test_sparse_release_every_class_move_within_one_over_s(problem, sparse_model):
    X, _, _ = problem
    released = quiet(sparse_model.release, epsilon=EPS, delta=DELTA, seed=3)
    s = s_reference(EPS, DELTA)
    assert all(r.noise_multiplier == pytest.approx(math.sqrt(2.0) * s, rel=1e-9) for r in released.releases)
    Cw = sparse_map(X, X[::3])
    worst = largest_move(released, [[Cw]] * K_CLASSES)
    assert 0.9 / s <= worst <= (1.0 + 1e-9) / s


# ---------------------------------------------------------------------------------------------
# Two classes: the binary classifier


def _binary_epsilon(target: float) -> float:
    """The epsilon at which the binary classifier's one-step multiplier is ``target`` (at DELTA)."""
    return optimize.brentq(lambda e: gaussian_multiplier(e, DELTA) - target, 0.01, 10.0, xtol=1e-15, rtol=1e-15)


@pytest.mark.parametrize("steps", [1, 2])
def test_two_classes_reproduce_the_binary_classifier_at_the_step_multiplier(problem, steps):
    X, _, _ = problem
    labels = (X[:, 1] > 3.0).astype(int)
    seed = 21
    released = quiet(DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=2, hyperparameters_public=True).release,
                     epsilon=EPS, delta=DELTA, steps=steps, seed=seed)
    # binary steps run at sqrt(T) s(e, DELTA) (Gaussian-DP steps): sqrt(2 T) s(EPS, DELTA) when s(e, DELTA) = sqrt(2) s
    e = _binary_epsilon(math.sqrt(2) * s_reference(EPS, DELTA))
    y1 = np.where(labels == 1, 1.0, -1.0)[:, None]
    for a, y in ((1, y1), (0, -y1)):  # class 0 against the rest is class 1 with the labels' signs flipped
        binary = quiet(DPLaplaceGPC((X, y), kernel(), hyperparameters_public=True).release,
                       epsilon=e, delta=DELTA, steps=steps, seed=seed_reference(seed, 2, a))
        for mine, ref in zip(released.classifiers[a].releases, binary.releases):
            assert mine.noise_multiplier == pytest.approx(ref.noise_multiplier, rel=1e-9)
            np.testing.assert_allclose(mine.mean, ref.mean, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(mine.noise_factor, ref.noise_factor, rtol=1e-7, atol=1e-9)
    if steps == 1:  # the same public map for both problems: the same noise plan
        np.testing.assert_allclose(released.classifiers[0].releases[0].noise_factor,
                                   released.classifiers[1].releases[0].noise_factor, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Predictions


def test_predictions_propagate_the_noise_and_probabilities_sum_to_one(problem, releases):
    X, _, Xnew = problem
    released = releases[1]
    mean, var = released.predict_f(Xnew)
    assert isinstance(mean, np.ndarray) and isinstance(var, np.ndarray)  # NumPy, as every released object's
    assert mean.shape == var.shape == (len(Xnew), K_CLASSES)
    # NumPy: one step from f = 0 (W = 1/4): E = k*^T K^-1 f~, V = k** - k*^T (K + 4 I)^-1 k* + ||k*^T K^-1 F||^2
    Kj = K_np(X) + JITTER * np.eye(len(X))
    Ks = K_np(X, Xnew)
    public = VAR - np.sum(Ks * np.linalg.solve(K_np(X) + 4.0 * np.eye(len(X)), Ks), axis=0)
    for a, c in enumerate(released.classifiers):
        rel = c.releases[0]
        A = np.linalg.solve(Kj, Ks).T
        np.testing.assert_allclose(mean[:, a], (A @ rel.mean)[:, 0], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(var[:, a], public + np.sum((A @ rel.noise_factor) ** 2, axis=1), rtol=1e-6)
    P, PV = released.predict_y(Xnew)
    assert isinstance(P, np.ndarray) and isinstance(PV, np.ndarray)
    p = special.expit(mean / np.sqrt(1.0 + np.pi * var / 8.0))
    np.testing.assert_allclose(P, p / p.sum(axis=1, keepdims=True), rtol=1e-10)
    assert np.all((P >= 0.0) & (P <= 1.0)) and np.allclose(P.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(PV, P * (1.0 - P))
    np.testing.assert_array_equal(released.predict_class(Xnew), np.argmax(P, axis=1))


def test_far_from_the_data_probabilities_stay_finite(releases):
    P = releases[2].predict_y(np.array([[1e3, -1e3], [50.0, 50.0]]))[0]
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(axis=1), 1.0)


def test_non_private_predictions_are_the_normalised_binary_ones(problem, model):
    _, _, Xnew = problem
    P = model.predict_y(Xnew)[0].numpy()
    p = np.concatenate([prob.predict_y(Xnew)[0].numpy() for prob in model.problems], axis=1)
    assert np.allclose(P.sum(axis=1), 1.0)
    # the binary predict_y is the probit of the same latents: the one-vs-rest rule normalises them
    np.testing.assert_allclose(P, p / p.sum(axis=1, keepdims=True), rtol=1e-8)


@pytest.mark.parametrize("steps", [1, 2])
def test_a_release_file_round_trips_with_the_whole_guarantee(problem, releases, tmp_path, steps):
    """save / dp.load: the loaded object predicts the same class probabilities from the file alone; the card
    states the whole guarantee; identical public arrays (X, and for one step every factor) are stored once."""
    X, _, Xnew = problem
    released = releases[steps]
    path = released.save(tmp_path / "multiclass.json", inputs=X)
    loaded = dp.load(path)
    assert isinstance(loaded, PrivateMulticlassClassifier) and loaded.num_classes == K_CLASSES
    np.testing.assert_array_equal(loaded.predict_y(Xnew)[0], released.predict_y(Xnew)[0])
    np.testing.assert_array_equal(loaded.predict_f(Xnew)[1], released.predict_f(Xnew)[1])
    card = dp.io.read_card(path)
    assert (card["epsilon"], card["delta"], card["num_classes"], card["steps"]) == (EPS, DELTA, K_CLASSES, steps)
    assert card["mu"] == pytest.approx(1.0 / s_reference(EPS, DELTA), rel=1e-9) and card["composition"] == "gaussian-dp"
    assert card["neighbours"] == "row, labels moved between classes" and card["classes_moved"] == 2
    assert len(card["releases"]) == K_CLASSES * steps and loaded.privacy_card()["mu"] == card["mu"]
    pool = [name for name in dp.io.format.read(path).arrays if name.startswith("readout/")]
    # one step: X, W, Lk, LB shared by every class; two: X and Lk shared, W and LB per class
    assert len(pool) == (4 if steps == 1 else 2 + 2 * K_CLASSES)
    for mine, theirs in zip(loaded.classifiers, released.classifiers):
        assert type(mine) is type(theirs) and len(mine.releases) == steps
        np.testing.assert_array_equal(mine.W_diag, theirs.W_diag)


def test_the_sparse_release_file_round_trips(problem, sparse_model, tmp_path):
    _, _, Xnew = problem
    released = quiet(sparse_model.release, epsilon=EPS, delta=DELTA, seed=7)
    loaded = dp.load(released.save(tmp_path / "sparse.json"))
    np.testing.assert_array_equal(loaded.predict_y(Xnew)[0], released.predict_y(Xnew)[0])
    assert loaded.reproducible and [type(c).__name__ for c in loaded.classifiers] == ["PrivateSparseClassifier"] * 3
    pool = [name for name in dp.io.format.read(tmp_path / "sparse.json").arrays if name.startswith("readout/")]
    assert len(pool) == 3  # Z, Lmm, La: the same for every class


def test_dpgp_show_and_predict_read_a_multiclass_file(problem, releases, tmp_path, capsys):
    import contextlib

    import pandas as pd

    from dpgp_gpflow.cli import main

    _, _, Xnew = problem
    released = releases[1]
    released.save(tmp_path / "classes.json")
    pd.DataFrame(Xnew, columns=["a", "b"]).to_csv(tmp_path / "at.csv", index=False)
    with contextlib.chdir(tmp_path), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["show", "classes.json"]) == 0
        out = capsys.readouterr().out
        assert "PrivateMulticlassClassifier(" in out and "num_classes: 3" in out and "classes_moved: 2" in out
        assert f"mu: {released.mu}" in out and "neighbours: row, labels moved between classes" in out
        assert main(["predict", "classes.json", "--at", "at.csv", "-o", "p.csv", "--quiet"]) == 0
    table = pd.read_csv(tmp_path / "p.csv")
    P = released.predict_y(Xnew)[0]
    assert list(table.columns) == ["a", "b", "p_class_0", "p_class_1", "p_class_2", "predicted_class"]
    np.testing.assert_allclose(table[["p_class_0", "p_class_1", "p_class_2"]].to_numpy(), P, rtol=1e-12)
    np.testing.assert_array_equal(table["predicted_class"].to_numpy(), np.argmax(P, axis=1))


# ---------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize("labels, error, match", [
    (np.array([0, 1, 2, 3] * 6), ValueError, r"0\.\.2"),
    (np.array([0, 1, -1, 2] * 6), ValueError, r"0\.\.2"),
    (np.array([0.0, 1.5, 2.0, 1.0] * 6), ValueError, "integers"),
    (np.array([0.0, np.nan, 2.0, 1.0] * 6), ValueError, "integers"),
    (np.array([True, False] * 12), TypeError, "integers"),
    (np.array(["a", "b"] * 12), TypeError, "integers"),
    (np.zeros(23, dtype=int), ValueError, "shape"),
    (np.zeros((24, 2), dtype=int), ValueError, "shape"),
])
@pytest.mark.parametrize("sparse", [False, True])
def test_bad_labels_are_refused(problem, labels, error, match, sparse):
    X, _, _ = problem
    with pytest.raises(error, match=match):
        if sparse:
            DPSparseMulticlassLaplaceGPC((X, labels), kernel(), 4, num_classes=3)
        else:
            DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3)


@pytest.mark.parametrize("num_classes", [1, 0, True, 2.0, "3"])
def test_bad_num_classes_are_refused(problem, num_classes):
    X, labels, _ = problem
    with pytest.raises(ValueError, match="num_classes"):
        DPMulticlassLaplaceGPC((X, np.zeros_like(labels)), kernel(), num_classes=num_classes)


def test_float_and_column_labels_are_accepted(problem):
    X, labels, _ = problem
    model = DPMulticlassLaplaceGPC((X, labels[:, None].astype(float)), kernel(), num_classes=3)
    np.testing.assert_array_equal(model.data[1], labels)
    for a, prob in enumerate(model.problems):
        np.testing.assert_array_equal(prob.data[1].numpy()[:, 0], np.where(labels == a, 1.0, -1.0))


def test_sparse_refuses_more_than_one_step(sparse_model, draws):
    with pytest.raises(NotImplementedError, match="steps=1"):
        sparse_model.release(epsilon=EPS, delta=DELTA, steps=2)
    assert draws == []


def test_a_trained_model_is_refused_unless_declared_public(problem, draws):
    X, labels, _ = problem
    model = DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=3)
    model.training_loss()  # reads the labels: every problem is marked
    acc = PrivacyAccountant(epsilon=3.0, delta=0.05)
    with pytest.raises(PrivacyLeakError):
        model.release(epsilon=EPS, delta=DELTA, accountant=acc)
    assert acc.ledger == () and draws == []


def epsilon_reference(mu: float, delta: float) -> float:
    """The epsilon with delta(eps; mu) = delta, solved from the Balle-Wang profile."""
    return optimize.brentq(lambda e: auditing.gaussian_delta(e, mu) - delta, 1e-6, 100.0, xtol=1e-14)


def whole_mu_reference(released: PrivateMulticlassClassifier, maps: list, moved: int) -> float:
    """NumPy: each step's mu ``d max_i ||F^+ c_i||`` over the rows, squared and summed per class; a neighbour
    changes at most ``moved`` classes, so the whole's mu^2 is the sum of the ``moved`` largest per-class sums."""
    per_class = []
    for classifier, class_maps in zip(released.classifiers, maps):
        per_class.append(sum(float(np.max(np.sum(auditing.whiten(rel.noise_factor, (D * C).T) ** 2, axis=1)))
                             for rel, C in zip(classifier.releases, class_maps)))
    return float(np.sqrt(np.sum(np.sort(per_class)[::-1][:moved])))


@pytest.mark.parametrize("steps", [1, 2])
def test_dp_audit_recomputes_the_whole_guarantee(problem, model, releases, steps):
    """dp.audit of the whole release: every class's steps against that class's problem, and the whole's epsilon
    from the composed mu, against a NumPy recomputation; within the claim and close to it (the bound is what
    the calibration spends)."""
    X, _, _ = problem
    released = releases[steps]
    report = dp.audit(released, model)
    assert report.passed and len(report.releases) == K_CLASSES * steps
    expected = epsilon_reference(whole_mu_reference(released, [full_maps(X, c) for c in released.classifiers], 2),
                                 DELTA)
    assert report.epsilon == pytest.approx(expected, rel=1e-6) and report.delta == DELTA
    assert 0.9 * EPS <= report.epsilon <= EPS * (1 + 1e-6)
    for c in range(K_CLASSES):  # each class alone against its own steps' claims, as before
        assert dp.audit(released.classifiers[c], model.problems[c]).passed


def test_dp_audit_of_the_sparse_whole(problem, sparse_model):
    X, _, _ = problem
    released = quiet(sparse_model.release, epsilon=EPS, delta=DELTA, seed=3)
    report = dp.audit(released, sparse_model)
    expected = epsilon_reference(whole_mu_reference(released, [[sparse_map(X, X[::3])]] * K_CLASSES, 2), DELTA)
    assert report.passed and report.epsilon == pytest.approx(expected, rel=1e-6)


def test_dp_audit_catches_a_whole_release_calibrated_per_problem(problem, model, monkeypatch):
    """The broken variant (each step at s, as if one problem moved) fails the whole's audit (~ sqrt(2) / s),
    while each class alone still passes its own (smaller) claim."""
    monkeypatch.setattr(multiclass_module, "multiclass_step_multiplier", lambda s, steps, moved=2: s)
    released = model.release(epsilon=EPS, delta=DELTA)
    report = dp.audit(released, model)
    assert not report.passed and report.epsilon > 1.5 * EPS
    assert all(dp.audit(c, p).passed for c, p in zip(released.classifiers, model.problems))


def test_dp_audit_refuses_a_model_of_other_classes(problem, releases):
    X, labels, _ = problem
    released = releases[1]
    with pytest.raises(ValueError, match="one-vs-rest model it was made with"):
        dp.audit(released, DPLaplaceGPC((X, np.where(labels == 0, 1.0, -1.0)[:, None]), kernel()))
    with pytest.raises(ValueError, match="of 3 classes"):
        dp.audit(released, DPMulticlassLaplaceGPC((X, labels), kernel(), num_classes=4))
