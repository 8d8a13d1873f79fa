"""DPLaplaceGPC and DPSparseLaplaceGPC: releases against independent NumPy recomputations.

Every reference here is NumPy (cloaking matrices, Newton steps, predictions, the Mahalanobis
sensitivity and the analytic-Gaussian delta); the exact audit is also run through
``tests/audits/auditing.py`` on shifts measured black-box from neighbouring label vectors.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from conftest import classifier_kernel as kernel
from reference import (CLASSIFIER_LS, CLASSIFIER_VAR, K_np, gaussian_delta_at_shift, k_se, mahalanobis_shifts,
                       projection_bias, reference_multiplier)
from scipy import special

import dpgp_gpflow.mechanisms.cloaking as release_module
import dpgp_gpflow.mechanisms.request as request_module
import dpgp_gpflow.sampling as sampling_module
from dpgp_gpflow import BudgetExceededError, PrivacyAccountant, PrivacyLeakError, ReproducibleNoiseWarning
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.models.dp_laplace import (
    DPLaplaceGPC,
    DPSparseLaplaceGPC,
    PrivateClassifier,
    PrivateLaplaceClassifier,
    PrivateSparseClassifier,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402

EPS, DELTA = 1.0, 0.01
VAR, LS = CLASSIFIER_VAR, CLASSIFIER_LS
D = 2.0  # one label moves from -1 to +1
JITTER = 1e-6  # gpflow's default_jitter, used by the DP predictions


# ---------------------------------------------------------------------------------------------
# Problems and independent NumPy references


def make_problem(n: int = 30, seed: int = 0):
    """Labels from a smooth sign rule on scattered 2-D inputs (some label noise); test inputs."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 2))
    y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] - 1.5 + 0.4 * rng.standard_normal(n) > 0, 1.0, -1.0)
    Xnew = rng.uniform(-0.5, 6.5, (7, 2))
    return X, y[:, None], Xnew


def C_first_np(K: np.ndarray) -> np.ndarray:
    """The brief's form ``1/2 (K^{-1} + I/4)^{-1}`` (K is well conditioned in these problems)."""
    n = K.shape[0]
    return 0.5 * np.linalg.inv(np.linalg.inv(K) + np.eye(n) / 4.0)


def newton_affine_np(K: np.ndarray, f: np.ndarray):
    """``f_new = C y + b``: ``C = 1/2 (K^{-1} + W)^{-1}``, ``b = 2 C (W f + 1/2 - pi)`` (JMLR eq. 11)."""
    pi = special.expit(f)
    W = pi * (1.0 - pi)
    C = 0.5 * np.linalg.inv(np.linalg.inv(K) + np.diag(W))
    return C, 2.0 * C @ (W * f + 0.5 - pi), W


def sor_np(X: np.ndarray, Z: np.ndarray, Xnew: np.ndarray):
    """SoR features with GPflow's jitter on K_ZZ and the weight cloaking matrix."""
    Lzz = np.linalg.cholesky(K_np(Z) + JITTER * np.eye(len(Z)))
    Phi = np.linalg.solve(Lzz, K_np(Z, X)).T
    Phi_new = np.linalg.solve(Lzz, K_np(Z, Xnew)).T
    m = Z.shape[0]
    Cw = 0.5 * np.linalg.solve(np.eye(m) + Phi.T @ Phi / 4.0, Phi.T)
    return Phi, Phi_new, Cw


def mu_np(F: np.ndarray, C: np.ndarray, d: float = D) -> float:
    """``d sqrt(max_i c_i^T (F F^T)^+ c_i)`` over every column of ``C``."""
    return d * float(np.max(mahalanobis_shifts(F, C)))


def quiet_release(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        return model.release(**kwargs)


@pytest.fixture(scope="module")
def problem():
    return make_problem()


@pytest.fixture(scope="module")
def model(problem):
    X, Y, _ = problem
    return DPLaplaceGPC((X, Y), kernel(), hyperparameters_public=True)


@pytest.fixture(scope="module")
def one_step(model):
    return quiet_release(model, epsilon=EPS, delta=DELTA, seed=11)


@pytest.fixture(scope="module")
def two_steps(model):
    return quiet_release(model, epsilon=EPS, delta=DELTA, steps=2, seed=12)


@pytest.fixture(scope="module")
def sparse_model(problem):
    X, Y, _ = problem
    return DPSparseLaplaceGPC((X, Y), kernel(), 8, hyperparameters_public=True)


@pytest.fixture(scope="module")
def sparse_release(sparse_model):
    return quiet_release(sparse_model, epsilon=EPS, delta=DELTA, seed=13)


# ---------------------------------------------------------------------------------------------
# The first Newton step is C y


def test_cloaking_matrix_matches_numpy(model, problem):
    X, _, _ = problem
    K = K_np(X)
    assert np.linalg.cond(K) < 1e7  # so the brief's inverse form is an accurate reference
    np.testing.assert_allclose(model.cloaking_matrix().numpy(), C_first_np(K), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("lengthscale", [LS, 3.0])  # 3.0: rank truncated, so the bias bound matters
def test_first_step_difference_is_projected_C_times_label_difference(lengthscale):
    X, Y, _ = make_problem(seed=1)
    flips = [0, 5, 17]
    Y2 = Y.copy()
    Y2[flips] *= -1.0
    k = lambda: gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=lengthscale)  # noqa: E731
    r1 = quiet_release(DPLaplaceGPC((X, Y), k(), hyperparameters_public=True), epsilon=EPS, delta=DELTA,
                       seed=3).releases[0]
    r2 = quiet_release(DPLaplaceGPC((X, Y2), k(), hyperparameters_public=True), epsilon=EPS, delta=DELTA,
                       seed=3).releases[0]
    assert r1.rank == r2.rank and np.array_equal(r1.noise_factor, r2.noise_factor)  # C is public
    K = k_se(X, X, variance=VAR, lengthscale=lengthscale)
    C = 0.5 * K @ np.linalg.inv(np.eye(len(X)) + K / 4.0)  # = 1/2 (K^{-1} + I/4)^{-1}, no K^{-1}
    dC = C @ (Y - Y2)[:, 0]
    diff = (r1.mean - r2.mean)[:, 0]
    U, _, _ = auditing.noise_span(r1.noise_factor)
    np.testing.assert_allclose(diff, U @ (U.T @ dC), rtol=0, atol=1e-9 * np.abs(dC).max())
    # The truncation moves C y by at most s_{r+1} ||y||; for the difference ||y - y'|| = 2 sqrt(3).
    s = np.linalg.svd(C, compute_uv=False)
    residual = s[r1.rank] if r1.rank < len(s) else 0.0
    assert np.linalg.norm(diff - dC) <= residual * np.linalg.norm(Y - Y2) * (1 + 1e-6) + 1e-9
    # labels are +-1 about 0: the worst-case bias per prediction is ||C_j - P_j||_1
    assert r1.bias_bound == pytest.approx(projection_bias(C, r1.rank, 1.0)[0].max(), rel=1e-6, abs=1e-12)
    if lengthscale == 3.0:
        assert r1.rank < len(X) and np.linalg.norm(diff - dC) > 0


def test_release_fields(one_step, problem):
    X, _, _ = problem
    assert isinstance(one_step, PrivateLaplaceClassifier) and isinstance(one_step, PrivateClassifier)
    assert not isinstance(one_step, PrivateSparseClassifier)
    (rel,) = one_step.releases
    assert rel.mean.shape == (len(X), 1) and rel.noise_factor.shape[0] == len(X)
    assert rel.data_sensitivity == D and rel.epsilon == EPS and rel.delta == DELTA
    assert rel.reproducible and one_step.reproducible
    np.testing.assert_allclose(rel.variance[:, 0], 2.0 * np.diag(C_first_np(K_np(X))), rtol=1e-8)
    np.testing.assert_allclose(one_step.W_diag, 0.25)
    assert one_step.epsilon == EPS and one_step.delta == DELTA


def test_seed_none_is_private_and_fresh(model):
    a = model.release(epsilon=EPS, delta=DELTA)
    b = model.release(epsilon=EPS, delta=DELTA)
    assert not a.reproducible and not np.allclose(a.latent, b.latent)


def test_seed_warns(model):
    with pytest.warns(ReproducibleNoiseWarning):
        model.release(epsilon=EPS, delta=DELTA, seed=0)


# ---------------------------------------------------------------------------------------------
# Exact audits (DESIGN 8 A)


def _exact_checks(rel, C_ref, epsilon, delta):
    mu = mu_np(rel.noise_factor, C_ref)
    assert mu <= (1.0 / rel.noise_multiplier) * (1 + 1e-6)
    assert gaussian_delta_at_shift(epsilon, mu) <= delta * (1 + 1e-9)
    assert rel.noise_multiplier == pytest.approx(gaussian_multiplier(epsilon, delta, rel.calibration), rel=1e-12)


@pytest.mark.parametrize("objective,calibration", [("mse", "analytic"), ("entropy", "classical")])
def test_exact_audit_first_step(problem, objective, calibration):
    X, Y, _ = problem
    C = C_first_np(K_np(X))

    def released(y, model_cls=DPLaplaceGPC):
        m = model_cls((X, y[:, None]), kernel(), hyperparameters_public=True)
        return quiet_release(m, epsilon=EPS, delta=DELTA, seed=5, objective=objective, calibration=calibration)

    rel = released(Y[:, 0]).releases[0]
    _exact_checks(rel, C, EPS, DELTA)
    shifts, _ = auditing.measured_shifts(lambda y: released(y).releases[0].mean, Y[:, 0], [0, 9, 21], (-1.0, 1.0))
    # the measured shifts are the columns d c_i projected onto the noise span (rank truncation)
    U, _, _ = auditing.noise_span(rel.noise_factor)
    expected = D * C[:, [0, 9, 21]].T
    np.testing.assert_allclose(shifts, (expected @ U) @ U.T, atol=1e-9)
    s = np.linalg.svd(C, compute_uv=False)
    residual = s[rel.rank] if rel.rank < len(s) else 0.0
    assert np.linalg.norm(shifts - expected, axis=1).max() <= D * residual * (1 + 1e-6) + 1e-12
    audit = auditing.audit_exact(rel, shifts, C_ref=C, data_sensitivity=D)
    assert audit.passed, audit.failures


def test_exact_audit_two_steps(two_steps, problem):
    X, Y, _ = problem
    K = K_np(X)
    r1, r2 = two_steps.releases
    # each step at sqrt(2) s(EPS, DELTA) (s by root-finding of the analytic delta): the two compose in Gaussian
    # DP to mu = 1 / s, the whole (EPS, DELTA)
    step = math.sqrt(2.0) * reference_multiplier(EPS, DELTA)
    C2, b2, W = newton_affine_np(K, r1.mean[:, 0])
    mus = []
    for rel, C_ref in ((r1, C_first_np(K)), (r2, C2)):
        assert rel.noise_multiplier == pytest.approx(step, rel=1e-9)
        mus.append(mu_np(rel.noise_factor, C_ref))
        assert mus[-1] <= (1.0 / step) * (1 + 1e-6)
        assert gaussian_delta_at_shift(rel.epsilon, 1.0 / step) == pytest.approx(DELTA, rel=1e-6)
    assert gaussian_delta_at_shift(EPS, math.hypot(*mus)) <= DELTA * (1 + 1e-9)
    assert two_steps.epsilon == EPS and two_steps.delta == DELTA
    assert auditing.audit_exact(r2, np.zeros((0, len(X))), C_ref=C2, data_sensitivity=D).passed
    # the second step is C2 y + b2 (from the released f~_1) plus noise in range(F2)
    # (the offset b2 is public and added as is; C2 y is projected onto the noise span)
    U, _, _ = auditing.noise_span(r2.noise_factor)
    e = r2.mean[:, 0] - C2 @ Y[:, 0] - b2
    outside = e - U @ (U.T @ e)
    Cy = C2 @ Y[:, 0]
    np.testing.assert_allclose(outside, -(Cy - U @ (U.T @ Cy)), atol=1e-8 * np.abs(r2.mean).max())
    assert np.abs(outside).max() <= r2.bias_bound * (1 + 1e-6) + 1e-12  # worst case per prediction
    np.testing.assert_allclose(two_steps.W_diag, W, rtol=1e-10)  # W at the last linearisation point


def test_exact_audit_sparse(sparse_model, sparse_release, problem):
    X, Y, Xnew = problem
    Z = sparse_release.inducing_inputs
    _, _, Cw = sor_np(X, Z, Xnew)
    np.testing.assert_allclose(sparse_model.cloaking_matrix().numpy(), Cw, rtol=1e-7, atol=1e-10)
    (rel,) = sparse_release.releases
    assert rel.mean.shape == (Z.shape[0], 1)
    _exact_checks(rel, Cw, EPS, DELTA)

    def released(y):
        m = DPSparseLaplaceGPC((X, y[:, None]), kernel(), Z, hyperparameters_public=True)
        return quiet_release(m, epsilon=EPS, delta=DELTA, seed=5).releases[0].mean

    shifts, _ = auditing.measured_shifts(released, Y[:, 0], [2, 14], (-1.0, 1.0))
    audit = auditing.audit_exact(rel, shifts, C_ref=Cw, data_sensitivity=D)
    assert audit.passed, audit.failures


def test_exact_audit_sparse_reference_inputs(sparse_model, problem):
    """With reference inputs the release is of ``v = R w`` (``R^T R = Phi_ref^T Phi_ref`` + a 1e-8
    relative ridge); the weights come back exactly.

    An invertible public map does not change the privacy loss, so the audit runs in weight space:
    the noise factor ``F_w = R^{-1} F_v`` against the columns of ``C_w``.
    """
    X, Y, Xnew = problem
    pc = quiet_release(sparse_model, epsilon=EPS, delta=DELTA, seed=6, reference_inputs=X)
    (rel,) = pc.releases
    Phi, _, Cw = sor_np(X, pc.inducing_inputs, Xnew)
    F_w = pc.weight_noise_factor
    mu = mu_np(F_w, Cw)
    assert mu <= (1.0 / rel.noise_multiplier) * (1 + 1e-6)
    assert gaussian_delta_at_shift(EPS, mu) <= DELTA * (1 + 1e-9)
    # ||Phi w|| = ||R w|| up to the ridge (relative 1e-8 of the trace): norms are preserved to ~1e-8
    assert np.linalg.norm(Phi @ pc.weights) == pytest.approx(np.linalg.norm(rel.mean), rel=1e-6)
    assert np.sum((Phi @ F_w) ** 2) == pytest.approx(np.sum(rel.noise_factor**2), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# SoR with Z = X is the full model


def test_sparse_with_Z_equal_X_matches_full(problem):
    X, Y, Xnew = problem
    full = DPLaplaceGPC((X, Y), kernel(), hyperparameters_public=True)
    sparse = DPSparseLaplaceGPC((X, Y), kernel(), X, hyperparameters_public=True)
    Phi = sparse.features(X).numpy()
    # Phi Phi^T = K (K + jitter)^{-1} K: equal to K up to ~jitter (K well conditioned here)
    tol = 1e-4
    np.testing.assert_allclose(Phi @ sparse.cloaking_matrix().numpy(), full.cloaking_matrix().numpy(), atol=tol)
    mf, vf = full.predict_f(Xnew)
    ms, _ = sparse.predict_f(Xnew)
    np.testing.assert_allclose(ms.numpy(), mf.numpy(), atol=tol)
    _, vf_train = full.predict_f(X)
    _, vs_train = sparse.predict_f(X)  # SoR variance equals the full one at the inducing inputs
    np.testing.assert_allclose(vs_train.numpy(), vf_train.numpy(), atol=tol)
    # DP: with reference inputs X the mse noise is optimised for the same latents: same covariance
    pf = quiet_release(full, epsilon=EPS, delta=DELTA, seed=1, rtol=1e-6)
    ps = quiet_release(sparse, epsilon=EPS, delta=DELTA, seed=1, rtol=1e-6, reference_inputs=X)
    Ff = pf.releases[0].noise_factor
    Fs = Phi @ ps.weight_noise_factor
    scale = np.abs(Ff @ Ff.T).max()
    np.testing.assert_allclose(Fs @ Fs.T, Ff @ Ff.T, atol=1e-3 * scale)
    np.testing.assert_allclose(ps.dp_noise_variance(Xnew), pf.dp_noise_variance(Xnew),
                               rtol=1e-2, atol=1e-3 * scale)


# ---------------------------------------------------------------------------------------------
# Predictions: DP noise variance included, no labels read, nothing spent


def test_predict_f_full_matches_numpy(one_step, problem):
    X, _, Xnew = problem
    K, Ks, kss = K_np(X), K_np(X, Xnew), np.full(len(Xnew), VAR)
    Kj = K + JITTER * np.eye(len(X))
    f = one_step.latent[:, 0]  # [N, 1]
    F = one_step.releases[0].noise_factor
    mean = Ks.T @ np.linalg.solve(Kj, f)
    W = np.full(len(X), 0.25)
    var = kss - np.einsum("ij,ij->j", Ks, np.linalg.solve(K + np.diag(1.0 / W), Ks))
    noise = np.sum((Ks.T @ np.linalg.solve(Kj, F)) ** 2, axis=1)
    assert np.all(noise > 0.0)
    m, v = one_step.predict_f(Xnew)
    assert all(isinstance(t, np.ndarray) and t.shape == (len(Xnew), 1) for t in (m, v))  # NumPy [k, 1]
    np.testing.assert_allclose(m[:, 0], mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(v[:, 0], var + noise, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(one_step.dp_noise_variance(Xnew)[:, 0], noise, rtol=1e-7)
    p, pv = one_step.predict_y(Xnew)
    assert all(isinstance(t, np.ndarray) and t.shape == (len(Xnew), 1) for t in (p, pv))  # NumPy [k, 1]
    p_np = special.expit(mean / np.sqrt(1.0 + math.pi * (var + noise) / 8.0))
    np.testing.assert_allclose(p[:, 0], p_np, rtol=1e-7)
    np.testing.assert_allclose(pv[:, 0], p_np * (1 - p_np), rtol=1e-7)
    # at a training input the propagated noise is the release's own noise there (K^{-1} K = I)
    np.testing.assert_allclose(one_step.dp_noise_variance(X[:3])[:, 0],
                               one_step.releases[0].noise_std[:3, 0] ** 2, rtol=1e-3)


def test_predict_f_two_steps_uses_W_at_the_released_latents(two_steps, problem):
    X, _, Xnew = problem
    K, Ks = K_np(X), K_np(X, Xnew)
    f1 = two_steps.releases[0].mean[:, 0]
    W = special.expit(f1) * special.expit(-f1)
    var = VAR - np.einsum("ij,ij->j", Ks, np.linalg.solve(K + np.diag(1.0 / W), Ks))
    F = two_steps.releases[1].noise_factor
    noise = np.sum((Ks.T @ np.linalg.solve(K + JITTER * np.eye(len(X)), F)) ** 2, axis=1)
    _, v = two_steps.predict_f(Xnew)
    np.testing.assert_allclose(v[:, 0], var + noise, rtol=1e-6)


def test_predict_f_sparse_matches_numpy(sparse_release, problem):
    X, _, Xnew = problem
    Phi, Phi_new, _ = sor_np(X, sparse_release.inducing_inputs, Xnew)
    w = sparse_release.weights  # [M, 1]
    F = sparse_release.releases[0].noise_factor
    np.testing.assert_array_equal(w, sparse_release.releases[0].mean)
    Sigma = np.linalg.inv(np.eye(len(w)) + Phi.T @ Phi / 4.0)
    var = np.einsum("ij,jk,ik->i", Phi_new, Sigma, Phi_new)
    noise = np.sum((Phi_new @ F) ** 2, axis=1)
    m, v = sparse_release.predict_f(Xnew)
    np.testing.assert_allclose(m, Phi_new @ w, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(v[:, 0], var + noise, rtol=1e-7)
    np.testing.assert_allclose(sparse_release.releases[0].variance[:, 0], np.diag(Sigma), rtol=1e-7)


def test_predictions_spend_nothing_and_draw_nothing(model, sparse_model, problem, draws):
    X, _, Xnew = problem
    calls = draws
    with PrivacyAccountant(epsilon=2.0, delta=0.02) as acc:
        pcs = [model.release(epsilon=EPS, delta=DELTA / 2), sparse_model.release(epsilon=EPS, delta=DELTA / 2)]
        assert len(acc.ledger) == 2 and len(calls) == 2
        for pc in pcs:
            for Xq in (Xnew, Xnew + 0.3, X):
                pc.predict_f(Xq)
                pc.predict_y(Xq)
                pc.predict_class(Xq)
                pc.dp_noise_variance(Xq)
        assert len(acc.ledger) == 2 and len(calls) == 2


def test_private_classifier_does_not_read_the_model(one_step, model, problem):
    """The released classifier holds its own copy of the kernel: later changes do not leak into it."""
    _, _, Xnew = problem
    before = one_step.predict_f(Xnew)[0]
    old = model.kernel.lengthscales.numpy()
    model.kernel.lengthscales.assign(0.3)
    try:
        np.testing.assert_array_equal(one_step.predict_f(Xnew)[0], before)
    finally:
        model.kernel.lengthscales.assign(old)


# ---------------------------------------------------------------------------------------------
# Budget: composition over steps, refusal before drawing


def _gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with delta(epsilon) <= delta for a mu-GDP mechanism (bisection, NumPy/SciPy)."""
    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gaussian_delta_at_shift(mid, mu) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("composition", ["basic", "gdp"])
def test_two_steps_need_the_requested_budget_not_twice(model, composition):
    """The T steps compose in Gaussian DP to one event (epsilon, delta): a budget of exactly (EPS, DELTA) takes
    both steps under any accountant (before: each step at (EPS / 2, DELTA / 2), one event each)."""
    acc = PrivacyAccountant(epsilon=EPS, delta=DELTA, composition=composition)
    pc = quiet_release(model, epsilon=EPS, delta=DELTA, steps=2, seed=0, accountant=acc)
    assert len(acc.ledger) == 1 and len(pc.releases) == 2
    assert acc.ledger[0].mu == pytest.approx(1.0 / reference_multiplier(EPS, DELTA), rel=1e-9)


def test_two_steps_charge_the_accountant_once(model):
    """One ledger event (EPS, DELTA, mu = 1 / s) for both steps; each step at multiplier sqrt(2) s, tighter than
    basic composition's s(EPS / 2, DELTA / 2), recording its own epsilon at DELTA."""
    acc = PrivacyAccountant(epsilon=EPS, delta=DELTA)
    pc = quiet_release(model, epsilon=EPS, delta=DELTA, steps=2, seed=0, accountant=acc)
    s = reference_multiplier(EPS, DELTA)
    assert len(acc.ledger) == 1 and len(pc.releases) == 2
    (ev,) = acc.ledger
    assert ev.kind == "gaussian" and ev.mu == pytest.approx(1.0 / s, rel=1e-9)
    assert (ev.epsilon, ev.delta) == (EPS, DELTA) and acc.spent == pytest.approx((EPS, DELTA))
    step_epsilon = _gdp_epsilon(1.0 / (math.sqrt(2.0) * s), DELTA)
    for rel in pc.releases:
        assert rel.noise_multiplier == pytest.approx(math.sqrt(2.0) * s, rel=1e-9)
        assert rel.noise_multiplier < reference_multiplier(EPS / 2, DELTA / 2)  # GDP's tighter bound
        assert rel.epsilon == pytest.approx(step_epsilon, rel=1e-8) and rel.delta == DELTA
    assert (pc.epsilon, pc.delta) == (EPS, DELTA)  # the whole, not the sum of the steps'
    card = pc.privacy_card()
    assert card["composition"] == "gaussian-dp" and card["steps"] == 2
    assert card["mu"] == pytest.approx(1.0 / s, rel=1e-9)


def test_the_audit_recomputes_the_whole_mu_of_the_steps(two_steps, model, problem):
    """dp.audit of a two-step release: the whole's mu is sqrt(mu_1^2 + mu_2^2) of the steps' recomputed mu
    (NumPy: the label flips' whitened shifts through each step's map), its epsilon at DELTA within the claim;
    the same steps claiming a smaller whole fail."""
    from dpgp_gpflow.privacy_audit import audit

    X, _, _ = problem
    K = K_np(X)
    r1, r2 = two_steps.releases
    C2, _, _ = newton_affine_np(K, r1.mean[:, 0])
    mu = math.hypot(mu_np(r1.noise_factor, C_first_np(K)), mu_np(r2.noise_factor, C2))
    report = audit(two_steps, model)
    assert report.passed and report.delta == DELTA
    assert report.epsilon == pytest.approx(_gdp_epsilon(mu, DELTA), rel=1e-5) and report.epsilon <= EPS * (1 + 1e-6)
    forged = PrivateLaplaceClassifier(list(two_steps.releases), two_steps.readout).composed(0.5, DELTA, 0.1)
    assert not audit(forged, model).passed


def _forbidden_draw(calls):
    def draw(size, seed=None):
        calls.append(size)
        raise AssertionError("noise was drawn")

    return draw


@pytest.mark.parametrize("which", ["full-2-steps", "full-context", "sparse", "full-2-steps-gdp"])
def test_over_budget_raises_before_drawing(model, sparse_model, monkeypatch, which):
    calls = []
    monkeypatch.setattr(sampling_module, "standard_normal", _forbidden_draw(calls))
    acc = PrivacyAccountant(epsilon=0.6, delta=DELTA)  # enough for one step at eps/2, not for two
    if which.endswith("gdp"):
        # the two steps are one event (1, DELTA) in any composition: a budget just below it refuses
        acc = PrivacyAccountant(epsilon=0.999, delta=DELTA, composition="gdp")
    with pytest.raises(BudgetExceededError):
        if which.startswith("full-2-steps"):
            model.release(epsilon=1.0, delta=DELTA, steps=2, accountant=acc)
        elif which == "full-context":
            with acc:
                model.release(epsilon=1.0, delta=DELTA, steps=2)
        else:
            sparse_model.release(epsilon=1.0, delta=DELTA, accountant=acc)
    assert calls == [] and acc.ledger == ()


def test_invalid_arguments_raise_before_drawing(model, sparse_model, monkeypatch):
    calls = []
    monkeypatch.setattr(sampling_module, "standard_normal", _forbidden_draw(calls))
    with pytest.raises(ValueError, match="steps"):
        model.release(epsilon=EPS, delta=DELTA, steps=0)
    with pytest.raises(ValueError):
        model.release(epsilon=2.0, delta=DELTA, calibration="classical")  # classical needs eps <= 1
    with pytest.raises(ValueError, match="objective"):
        model.release(epsilon=EPS, delta=DELTA, objective="nope")
    with pytest.raises(ValueError):
        model.release(epsilon=0.0, delta=DELTA)
    with pytest.raises(ValueError):
        sparse_model.release(epsilon=EPS, delta=1.5)
    with pytest.raises(NotImplementedError):
        sparse_model.release(epsilon=EPS, delta=DELTA, steps=2)
    with pytest.raises(NotImplementedError, match="calibration='analytic'"):  # steps compose in Gaussian DP
        model.release(epsilon=EPS, delta=DELTA, steps=2, calibration="classical")
    assert calls == []


COUNTED = ("validate_epsilon", "validate_delta", "gaussian_multiplier", "reserve")


@pytest.mark.parametrize("which", ["full-1-step", "full-2-steps", "sparse"])
def test_one_validation_and_one_reservation_per_classifier_release(model, sparse_model, monkeypatch, which):
    """issue 27 item 1: a warm classifier release validates (epsilon, delta) once and takes one
    reservation (for all its Newton steps); each step's mechanism neither validates nor reserves.
    Counted wherever the model, the pipeline and the mechanisms look these names up, and every
    Reservation actually held. (Before: DPLaplaceGPC validated and reserved, then each step's
    cloaking_release did both again through a borrowed Reservation.)"""
    from collections import Counter

    from dpgp_gpflow import accounting, measurement, pipeline
    from dpgp_gpflow.models import dp_laplace

    steps = 2 if which == "full-2-steps" else 1
    release = (lambda: sparse_model.release(epsilon=EPS, delta=DELTA, seed=4)) if which == "sparse" else \
        (lambda: model.release(epsilon=EPS, delta=DELTA, steps=steps, seed=4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        release()  # warm: compiled stages traced
    counts: Counter = Counter()
    for module in (dp_laplace, pipeline, measurement, request_module, release_module):  # measure reserves
        for name in COUNTED:
            if hasattr(module, name):
                original = getattr(module, name)

                def wrapper(*args, _name=name, _original=original, **kwargs):
                    counts[_name] += 1
                    return _original(*args, **kwargs)

                monkeypatch.setattr(module, name, wrapper)
    held = accounting.Reservation.__init__

    def holding(self, *args, **kwargs):
        if not isinstance(self, measurement.StepDraws):  # the steps' counter of draws holds no budget
            counts["held"] += 1
        held(self, *args, **kwargs)

    monkeypatch.setattr(accounting.Reservation, "__init__", holding)
    with PrivacyAccountant(epsilon=2.0, delta=0.1) as acc, warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        released = release()
    assert counts["validate_epsilon"] == 1 and counts["validate_delta"] == 1
    assert counts["reserve"] == 1 and counts["held"] == 1
    # the multiplier once: each of T steps is at sqrt(T) times it (Gaussian-DP composition)
    assert counts["gaussian_multiplier"] == 1
    assert len(acc.ledger) == 1 and len(released.releases) == steps and acc.spent == pytest.approx((EPS, DELTA))
    assert acc.held == (0.0, 0.0)


def _raising_publish(monkeypatch, at_call: int):
    """Make the exact cloaking mechanism's publishing step (after the plan, before the draw) raise at its
    ``at_call``-th call (1-based); the calls before it publish as usual."""
    original, calls = release_module.publish_cloaking, []

    def publish(**kwargs):
        calls.append(1)
        if len(calls) == at_call:
            raise FloatingPointError("refused midway (test)")
        return original(**kwargs)

    monkeypatch.setattr(release_module, "publish_cloaking", publish)
    return calls


@pytest.mark.parametrize("context", [False, True])
def test_a_release_that_raises_midway_charges_nothing(model, monkeypatch, draws, context):
    """A release refused after its one reservation was taken (here by the mechanism, after the noise plan
    and before the draw) draws nothing, charges nothing and holds nothing: the accountant's ledger,
    spend and remaining budget are as before."""
    acc = PrivacyAccountant(epsilon=3.0, delta=0.1)
    acc.spend(0.25, 1e-3, description="earlier release")
    before = (acc.ledger, acc.spent, acc.remaining)
    calls = _raising_publish(monkeypatch, at_call=1)
    with pytest.raises(FloatingPointError, match="midway"):
        if context:
            with acc:
                model.release(epsilon=EPS, delta=DELTA, steps=2)
        else:
            model.release(epsilon=EPS, delta=DELTA, steps=2, accountant=acc)
    assert calls == [1] and draws == []
    assert (acc.ledger, acc.spent, acc.remaining) == before and acc.held == (0.0, 0.0)


def test_a_refusal_at_a_later_newton_step_charges_the_whole_event_once(model, monkeypatch, draws):
    """Step 2 is linearised at step 1's released latents, so a refusal there is computed from them: step 1
    was drawn, so the release's one event (EPS, DELTA) is charged once (it bounds what was drawn); nothing is
    left held."""
    acc = PrivacyAccountant(epsilon=3.0, delta=0.1)
    calls = _raising_publish(monkeypatch, at_call=2)
    with pytest.raises(FloatingPointError, match="midway"):
        model.release(epsilon=EPS, delta=DELTA, steps=2, accountant=acc)
    assert calls == [1, 1] and len(draws) == 1
    assert len(acc.ledger) == 1 and acc.spent == pytest.approx((EPS, DELTA)) and acc.held == (0.0, 0.0)


def test_classifier_releases_are_marked_and_refuse_clipping(one_step, two_steps, sparse_release):
    for released in (one_step, two_steps, sparse_release):
        assert all(r.classifier_latent for r in released.releases)
        with pytest.raises(ValueError, match="classifier"):
            released.release.clipped()


# ---------------------------------------------------------------------------------------------
# Labels and inputs


@pytest.mark.parametrize("cls", [DPLaplaceGPC, DPSparseLaplaceGPC])
def test_labels_outside_plus_minus_one_are_rejected(problem, cls):
    X, Y, _ = problem
    args = (kernel(),) if cls is DPLaplaceGPC else (kernel(), X[:4])
    with pytest.raises(ValueError, match=r"labels must be -1 or \+1.*2 \* Y - 1"):
        cls((X, (Y + 1.0) / 2.0), *args)  # {0, 1}: rejected, with the mapping as a hint
    bad = Y.copy()
    bad[3] = 2.0
    with pytest.raises(ValueError, match=r"labels must be -1 or \+1"):
        cls((X, bad), *args)
    bad[3] = np.nan
    with pytest.raises(ValueError):
        cls((X, bad), *args)


def test_non_finite_inputs_are_rejected(problem):
    X, Y, _ = problem
    Xb = X.copy()
    Xb[0, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        DPLaplaceGPC((Xb, Y), kernel())
    with pytest.raises(ValueError, match="columns"):
        DPSparseLaplaceGPC((X, Y), kernel(), np.zeros((3, 3)))


def test_sparse_inducing_inputs_are_public_and_fixed(sparse_model, problem):
    X, Y, _ = problem
    from dpgp_gpflow.models import kmeans_inducing_inputs

    np.testing.assert_allclose(sparse_model.inducing_variable.Z.numpy(), kmeans_inducing_inputs(X, 8))
    Z = sparse_model.inducing_variable.Z
    assert not Z.trainable
    assert not any(v is Z.unconstrained_variable for v in sparse_model.trainable_variables)


# ---------------------------------------------------------------------------------------------
# The leak guard


@pytest.mark.parametrize("cls", [DPLaplaceGPC, DPSparseLaplaceGPC])
@pytest.mark.parametrize("compiled", [False, True])
def test_leak_guard_fires_after_training_the_objective(problem, cls, compiled):
    X, Y, _ = problem
    args = (kernel(),) if cls is DPLaplaceGPC else (kernel(), X[:5])
    m = cls((X, Y), *args, hyperparameters_public=True)
    assert not m.private_objective_evaluated
    m.release(epsilon=EPS, delta=DELTA)  # fine before training
    if compiled:
        tf.function(m.training_loss)()
    else:
        gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=2))
    assert m.private_objective_evaluated
    with pytest.raises(PrivacyLeakError, match="hyperparameters_public"):
        m.release(epsilon=EPS, delta=DELTA)
    assert isinstance(m.release(epsilon=EPS, delta=DELTA, hyperparameters_public=True), PrivateClassifier)


def test_non_private_predictions_do_not_mark(model, problem):
    _, _, Xnew = problem
    model.predict_y(Xnew)
    assert not model.private_objective_evaluated


# ---------------------------------------------------------------------------------------------
# Utility sanity: DP predictions carry the labels' signal


def test_dp_classifier_beats_chance_on_average():
    X, Y, Xnew = make_problem(n=60, seed=4)
    rng = np.random.default_rng(0)
    Xt = rng.uniform(0.0, 6.0, (200, 2))
    yt = np.where(np.sin(Xt[:, 0]) + 0.5 * Xt[:, 1] - 1.5 > 0, 1.0, -1.0)
    m = DPLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=2.0),
                     hyperparameters_public=True)
    accs = [np.mean(quiet_release(m, epsilon=EPS, delta=DELTA, seed=s).predict_class(Xt)[:, 0] == yt) for s in range(3)]
    p, _ = m.predict_y(Xt)
    nondp = np.mean(np.where(p.numpy()[:, 0] >= 0.5, 1.0, -1.0) == yt)
    assert nondp > 0.8 and np.mean(accs) > 0.65


def test_ill_conditioned_mnist_release_converges(data_dir):
    """Regression: an mse solve (sparse classifier on MNIST, m = 70, lengthscale 95) that lost the
    barrier's central path with too loose a centring and then refused to release. It must release,
    with a converged certificate, and pass the exact audit."""
    from dpgp_gpflow.datasets import load_mnist_binary
    from dpgp_gpflow.models import kmeans_inducing_inputs

    X, Y, _, _ = load_mnist_binary(data_dir / "mnist_2400.npz", n_train=256, n_test=100, size=15, seed=0,
                                   pixel_max=255.0)
    Z = kmeans_inducing_inputs(X, 70)
    model = DPSparseLaplaceGPC((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=95.0), Z,
                               hyperparameters_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        pc = model.release(epsilon=1.0, delta=0.01, seed=0)
    (rel,) = pc.releases
    assert rel.certificate.converged
    mu = mu_np(pc.weight_noise_factor, model.cloaking_matrix().numpy())
    assert mu <= (1.0 / rel.noise_multiplier) * (1 + 1e-6)
