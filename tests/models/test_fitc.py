"""DPGPRFITC (docs/mechanisms.md#sparse-regression): what only FITC has. With Z = X it is the full
GP up to the jitter, cloaking matrix and release alike; at scale (n = 20,000) everything stays
O(n m) and the optimiser's certificate converges; two regression tests (a working set that did
not span; a readout that was nearly rank deficient). The contract it shares with DPSGPR (the
cloaking map against GPflow's ``GPRFITC`` and the NumPy FITC reference, release once / query
anywhere, exact audits, the guards) is tested in ``test_sgpr_base.py``; the references are in
``sparse_cases.py``.
"""

from __future__ import annotations

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
from reference import k_se, range_projector

import dpgp_gpflow
from dpgp_gpflow import PrivacyAccountant
from dpgp_gpflow.datasets import load_kung
from dpgp_gpflow.models import DPGPR, DPGPRFITC, kmeans_inducing_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_cases import (  # noqa: E402
    DELTA,
    EPS,
    HI,
    JITTER,
    LO,
    MID,
    NOISE,
    VAR,
    D,
    checked_R,
    cloaking,
    exact_mu,
    fitc_reference,
    seeded_noise,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")


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
    np.testing.assert_allclose(cloaking(ref0, p.Xnew), Cf, rtol=1e-6, atol=1e-9 * np.abs(Cf).max())


def test_z_equals_x_release_matches_full(z_equals_x):
    """Entropy, rtol fixed, same seed: the sparse release (factored C = A B) and the full one have
    the same rank, sensitivity and noise distribution (F F^T), and the same noise-free released
    vector (mean minus the seeded noise F xi), to the jitter tolerance above. The noise draws F xi
    themselves differ: a noise factor is defined only up to an orthogonal rotation (signs of singular
    vectors and eigenvectors), so one seed need not give the same draw on two computation routes."""
    p = z_equals_x
    kw = dict(epsilon=EPS, delta=DELTA, objective="entropy", rtol=1e-3, seed=7)
    a = p.sparse.release(p.Xnew, **kw).unclipped()  # the raw DP means: mean minus the seeded noise below
    b = p.full.release(p.Xnew, **kw).unclipped()
    assert a.rank == b.rank
    assert a.sensitivity == pytest.approx(b.sensitivity, rel=1e-9)
    assert a.noise_multiplier == b.noise_multiplier
    np.testing.assert_allclose(a.noise_std, b.noise_std, rtol=1e-4)
    cov_a, cov_b = a.noise_factor @ a.noise_factor.T, b.noise_factor @ b.noise_factor.T
    assert np.abs(cov_a - cov_b).max() <= 1e-4 * np.abs(cov_b).max()
    clean_a = a.mean[:, 0] - seeded_noise(a, 7)
    clean_b = b.mean[:, 0] - seeded_noise(b, 7)
    np.testing.assert_allclose(clean_a, clean_b, rtol=0, atol=1e-4 * D)
    # the noise-free part is the projected mean P C (y - m) + m (an independent check of the above)
    Cf = p.full.cloaking_matrix(p.Xnew).numpy()
    P = range_projector(b.noise_factor)
    np.testing.assert_allclose(clean_b, P @ Cf @ (p.Y[:, 0] - MID) + MID, rtol=0, atol=1e-6 * D)
    np.testing.assert_allclose(a.variance, b.variance, rtol=1e-4, atol=1e-8)


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
    assert pred.mean.shape == pred.variance.shape == pred.noise_std.shape == (n, 1)
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
