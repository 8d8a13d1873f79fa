"""DPSGPR (Titsias' variational sparse GP): the cloaking map against GPflow's ``SGPR`` and an
independent NumPy formula, release once / query anywhere, exact privacy audits recomputed from the
releases' public noise factors, the leak guard, private selection and clipping.

The NumPy reference (:func:`sgpr_reference`) is written from Titsias (2009), eq. (6), with LU
solves and one Cholesky factor of ``Q``, never the package's two-factor route:

    mu_* = s^{-2} k_*M Q^{-1} K_MN (y - m) + m,        Q = K_MM + s^{-2} K_MN K_NM,
    var_* = k_** - k_*M K_MM^{-1} k_M* + k_*M Q^{-1} k_M*,

with GPflow's ``default_jitter`` (1e-6) added to ``K_MM`` as GPflow does. The package's latent
values are GPflow's ``c = L_B^{-1} L^{-1} K_MN (y - m) / s^2`` with ``L = chol(K_MM)`` and
``L_B = chol(I + L^{-1} K_MN K_NM L^{-T} / s^2)``. Since ``L L_B`` is lower triangular with a
positive diagonal and ``(L L_B)(L L_B)^T = Q``, it *is* ``chol(Q)`` (uniqueness of the Cholesky
factor): so the reference latent map is ``B = chol(Q)^{-1} K_MN / s^2`` and its readout
``a(x) = k(x, Z) chol(Q)^{-T}``, from one NumPy Cholesky factor of ``Q`` alone.
"""

from __future__ import annotations

import sys
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
from dpgp_gpflow import FactoredPrivateModel, PrivacyLeakError, PrivateRelease, PublicReadout
from dpgp_gpflow.models import DPGPRFITC, DPSGPR, PrivateFunction, SGPRReadout, kmeans_inducing_inputs
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


def kernel(dim: int, lengthscales=None) -> gpflow.kernels.SquaredExponential:
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALES[dim] if lengthscales is None
                                             else lengthscales)


def kref(dim: int):
    return partial(k_se, variance=VAR, lengthscale=np.asarray(LENGTHSCALES[dim], dtype=float))


def make_data(n: int, dim: int, seed: int):
    """Outputs inside the bounds (so that clipping does nothing), one of them on the lower bound."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, dim))
    Y = np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((n, 1))
    assert LO < Y.min() and Y.max() < HI
    Y[J, 0] = LO
    Xnew = rng.uniform(-1.0, 11.0, (K_TEST, dim))
    return X, Y, Xnew


def make_model(X, Y, Z, dim, **kw) -> DPSGPR:
    return DPSGPR((X, Y), kernel(dim), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True, **kw)


def neighbour(Y):
    Y2 = Y.copy()
    Y2[J, 0] = HI  # LO -> HI: a move by the full d
    return Y2


# ---------------------------------------------------------------------------------------------
# Independent NumPy reference (Titsias 2009)


def sgpr_reference(kern, X, Z, s2, jitter=JITTER, kdiag=VAR):
    """SGPR pieces from the definition. ``kdiag``: k(x, x) (the SE variance)."""
    m = Z.shape[0]
    Kmm = kern(Z, Z) + jitter * np.eye(m)
    Kmn = kern(Z, X)
    Q = Kmm + Kmn @ Kmn.T / s2
    W = np.linalg.solve(Q, Kmn) / s2  # m x n: s^{-2} Q^{-1} K_MN
    Lq = np.linalg.cholesky(Q)
    B = solve_triangular(Lq, Kmn, lower=True) / s2  # chol(Q)^{-1} K_MN / s^2: GPflow's c = B (y - m)
    return SimpleNamespace(Kmm=Kmm, Q=Q, W=W, Lq=Lq, B=B, kern=kern, Z=Z, kdiag=kdiag)


def sgpr_C(ref, Xnew):
    """The SGPR cloaking matrix ``s^{-2} k_*M Q^{-1} K_MN`` (k x n)."""
    return ref.kern(Xnew, ref.Z) @ ref.W


def sgpr_variance(ref, Xnew):
    """SGPR predictive variance of f: ``k** - k*M K_MM^{-1} kM* + k*M Q^{-1} kM*``."""
    Ksm = ref.kern(Xnew, ref.Z)
    return (ref.kdiag - np.sum(Ksm * np.linalg.solve(ref.Kmm, Ksm.T).T, axis=1)
            + np.sum(Ksm * np.linalg.solve(ref.Q, Ksm.T).T, axis=1))


def readout(ref, Xnew):
    """``a(x) = k(x, Z) chol(Q)^{-T}`` (k x m): maps the latent values to predictions."""
    return solve_triangular(ref.Lq, ref.kern(ref.Z, Xnew), lower=True).T


def checked_R(pf: PrivateFunction, ref, X_reference):
    """``R`` upper triangular with ``R^T R = a^T a + ridge I`` for the readout ``a`` at the reference
    inputs (the documented ridge ``1e-8 tr(a^T a) / m``), checked independently."""
    R = pf.coordinates.numpy()
    A = readout(ref, X_reference)
    G = A.T @ A
    G = G + 1e-8 * np.trace(G) / G.shape[0] * np.eye(G.shape[0])
    assert np.allclose(np.tril(R, -1), 0.0)
    np.testing.assert_allclose(R.T @ R, G, rtol=1e-8, atol=1e-10 * np.abs(G).max())
    return R


def exact_mu(F, C, d, multiplier, epsilon, delta):
    """``mu = d sqrt(max_i c_i^T (F F^T)^+ c_i)`` over every column of ``C`` projected onto range(F),
    which must be <= 1 / multiplier; the analytic-Gaussian delta(eps) at mu <= delta."""
    P = range_projector(F)
    mu = d * float(mahalanobis_shifts(F, P @ C).max())
    assert mu <= (1.0 / multiplier) * (1 + 1e-6), (mu, 1.0 / multiplier)
    assert gaussian_delta_at_shift(epsilon, mu) <= delta * (1 + 1e-9)
    return mu


def seeded_noise(rel: PrivateRelease, seed: int) -> np.ndarray:
    """The noise ``F xi`` a seeded release added (``xi``: the seed's standard normal draw)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xi, _ = standard_normal(rel.rank, seed)
    return rel.noise_factor @ xi


# ---------------------------------------------------------------------------------------------
# Shared problems


def build_problem(dim: int) -> SimpleNamespace:
    X, Y, Xnew = make_data(N, dim, seed=20 + dim)
    Z = kmeans_inducing_inputs(X, M_INDUCING, seed=0)
    ref = sgpr_reference(kref(dim), X, Z, NOISE)
    return SimpleNamespace(dim=dim, X=X, Y=Y, Xnew=Xnew, Z=Z, ref=ref, C=sgpr_C(ref, Xnew),
                           model=make_model(X, Y, Z, dim))


@pytest.fixture(scope="module", params=[1, 2], ids=["1d", "2d"])
def problem(request):
    return build_problem(request.param)


@pytest.fixture(scope="module")
def problem2d():
    return build_problem(2)


# ---------------------------------------------------------------------------------------------
# 1-2. The cloaking map: the SGPR identity


def test_sgpr_identity_against_gpflow_and_numpy(problem):
    p = problem
    np.testing.assert_array_equal(p.model.data[1].numpy(), p.Y)  # inside the bounds: nothing clipped
    mean_fn = gpflow.functions.Constant(np.array([MID]))
    plain = gpflow.models.SGPR((p.X, p.Y), kernel(p.dim), p.Z, mean_function=mean_fn, noise_variance=NOISE)
    gp_mean, gp_var = (t.numpy()[:, 0] for t in plain.predict_f(p.Xnew))
    Xnew = gpflow.utilities.to_default_float(p.Xnew)
    terms = p.model.release_terms(Xnew)
    A, B = (t.numpy() for t in terms.map)
    assert A.shape == (K_TEST, M_INDUCING) and B.shape == (M_INDUCING, N) and B.dtype == np.float64
    C = A @ B
    yc = p.model.centred_outputs().numpy()
    np.testing.assert_allclose(yc, p.Y[:, 0] - MID, rtol=0, atol=0)
    # the cloaking map applied to the centred outputs, plus m(Xnew), is GPflow's SGPR mean ...
    np.testing.assert_allclose(terms.offset.numpy(), np.full(K_TEST, MID))
    np.testing.assert_allclose(terms.offset.numpy() + C @ yc, gp_mean, rtol=1e-8, atol=1e-12)
    # ... the public variance is SGPR's ...
    np.testing.assert_allclose(terms.variance.numpy(), gp_var, rtol=1e-8, atol=1e-12)
    # ... and both agree with the NumPy formulas (Titsias 2009, jitter 1e-6 on K_MM as GPflow adds it)
    np.testing.assert_allclose(C, p.C, rtol=1e-8, atol=1e-10 * np.abs(p.C).max())
    np.testing.assert_allclose(gp_mean, p.C @ (p.Y[:, 0] - MID) + MID, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gp_var, sgpr_variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)
    # the factors themselves: B = chol(Q)^{-1} K_MN / s^2 and a(x) = k(x, Z) chol(Q)^{-T}
    np.testing.assert_allclose(B, p.ref.B, rtol=1e-8, atol=1e-10 * np.abs(p.ref.B).max())
    np.testing.assert_allclose(A, readout(p.ref, p.Xnew), rtol=1e-8, atol=1e-10 * np.abs(A).max())
    # the latent values are GPflow's own cached c (the same numbers, not merely the same predictions)
    _, _, c = (v.value for v in plain.posterior(gpflow.posteriors.PrecomputeCacheType.NOCACHE)._precompute())
    np.testing.assert_allclose(B @ yc, c.numpy()[:, 0], rtol=1e-8, atol=1e-12)
    # the DP model predicts exactly as GPflow's SGPR (non-private, for comparison only)
    np.testing.assert_allclose(p.model.predict_f(p.Xnew)[0].numpy()[:, 0], gp_mean, rtol=1e-12)


def test_cloaking_matrix_functions_agree_with_the_reference(problem):
    p = problem
    for C in (dpgp_gpflow.cloaking_matrix(p.model, p.Xnew), dpgp_gpflow.contract.cloaking_matrix(p.model, p.Xnew),
              p.model.cloaking_matrix(p.Xnew)):
        C = C.numpy()
        assert C.shape == (K_TEST, N) and C.dtype == np.float64
        np.testing.assert_allclose(C, p.C, rtol=1e-8, atol=1e-10 * np.abs(p.C).max())


def test_meets_the_factored_contract(problem2d):
    p = problem2d
    assert isinstance(p.model, FactoredPrivateModel)
    r = p.model.public_readout()
    assert isinstance(r, SGPRReadout) and isinstance(r, PublicReadout) and r.input_dim == 2
    latent = p.model.latent_terms()
    assert latent.map.shape == (M_INDUCING, N)
    np.testing.assert_array_equal(latent.offset.numpy(), np.zeros(M_INDUCING))
    assert p.model.input_dim == 2 and p.model.y_bounds == (LO, HI)
    assert p.model.output_bound == pytest.approx(max(HI - MID, MID - LO))


def test_reference_is_neither_fitc_nor_the_full_gp(problem):
    """Guard against a vacuous reference: with 6 inducing inputs SGPR's map differs from FITC's."""
    fitc = DPGPRFITC((problem.X, problem.Y), kernel(problem.dim), problem.Z, noise_variance=NOISE, y_bounds=(LO, HI),
                     hyperparameters_public=True)
    Cf = fitc.cloaking_matrix(problem.Xnew).numpy()
    assert np.abs(Cf - problem.C).max() > 1e-2 * np.abs(problem.C).max()
    Kmn = problem.ref.kern(problem.Z, problem.X)
    lam = VAR - np.sum(Kmn * np.linalg.solve(problem.ref.Kmm, Kmn), axis=0)
    assert lam.max() > 1e-3  # diag(K - Q_NN) is not negligible: the approximation matters here


def test_split_terms_are_sgpr_on_the_training_subset(problem2d):
    """What cross-validation reads: the centred predictions of an SGPR trained on ``train`` at ``test``."""
    p = problem2d
    rng = np.random.default_rng(0)
    perm = rng.permutation(N)
    train, test = np.sort(perm[:27]), np.sort(perm[27:])
    terms = p.model.split_terms(train, test)
    A, B = (t.numpy() for t in terms.map)
    assert A.shape == (len(test), M_INDUCING) and B.shape == (M_INDUCING, len(train))
    np.testing.assert_array_equal(terms.offset.numpy(), np.zeros(len(test)))
    sub = sgpr_reference(kref(2), p.X[train], p.Z, NOISE)
    Cref = sgpr_C(sub, p.X[test])
    np.testing.assert_allclose(A @ B, Cref, rtol=1e-8, atol=1e-10 * np.abs(Cref).max())
    plain = gpflow.models.SGPR((p.X[train], p.Y[train]), kernel(2), p.Z,
                               mean_function=gpflow.functions.Constant(np.array([MID])), noise_variance=NOISE)
    np.testing.assert_allclose(A @ B @ (p.Y[train, 0] - MID) + MID, plain.predict_f(p.X[test])[0].numpy()[:, 0],
                               rtol=1e-8, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# 3. Exact audits


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_audit_release_at_known_points(problem, objective):
    p = problem
    rel = p.model.release(p.Xnew, epsilon=EPS, delta=DELTA, objective=objective, seed=4)
    mu = exact_mu(rel.noise_factor, p.C, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)  # tight
    result = auditing.audit_exact(rel, D * p.C.T, C_ref=p.C)
    assert result.passed, result.failures
    # the released mean lies in range(F): nothing is published without noise
    P = range_projector(rel.noise_factor)
    centred = rel.mean - MID
    assert np.linalg.norm(centred - P @ centred) <= 1e-9 * np.linalg.norm(centred)
    np.testing.assert_allclose(rel.variance, sgpr_variance(p.ref, p.Xnew), rtol=1e-7, atol=1e-10)
    # the noise-free part of the release is the projected SGPR mean
    clean = rel.mean - seeded_noise(rel, 4)
    np.testing.assert_allclose(clean, P @ p.C @ (p.Y[:, 0] - MID) + MID, rtol=0, atol=1e-8 * D)


def test_exact_audit_release_with_measured_shifts(problem2d):
    """Black-box shifts (same seed, one output moved from LO to HI) through the shared audit."""
    p = problem2d

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
    """In released coordinates (C = R B) and through the readout at k >= m query points."""
    p = problem
    pf = p.model.release_function(epsilon=EPS, delta=DELTA, objective=objective, seed=6)
    assert isinstance(pf, PrivateFunction) and isinstance(pf.release, PrivateRelease)
    rel = pf.release
    R = checked_R(pf, p.ref, p.X)  # default reference inputs: the training inputs
    mu = exact_mu(rel.noise_factor, R @ p.ref.B, D, rel.noise_multiplier, EPS, DELTA)
    assert mu == pytest.approx(1.0 / rel.noise_multiplier, rel=1e-5)
    result = auditing.audit_exact(rel, np.zeros((0, M_INDUCING)), C_ref=R @ p.ref.B)
    assert result.passed, result.failures
    Rinv = np.linalg.inv(R)
    for k, expect_equal in ((40, True), (3, False)):
        Xq = np.random.default_rng(k).uniform(0.0, 10.0, (k, p.dim))
        G = readout(p.ref, Xq) @ Rinv @ rel.noise_factor
        mu_q = exact_mu(G, sgpr_C(p.ref, Xq), D, rel.noise_multiplier, EPS, DELTA)
        if expect_equal:
            assert mu_q == pytest.approx(mu, rel=1e-6)
        else:
            assert mu_q <= mu * (1 + 1e-9)


# ---------------------------------------------------------------------------------------------
# 4. Release once, query anywhere


def test_release_function_predictions_are_the_readout_of_the_released_latents(problem):
    p = problem
    model = make_model(p.X, p.Y, p.Z, p.dim)
    pf = model.release_function(epsilon=EPS, delta=DELTA, seed=11)
    R = checked_R(pf, p.ref, p.X)
    Xq = np.random.default_rng(2).uniform(-2.0, 12.0, (30, p.dim))
    A = readout(p.ref, Xq) @ np.linalg.inv(R)  # released coordinates -> predictions
    pred = pf.predict(Xq)
    np.testing.assert_allclose(pred.mean, MID + A @ pf.release.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pred.noise_std, np.linalg.norm(A @ pf.release.noise_factor, axis=1), rtol=1e-8)
    np.testing.assert_allclose(pred.variance, sgpr_variance(p.ref, Xq), rtol=1e-7, atol=1e-10)
    # training the model afterwards changes nothing that was published
    before = pf.predict(Xq)
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, options=dict(maxiter=5))
    assert np.abs(model.kernel.variance.numpy() - VAR) > 1e-6  # the hyperparameters did move
    after = pf.predict(Xq)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_entropy_release_function_noise_equals_release_at_known_points(problem2d):
    p = problem2d
    kw = dict(epsilon=EPS, delta=DELTA, objective="entropy", rtol=0.0, seed=5)
    pf = p.model.release_function(**kw)
    rel = p.model.release(p.Xnew, **kw)
    assert pf.release.rank == rel.rank == M_INDUCING
    np.testing.assert_allclose(pf.predict(p.Xnew).noise_std, rel.noise_std, rtol=1e-8)


# ---------------------------------------------------------------------------------------------
# 5. The leak guard


def test_leak_guard_fires_after_training(problem2d):
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    assert not model.private_objective_evaluated
    model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0)  # fine before training
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, options=dict(maxiter=3))
    assert model.private_objective_evaluated
    np.testing.assert_array_equal(model.inducing_variable.Z.numpy(), p.Z)  # Z never fitted
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release(p.Xnew, epsilon=EPS, delta=DELTA)
    with pytest.raises(PrivacyLeakError, match="hyperparameters"):
        model.release_function(epsilon=EPS, delta=DELTA)
    assert model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0, hyperparameters_public=True).rank >= 1
    assert model.release_function(epsilon=EPS, delta=DELTA, seed=0, hyperparameters_public=True).release.rank >= 1


@pytest.mark.parametrize("objective", ["elbo", "upper_bound", "training_loss"])
def test_every_objective_that_reads_the_outputs_arms_the_guard(problem2d, objective):
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    getattr(model, objective)()  # eagerly, without changing any parameter
    assert model.private_objective_evaluated
    with pytest.raises(PrivacyLeakError):
        model.release(p.Xnew, epsilon=EPS, delta=DELTA)


def test_inducing_inputs_are_public_and_not_trainable(problem2d):
    p = problem2d
    iv = gpflow.inducing_variables.InducingPoints(p.Z.copy())
    assert iv.Z.trainable
    model = make_model(p.X, p.Y, iv, p.dim)
    assert not model.inducing_variable.Z.trainable
    np.testing.assert_array_equal(model.inducing_variable.Z.numpy(), p.Z)
    assert len(model.trainable_variables) == 3  # kernel variance, lengthscales, noise


# ---------------------------------------------------------------------------------------------
# 6. Private selection works unchanged on the contract


def test_select_hyperparameters(problem2d):
    p = problem2d
    model = make_model(p.X, p.Y, p.Z, p.dim)
    grid = [{".kernel.lengthscales": [ls, 1.5 * ls]} for ls in (0.5, 1.7, 4.0)]  # ARD: two lengthscales
    before = model.kernel.lengthscales.numpy().copy()
    sel, diag = dpgp_gpflow.selection.select_hyperparameters(model, grid, epsilon=1.0, folds=3, seed=0,
                                                             diagnostics=True)
    assert sel.chosen in grid and 0 <= sel.index < len(grid)
    assert diag.probabilities.sum() == pytest.approx(1.0) and np.all(np.isfinite(diag.utilities))
    np.testing.assert_array_equal(model.kernel.lengthscales.numpy(), before)  # the model is not changed
    sel.apply(model)
    np.testing.assert_allclose(model.kernel.lengthscales.numpy(), sel.chosen[".kernel.lengthscales"])
    assert model.release(p.Xnew, epsilon=EPS, delta=DELTA, seed=0).rank >= 1  # declared public by apply


# ---------------------------------------------------------------------------------------------
# 7. Clipping, sensitivity and bad inputs


def test_outputs_are_clipped_and_sensitivity_defaults_to_the_range():
    X, Y, Xnew = make_data(20, 1, seed=3)
    Y[0, 0], Y[1, 0] = HI + 5.0, LO - 3.0
    Z = X[:4]
    with pytest.warns(dpgp_gpflow.ClippingWarning):
        model = DPSGPR((X, Y), kernel(1), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    Yc = np.clip(Y, LO, HI)
    np.testing.assert_array_equal(model.data[1].numpy(), Yc)
    np.testing.assert_array_equal(model.centred_outputs().numpy(), Yc[:, 0] - MID)
    assert model.data_sensitivity == D and model.y_bounds == (LO, HI)
    small = DPSGPR((X, Yc), kernel(1), Z, noise_variance=NOISE, y_bounds=(LO, HI), data_sensitivity=1.0,
                   hyperparameters_public=True)
    assert small.data_sensitivity == 1.0
    # releases read clipped outputs even after model.data is overwritten with unclipped ones
    model.data = (model.data[0], gpflow.utilities.to_default_float(Y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgp_gpflow.ClippingWarning)
        np.testing.assert_array_equal(model.centred_outputs().numpy(), Yc[:, 0] - MID)


def test_bad_inputs_raise_clear_errors():
    X, Y, Xnew = make_data(12, 2, seed=8)
    Z = X[:4]
    with pytest.raises(TypeError, match="y_bounds"):
        DPSGPR((X, Y), kernel(2), Z, noise_variance=NOISE)
    with pytest.raises(ValueError, match="2 columns"):
        DPSGPR((X, Y), kernel(2), Z[:, :1], noise_variance=NOISE, y_bounds=(LO, HI))
    with pytest.raises(ValueError, match="inducing_variable"):
        DPSGPR((X, Y), kernel(2), np.full((3, 2), np.nan), noise_variance=NOISE, y_bounds=(LO, HI))
    with pytest.raises(ValueError):
        DPSGPR((X, Y), kernel(2), Z, noise_variance=NOISE, y_bounds=(LO, HI), data_sensitivity=2 * D)
    model = DPSGPR((X, Y), kernel(2), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True)
    with pytest.raises(ValueError, match="2 columns"):
        model.release(Xnew[:, :1], epsilon=EPS, delta=DELTA)
    with pytest.raises(ValueError, match="epsilon"):
        model.release_function(epsilon=0.0, delta=DELTA)
