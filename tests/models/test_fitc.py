"""DPGPRFITC and PrivateFunction (DESIGN 2, 5.3, 8): the sparse cloaking matrix against GPflow's
``GPRFITC`` and an independent NumPy FITC formula, release once / query anywhere, exact privacy
audits of sparse releases recomputed from their public noise factors, the privacy guards, and a
scale smoke test.

The NumPy reference (:func:`fitc_reference`) is written from the FITC definition (Snelson &
Ghahramani 2006; JMLR section 3.2) with LU solves, never the package's Cholesky route:

    mu_* = k_*M Q^{-1} K_MN (Lambda + s2 I)^{-1} (y - m) + m,   Q = K_MM + K_MN (Lambda + s2 I)^{-1} K_NM,
    Lambda = diag(K_NN - Q_NN),  Q_NN = K_NM K_MM^{-1} K_MN,

with GPflow's ``default_jitter`` (1e-6) added to ``K_MM`` as GPflow does. The released inducing
coordinates are recovered independently too: the package publishes ``R B (y - m)`` with
``B = L_MM^T Q^{-1} K_MN (Lambda + s2 I)^{-1}`` and ``R`` the triangular factor of the readout at the
reference inputs; we check ``R`` (``R^T R = A^T A``) rather than trust it.
"""

from __future__ import annotations

import inspect
import resource
import sys
import time
import warnings
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import gpflow
import numpy as np
import pytest
from reference import gaussian_delta_at_shift, k_se, mahalanobis_shifts, range_projector
from scipy.linalg import solve_triangular

import dpgp_gpflow
from dpgp_gpflow import BudgetExceededError, PrivacyAccountant, PrivacyLeakError, PrivateRelease
from dpgp_gpflow.datasets import load_kung
from dpgp_gpflow.models import DPGPR, DPGPRFITC, PrivateFunction, kmeans_inducing_inputs
from dpgp_gpflow.release import standard_normal

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))
import auditing  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -1.5, 2.5  # asymmetric, so the public prior mean (0.5) is not zero
D = HI - LO
MID = 0.5 * (LO + HI)
EPS, DELTA = 1.0, 0.01
VAR, NOISE = 1.3, 0.1
LENGTHSCALES = {1: 1.7, 2: [1.7, 2.3]}  # ARD in 2-D
N, M_INDUCING, K_TEST = 40, 6, 25
J = 3  # the output that neighbours change (set to LO so it may move by the full d)
JITTER = 1e-6


def kernel(dim: int) -> gpflow.kernels.SquaredExponential:
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALES[dim])


def kref(dim: int):
    return partial(k_se, variance=VAR, lengthscale=np.asarray(LENGTHSCALES[dim], dtype=float))


def make_data(n: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, dim))
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((n, 1)), LO, HI)
    Y[J, 0] = LO
    Xnew = rng.uniform(-1.0, 11.0, (K_TEST, dim))
    return X, Y, Xnew


def make_model(X, Y, Z, dim, **kw) -> DPGPRFITC:
    return DPGPRFITC((X, Y), kernel(dim), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True, **kw)


def neighbour(Y):
    Y2 = Y.copy()
    Y2[J, 0] = HI  # LO -> HI: a move by the full d
    return Y2


# ---------------------------------------------------------------------------------------------
# Independent NumPy references


def fitc_reference(kern, X, Z, s2, jitter=JITTER, kdiag=VAR):
    """FITC pieces from the definition (LU solves). ``kdiag``: k(x, x) (the SE variance)."""
    m = Z.shape[0]
    Kmm = kern(Z, Z) + jitter * np.eye(m)
    Kmn = kern(Z, X)
    Lam = kdiag - np.sum(Kmn * np.linalg.solve(Kmm, Kmn), axis=0)  # diag(K_NN - Q_NN)
    Dn = Lam + s2
    Q = Kmm + (Kmn / Dn) @ Kmn.T
    W = np.linalg.solve(Q, Kmn / Dn)  # m x n: Q^{-1} K_MN (Lambda + s2 I)^{-1}
    Luu = np.linalg.cholesky(Kmm)
    return SimpleNamespace(Kmm=Kmm, Q=Q, W=W, Lam=Lam, Luu=Luu, B=Luu.T @ W, kern=kern, Z=Z, kdiag=kdiag)


def fitc_C(ref, Xnew):
    """The FITC cloaking matrix ``k_*M Q^{-1} K_MN (Lambda + s2 I)^{-1}`` (k x n)."""
    return ref.kern(Xnew, ref.Z) @ ref.W


def fitc_variance(ref, Xnew):
    """FITC predictive variance of f: ``k** - k*M K_MM^{-1} kM* + k*M Q^{-1} kM*``."""
    Ksm = ref.kern(Xnew, ref.Z)
    return (ref.kdiag - np.sum(Ksm * np.linalg.solve(ref.Kmm, Ksm.T).T, axis=1)
            + np.sum(Ksm * np.linalg.solve(ref.Q, Ksm.T).T, axis=1))


def readout(ref, Xnew):
    """``A(x) = k(x, Z) L_MM^{-T}`` (k x m): maps the (whitened) inducing values to predictions."""
    return solve_triangular(ref.Luu, ref.kern(ref.Z, Xnew), lower=True).T


def checked_R(pf: PrivateFunction, ref, X_reference):
    """The package's map from inducing values to released coordinates, checked independently:
    ``R`` is upper triangular and ``R^T R = A^T A + ridge I`` for the readout ``A`` at the reference
    inputs, with the documented ridge ``1e-8 tr(A^T A) / m`` that keeps R invertible."""
    R = pf.coordinates.numpy()
    A = readout(ref, X_reference)
    G = A.T @ A
    G = G + 1e-8 * np.trace(G) / G.shape[0] * np.eye(G.shape[0])
    assert np.allclose(np.tril(R, -1), 0.0)
    np.testing.assert_allclose(R.T @ R, G, rtol=1e-8, atol=1e-10 * np.abs(G).max())
    return R


def exact_mu(F, C, d, multiplier, epsilon, delta):
    """DESIGN 8.A: ``mu = d sqrt(max_i c_i^T (F F^T)^+ c_i)`` over every column of ``C`` projected
    onto range(F), which must be <= 1 / multiplier; the analytic-Gaussian delta(eps) at mu <= delta."""
    P = range_projector(F)
    mu = d * float(mahalanobis_shifts(F, P @ C).max())
    assert mu <= (1.0 / multiplier) * (1 + 1e-6), (mu, 1.0 / multiplier)
    assert gaussian_delta_at_shift(epsilon, mu) <= delta * (1 + 1e-9)
    return mu


def seeded_noise(rel: PrivateRelease, seed: int) -> np.ndarray:
    """The noise a seeded release added, ``F xi`` with ``xi`` the seed's standard normal draw
    (the released vector is ``offset + basis (coords + s Delta factor xi)``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xi, _ = standard_normal(rel.rank, seed)
    return rel.noise_factor @ xi


# ---------------------------------------------------------------------------------------------
# Shared problems (built once per module)


def build_problem(dim: int) -> SimpleNamespace:
    X, Y, Xnew = make_data(N, dim, seed=10 + dim)
    Z = kmeans_inducing_inputs(X, M_INDUCING, seed=0)
    ref = fitc_reference(kref(dim), X, Z, NOISE)
    return SimpleNamespace(dim=dim, X=X, Y=Y, Xnew=Xnew, Z=Z, ref=ref, C=fitc_C(ref, Xnew),
                           model=make_model(X, Y, Z, dim))


@pytest.fixture(scope="module", params=[1, 2], ids=["1d", "2d"])
def problem(request):
    return build_problem(request.param)


@pytest.fixture(scope="module")
def problem2d():
    """One problem for the guards (they do not depend on the input dimension)."""
    return build_problem(2)


# ---------------------------------------------------------------------------------------------
# The cloaking matrix: the FITC identity


def test_fitc_identity_against_gpflow_and_numpy(problem):
    p = problem
    C = p.model.cloaking_matrix(p.Xnew).numpy()
    assert C.shape == (K_TEST, N) and C.dtype == np.float64
    mean_fn = gpflow.functions.Constant(np.array([MID]))
    plain = gpflow.models.GPRFITC((p.X, p.Y), kernel(p.dim), p.Z, mean_function=mean_fn, noise_variance=NOISE)
    gp_mean, gp_var = (t.numpy()[:, 0] for t in plain.predict_f(p.Xnew))
    np.testing.assert_allclose(C @ (p.Y[:, 0] - MID) + MID, gp_mean, rtol=1e-8, atol=1e-12)
    # ... and against the NumPy FITC formula (jitter 1e-6 on K_MM included, as GPflow adds it)
    scale = np.abs(p.C).max()
    np.testing.assert_allclose(C, p.C, rtol=1e-6, atol=1e-8 * scale)
    np.testing.assert_allclose(gp_mean, p.C @ (p.Y[:, 0] - MID) + MID, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gp_var, fitc_variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)
    # the DP model predicts exactly as GPflow's GPRFITC (non-private, for comparison only)
    np.testing.assert_allclose(p.model.predict_f(p.Xnew)[0].numpy()[:, 0], gp_mean, rtol=1e-12)


def test_fitc_reference_is_not_the_full_gp(problem):
    """Guard against a vacuous reference: with 6 inducing inputs FITC differs from full GPR."""
    full = DPGPR((problem.X, problem.Y), kernel(problem.dim), y_bounds=(LO, HI), noise_variance=NOISE,
                 hyperparameters_public=True)
    Cf = full.cloaking_matrix(problem.Xnew).numpy()
    assert np.abs(Cf - problem.C).max() > 1e-2 * np.abs(Cf).max()
    assert np.max(problem.ref.Lam) > 1e-3  # Lambda = diag(K - Q) is not negligible here


# ---------------------------------------------------------------------------------------------
# Z = X: FITC equals the full GP (up to the jitter)


@pytest.fixture(scope="module")
def z_equals_x():
    """A well-conditioned 2-D problem (inputs about a lengthscale apart) so that the jitter's
    effect, of order j / lambda_min(K), is small."""
    dim = 2
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 10.0, (20, dim))
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((20, 1)), LO, HI)
    Xnew = rng.uniform(-1.0, 11.0, (30, dim))
    kern = lambda: gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=1.0)  # noqa: E731
    sparse = DPGPRFITC((X, Y), kern(), X.copy(), noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    full = DPGPR((X, Y), kern(), y_bounds=(LO, HI), noise_variance=NOISE, hyperparameters_public=True)
    K = k_se(X, X, VAR, 1.0)
    ref = fitc_reference(partial(k_se, variance=VAR, lengthscale=1.0), X, X, NOISE)
    return SimpleNamespace(X=X, Y=Y, Xnew=Xnew, sparse=sparse, full=full, K=K,
                           lam_min=float(np.linalg.eigvalsh(K)[0]), ref=ref)


def test_z_equals_x_cloaking_matrix_matches_full(z_equals_x):
    """With Z = X, Q_NN = K (K + jI)^{-1} K so Lambda = j diag(K (K + jI)^{-1}) is in [0, j]: no
    noise in Lambda. Then FITC is the full GP except for the jitter j = 1e-6 GPflow adds to K_MM:
    per eigen-direction of K (eigenvalue lambda) the weights differ by O(j / lambda), and each row of
    C moves by at most about 2 j sqrt(k(x, x)) / (s2 sqrt(lambda_min)) in the 2-norm (stated tolerance)."""
    p = z_equals_x
    assert 0.0 <= p.ref.Lam.min() and p.ref.Lam.max() <= JITTER * (1 + 1e-6)
    assert p.lam_min > 1e-2  # well conditioned: the stated tolerance is meaningful
    Cs = p.sparse.cloaking_matrix(p.Xnew).numpy()
    Cf = p.full.cloaking_matrix(p.Xnew).numpy()
    tol_row = 2.0 * JITTER * np.sqrt(VAR) / (NOISE * np.sqrt(p.lam_min))
    assert np.linalg.norm(Cs - Cf, axis=1).max() <= tol_row
    assert np.abs(Cs - Cf).max() <= 1e-4 * np.abs(Cf).max()
    # and the difference is the jitter, not an accident: without jitter the reference is the full GP
    ref0 = fitc_reference(partial(k_se, variance=VAR, lengthscale=1.0), p.X, p.X, NOISE, jitter=0.0)
    np.testing.assert_allclose(fitc_C(ref0, p.Xnew), Cf, rtol=1e-6, atol=1e-9 * np.abs(Cf).max())


def test_z_equals_x_release_matches_full(z_equals_x):
    """Entropy, rtol fixed, same seed: the sparse release (factored C = A B) and the full one have
    the same rank, sensitivity and noise distribution (F F^T), and the same noise-free released
    vector (mean minus the seeded noise F xi), to the jitter tolerance above. The noise draws F xi
    themselves differ: a noise factor is defined only up to an orthogonal rotation (signs of singular
    vectors and eigenvectors), so one seed need not give the same draw on two computation routes."""
    p = z_equals_x
    kw = dict(epsilon=EPS, delta=DELTA, objective="entropy", rtol=1e-3, seed=7)
    a = p.sparse.release(p.Xnew, **kw)
    b = p.full.release(p.Xnew, **kw)
    assert a.rank == b.rank
    assert a.sensitivity == pytest.approx(b.sensitivity, rel=1e-9)
    assert a.noise_multiplier == b.noise_multiplier
    np.testing.assert_allclose(a.noise_std, b.noise_std, rtol=1e-4)
    cov_a, cov_b = a.noise_factor @ a.noise_factor.T, b.noise_factor @ b.noise_factor.T
    assert np.abs(cov_a - cov_b).max() <= 1e-4 * np.abs(cov_b).max()
    clean_a = a.mean - seeded_noise(a, 7)
    clean_b = b.mean - seeded_noise(b, 7)
    np.testing.assert_allclose(clean_a, clean_b, rtol=0, atol=1e-4 * D)
    # the noise-free part is the projected mean P C (y - m) + m (an independent check of the above)
    Cf = p.full.cloaking_matrix(p.Xnew).numpy()
    P = range_projector(b.noise_factor)
    np.testing.assert_allclose(clean_b, P @ Cf @ (p.Y[:, 0] - MID) + MID, rtol=0, atol=1e-6 * D)
    np.testing.assert_allclose(a.variance, b.variance, rtol=1e-4, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# Release once, query anywhere


def test_release_function_noise_equals_release_at_known_points(problem):
    """Entropy is invariant under the readout (log det of A M A^T on range(A)), so with k >= m the
    released function's noise at Xnew equals that of a release made for Xnew."""
    p = problem
    kw = dict(epsilon=EPS, delta=DELTA, objective="entropy", rtol=0.0, seed=5)
    pf = p.model.release_function(**kw)
    rel = p.model.release(p.Xnew, **kw)
    assert isinstance(pf, PrivateFunction) and isinstance(pf.release, PrivateRelease)
    assert pf.release.rank == rel.rank == M_INDUCING
    pred = pf.predict(p.Xnew)
    np.testing.assert_allclose(pred.noise_std, rel.noise_std, rtol=1e-8)
    assert (pf.epsilon, pf.delta) == (EPS, DELTA)


def test_predictions_spend_nothing(problem):
    p = problem
    acc = PrivacyAccountant(epsilon=2 * EPS, delta=2 * DELTA)
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, seed=1, accountant=acc)
    assert len(acc.ledger) == 1 and acc.spent == (EPS, DELTA)
    event = acc.ledger[0]
    assert event.kind == "gaussian" and event.mu == pytest.approx(1.0 / pf.release.noise_multiplier)
    rng = np.random.default_rng(0)
    with acc:  # even inside the accountant's context, predictions are post-processing
        for k in (1, 3, 50, 200):
            for _ in range(5):
                pred = pf.predict(rng.uniform(-5.0, 15.0, (k, p.dim)))
                assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (k,)
                assert np.all(np.isfinite(pred.mean)) and np.all(pred.noise_std >= 0)
    assert len(acc.ledger) == 1 and acc.spent == (EPS, DELTA)
    # the release itself is charged and budget-checked like any other
    p.model.release_function(epsilon=EPS, delta=DELTA, seed=2, accountant=acc)
    assert len(acc.ledger) == 2
    with pytest.raises(BudgetExceededError):
        p.model.release_function(epsilon=EPS, delta=DELTA, seed=3, accountant=acc)
    assert len(acc.ledger) == 2


def test_predict_variance_equals_gprfitc(problem):
    p = problem
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, seed=1)
    Xq = np.random.default_rng(1).uniform(-3.0, 13.0, (40, p.dim))
    pred = pf.predict(Xq)
    np.testing.assert_allclose(pred.variance, p.model.predict_f(Xq)[1].numpy()[:, 0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pred.variance, fitc_variance(p.ref, Xq), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_predict_mean_is_readout_of_released_values_and_neighbour_shift_is_audited(problem, objective):
    """predict's mean = m(x) + A(x) R^{-1} v~ (v~: the released inducing coordinates). Two
    neighbouring datasets, same seed: the predictions move by A R^{-1} P_F R B d e_j, a vector in the
    span of the noise factor mapped through the readout, whose Mahalanobis size is within the
    release's claim: the exact audit applies to every prediction."""
    p = problem
    kw = dict(epsilon=EPS, delta=DELTA, objective=objective, seed=11)
    pf1 = p.model.release_function(**kw)
    pf2 = make_model(p.X, neighbour(p.Y), p.Z, p.dim).release_function(**kw)
    np.testing.assert_array_equal(pf1.release.noise_factor, pf2.release.noise_factor)  # public only
    R = checked_R(pf1, p.ref, p.X)
    Xq = np.random.default_rng(2).uniform(-2.0, 12.0, (30, p.dim))
    A = readout(p.ref, Xq) @ np.linalg.inv(R)  # [k, m]: released coordinates -> predictions
    pred1, pred2 = pf1.predict(Xq), pf2.predict(Xq)
    np.testing.assert_allclose(pred1.mean, MID + A @ pf1.release.mean, rtol=1e-9, atol=1e-9)
    G = A @ pf1.release.noise_factor  # the noise factor of the predictions
    np.testing.assert_allclose(pred1.noise_std, np.linalg.norm(G, axis=1), rtol=1e-9)
    shift = pred2.mean - pred1.mean
    F = pf1.release.noise_factor
    expected = A @ range_projector(F) @ (R @ p.ref.B[:, J]) * D
    np.testing.assert_allclose(shift, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())
    if pf1.release.rank == M_INDUCING:  # nothing projected away: the full FITC shift
        np.testing.assert_allclose(shift, D * fitc_C(p.ref, Xq)[:, J], rtol=1e-6, atol=1e-9 * np.abs(shift).max())
    P_G = range_projector(G)
    assert np.linalg.norm(shift - P_G @ shift) <= 1e-8 * np.linalg.norm(shift)
    mu = float(mahalanobis_shifts(G, shift[:, None])[0])
    assert mu <= (1.0 / pf1.release.noise_multiplier) * (1 + 1e-6)


def test_mse_reference_inputs_minimise_the_error_there(problem):
    """objective="mse" with public reference inputs Xq minimises the total noise variance at Xq
    (at full rank m): no other feasible covariance does better there, e.g. entropy's or the
    default mse release (reference = training inputs)."""
    p = problem
    Xq = np.random.default_rng(3).uniform(0.0, 10.0, (30, p.dim))
    kw = dict(epsilon=EPS, delta=DELTA, rtol=1e-7, seed=0)  # the smallest rtol "mse" accepts
    at_q = p.model.release_function(objective="mse", reference_inputs=Xq, **kw)
    at_x = p.model.release_function(objective="mse", **kw)
    ent = p.model.release_function(objective="entropy", **kw)
    assert at_q.release.certificate.converged
    assert at_q.release.rank == at_x.release.rank == ent.release.rank == M_INDUCING
    total = {name: np.sum(f.predict(Xq).noise_std ** 2) for name, f in
             dict(at_q=at_q, at_x=at_x, ent=ent).items()}
    assert total["at_q"] <= total["at_x"] * (1 + 1e-5)
    assert total["at_q"] <= total["ent"] * (1 + 1e-5)
    # ... and entropy's noise does not depend on the reference inputs (invariance)
    ent_q = p.model.release_function(objective="entropy", reference_inputs=Xq, **kw)
    np.testing.assert_allclose(ent_q.predict(Xq).noise_std, ent.predict(Xq).noise_std, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Exact audits of sparse releases (DESIGN 8.A)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_release_at_known_points(problem, objective):
    p = problem
    rel = p.model.release(p.Xnew, epsilon=EPS, delta=DELTA, objective=objective, seed=4)
    mu = exact_mu(rel.noise_factor, p.C, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)  # tight: a neighbour on the boundary
    # the released mean lies in range(F): nothing is published without noise
    P = range_projector(rel.noise_factor)
    centred = rel.mean - MID
    assert np.linalg.norm(centred - P @ centred) <= 1e-9 * np.linalg.norm(centred)
    np.testing.assert_allclose(rel.variance, fitc_variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)


def test_exact_audit_release_with_measured_shifts(problem):
    """Black-box shifts (same seed, one output moved from LO to HI) through the shared audit."""
    p = problem

    def release_mean(y):
        model = make_model(p.X, y[:, None], p.Z, p.dim)
        return model.release(p.Xnew, epsilon=EPS, delta=DELTA, objective="entropy", seed=21).mean

    shifts, base = auditing.measured_shifts(release_mean, p.Y[:, 0], [J, 17, 30], (LO, HI))
    rel = make_model(p.X, base[:, None], p.Z, p.dim).release(
        p.Xnew, epsilon=EPS, delta=DELTA, objective="entropy", seed=21)
    result = auditing.audit_exact(rel, shifts, C_ref=p.C)
    assert result.passed, result.failures
    assert result.mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_release_function(problem, objective):
    """In released coordinates (C = R B) and through the readout at k >= m query points (the same mu:
    an injective linear map preserves Mahalanobis norms on its range); at k < m points the
    predictions (post-processing) can only be more private."""
    p = problem
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, objective=objective, seed=6)
    rel = pf.release
    R = checked_R(pf, p.ref, p.X)
    mu = exact_mu(rel.noise_factor, R @ p.ref.B, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)
    Rinv = np.linalg.inv(R)
    for k, expect_equal in ((40, True), (3, False)):
        Xq = np.random.default_rng(k).uniform(0.0, 10.0, (k, p.dim))
        G = readout(p.ref, Xq) @ Rinv @ rel.noise_factor
        mu_q = exact_mu(G, fitc_C(p.ref, Xq), D, rel.noise_multiplier, EPS, DELTA)
        if expect_equal:
            assert mu_q == pytest.approx(mu, rel=1e-6)
        else:
            assert mu_q <= mu * (1 + 1e-9)
        # the shared audit module agrees
        result = auditing.audit_exact(SimpleNamespace(noise_factor=G, noise_multiplier=rel.noise_multiplier,
                                                      epsilon=EPS, delta=DELTA, data_sensitivity=D),
                                      np.zeros((0, k)), C_ref=fitc_C(p.ref, Xq))
        assert result.passed, result.failures


# ---------------------------------------------------------------------------------------------
# Privacy guards and input checks


def test_inducing_inputs_are_not_trainable(problem2d):
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    assert not model.inducing_variable.Z.trainable
    Zvar_ids = {id(v) for v in model.inducing_variable.trainable_variables}
    assert not Zvar_ids and all(id(v) not in Zvar_ids for v in model.trainable_variables)
    # also when a trainable GPflow InducingPoints object is passed in
    iv = gpflow.inducing_variables.InducingPoints(p.Z.copy())
    assert iv.Z.trainable
    model2 = make_model(p.X, p.Y, iv, p.dim)
    assert not model2.inducing_variable.Z.trainable
    np.testing.assert_array_equal(model2.inducing_variable.Z.numpy(), p.Z)
    names = [v.name for v in model2.trainable_variables]
    assert len(model2.trainable_variables) == 3, names  # kernel variance, lengthscales, noise


def test_kmeans_inducing_inputs_read_only_public_inputs():
    params = list(inspect.signature(kmeans_inducing_inputs).parameters)
    assert params[:2] == ["X", "num_inducing"] and not any(n.lower().startswith("y") for n in params)
    X, Y, _ = make_data(N, 2, seed=4)
    Z1 = kmeans_inducing_inputs(X, 5, seed=3)
    Z2 = kmeans_inducing_inputs(X.copy(), 5, seed=3)
    np.testing.assert_array_equal(Z1, Z2)  # deterministic for a seed
    assert Z1.shape == (5, 2) and Z1.dtype == np.float64
    # models on different outputs get the same inducing inputs (they come from X only)
    a = make_model(X, Y, kmeans_inducing_inputs(X, 5, seed=3), 2)
    b = make_model(X, neighbour(Y), kmeans_inducing_inputs(X, 5, seed=3), 2)
    np.testing.assert_array_equal(a.inducing_variable.Z.numpy(), b.inducing_variable.Z.numpy())
    # a k-means fixed point (independent check): every centre is the mean of its points
    label = np.argmin(((X[:, None, :] - Z1[None]) ** 2).sum(-1), axis=1)
    for c in range(5):
        np.testing.assert_allclose(Z1[c], X[label == c].mean(0), rtol=1e-6, atol=1e-8)
    assert len(np.unique(label)) == 5


def test_leak_guard_fires_after_training(problem2d):
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=0)  # fine before training
    Z_before = model.inducing_variable.Z.numpy().copy()
    assert not model.private_objective_evaluated
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, options=dict(maxiter=2))
    assert model.private_objective_evaluated
    np.testing.assert_array_equal(model.inducing_variable.Z.numpy(), Z_before)  # Z never fitted
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release(p.Xnew, epsilon=EPS, delta=DELTA)
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release_function(epsilon=EPS, delta=DELTA)
    # the user may state that the hyperparameters are public
    assert model.release_function(epsilon=EPS, delta=DELTA, seed=0, hyperparameters_public=True).release.rank >= 1
    # the released function made before training is unaffected (it holds only public pieces)
    assert np.all(np.isfinite(pf.predict(p.Xnew).mean))


def test_training_inducing_inputs_on_the_outputs_is_refused(problem2d):
    """A user who re-enables Z and fits it on the private outputs cannot release by default."""
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    gpflow.set_trainable(model.inducing_variable, True)
    # eagerly this time (compile=False): the guard must fire whether or not the loss is traced
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, compile=False,
                                       options=dict(maxiter=2))
    assert np.abs(model.inducing_variable.Z.numpy() - p.Z).max() > 0  # Z was fitted on y
    for call in (lambda: model.release(p.Xnew, epsilon=EPS, delta=DELTA),
                 lambda: model.release_function(epsilon=EPS, delta=DELTA)):
        with pytest.raises(PrivacyLeakError):
            call()


def test_bad_inputs_raise_clear_errors():
    X, Y, Xnew = make_data(12, 2, seed=8)
    Z = X[:4]
    with pytest.raises(TypeError, match="y_bounds"):
        DPGPRFITC((X, Y), kernel(2), Z, noise_variance=NOISE)
    with pytest.raises(ValueError, match="2 columns"):
        DPGPRFITC((X, Y), kernel(2), Z[:, :1], noise_variance=NOISE, y_bounds=(LO, HI))
    with pytest.raises(ValueError, match="inducing_variable"):
        DPGPRFITC((X, Y), kernel(2), np.full((3, 2), np.nan), noise_variance=NOISE, y_bounds=(LO, HI))
    for bad in (0, 13, -1, 2.5, "3"):
        with pytest.raises(ValueError, match="num_inducing"):
            kmeans_inducing_inputs(X, bad)
    assert kmeans_inducing_inputs(X, 12).shape == (12, 2)  # num_inducing = n is allowed
    model = DPGPRFITC((X, Y), kernel(2), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=0)
    with pytest.raises(ValueError, match="2 columns"):
        pf.predict(Xnew[:, :1])
    with pytest.raises(ValueError, match="2 columns"):
        model.release(Xnew[:, :1], epsilon=EPS, delta=DELTA)
    with pytest.raises(ValueError, match="epsilon"):
        model.release_function(epsilon=0.0, delta=DELTA)
    with pytest.raises(ValueError, match="objective"):
        model.release_function(epsilon=EPS, delta=DELTA, objective="logdet")


# ---------------------------------------------------------------------------------------------
# Scale


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def test_scale_smoke_20000_points():
    """n = 20,000 private outputs (2-D), m = 30 public inducing inputs, predictions at 20,000 inputs:
    everything is O(n m); an n x n float64 matrix alone would be 3.2 GB. Most inputs form a dense
    cluster plus a few hundred scattered ones, so that the optimiser's first working set (the
    highest-leverage points) holds the optimum's support (see the scale convergence test below)."""
    n = 20_000
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(5.0, 0.6, (n - 300, 2)), rng.uniform(0.0, 10.0, (300, 2))])
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((n, 1)), LO, HI)
    g = np.linspace(0.5, 9.5, 6)
    Z = np.stack(np.meshgrid(g, np.linspace(0.5, 9.5, 5)), -1).reshape(-1, 2)  # public grid, m = 30
    rss0 = _peak_rss_bytes()
    t0 = time.perf_counter()
    model = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=1.7), Z,
                      noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    acc = PrivacyAccountant(epsilon=EPS, delta=DELTA)
    pf = model.release_function(epsilon=EPS, delta=DELTA, objective="entropy", rtol=1e-6, seed=0, accountant=acc)
    t1 = time.perf_counter()
    Xq = rng.uniform(0.0, 10.0, (n, 2))
    pred = pf.predict(Xq)
    t2 = time.perf_counter()
    grew = _peak_rss_bytes() - rss0
    print(f"scale: release_function {t1 - t0:.1f} s, predict {t2 - t1:.2f} s, peak RSS growth {grew / 2**20:.0f} MiB, "
          f"rank {pf.release.rank}, certificate {pf.release.certificate}")
    assert grew < 1.5 * 2**30
    assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (n,)
    assert np.all(np.isfinite(pred.mean)) and np.all(pred.noise_std > 0) and np.all(pred.variance > 0)
    assert len(acc.ledger) == 1
    # privacy: the exact audit in released coordinates, C = R B from the NumPy reference (m x n)
    ref = fitc_reference(partial(k_se, variance=VAR, lengthscale=1.7), X, Z, NOISE)
    R = checked_R(pf, ref, X)
    exact_mu(pf.release.noise_factor, R @ ref.B, D, pf.release.noise_multiplier, EPS, DELTA)
    assert pf.release.certificate.converged, pf.release.certificate


def test_scale_optimiser_converges_on_uniform_inputs():
    """Uniform 2-D inputs, n = 20,000, m = 30: the optimum's support is spread over many points, so
    the working set must grow to find it; the certificate must still converge."""
    n = 20_000
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (n, 2))
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((n, 1)), LO, HI)
    Z = rng.uniform(0.0, 10.0, (30, 2))
    model = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=1.7), Z,
                      noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    for objective in ("entropy", "mse"):
        pf = model.release_function(epsilon=EPS, delta=DELTA, objective=objective, rtol=1e-2, seed=0)
        assert pf.release.certificate.converged, pf.release.certificate


# ---------------------------------------------------------------------------------------------
# Regression tests for two bugs found while testing (a working set that did not span; a
# readout that was nearly rank deficient)


def test_release_function_with_uneven_input_density():
    """600 sparse inputs on [0, 30] (each of high leverage) and 1500 dense ones on [30, 60]: the
    highest-leverage 500 all lie on [0, 30] and cannot determine the inducing values on [30, 60]."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.uniform(0.0, 30.0, (600, 1)), rng.uniform(30.0, 60.0, (1500, 1))])
    Y = np.clip(np.sin(X) + MID + 0.3 * rng.standard_normal(X.shape), LO, HI)
    Z = np.linspace(1.0, 59.0, 30)[:, None]
    model = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=1.7), Z,
                      noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    pf = model.release_function(epsilon=EPS, delta=DELTA, objective="entropy", rtol=1e-6, seed=0)
    assert pf.release.certificate.converged, pf.release.certificate
    assert np.all(np.isfinite(pf.predict(np.linspace(0.0, 60.0, 50)[:, None]).noise_std))


def test_release_function_with_30_inducing_inputs_on_kung(data_dir):
    X, Y = load_kung(data_dir)
    Z = kmeans_inducing_inputs(X, 30, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgp_gpflow.ClippingWarning)
        model = DPGPRFITC((X, Y), gpflow.kernels.SquaredExponential(variance=10.0, lengthscales=15.0), Z,
                          noise_variance=25.0, y_bounds=(60.0, 160.0), hyperparameters_public=True)
    grid = np.linspace(0.0, 100.0, 60)[:, None]
    rel = model.release(grid, epsilon=EPS, delta=DELTA, objective="entropy", seed=0)  # works
    pf = model.release_function(epsilon=EPS, delta=DELTA, objective="entropy", seed=0)
    pred = pf.predict(grid)
    assert np.all(np.isfinite(pred.mean)) and np.all(pred.noise_std > 0)
    if pf.release.rank == rel.rank:  # same directions kept: entropy's noise is invariant (k >= r)
        np.testing.assert_allclose(pred.noise_std, rel.noise_std, rtol=1e-6)
