"""Laplace binning baselines (dpgp_gpflow.baselines) against independent NumPy / SciPy references.

* exact: with the Laplace sampler replaced by zeros, counts equal ``numpy.histogramdd`` and means
  equal its means up to the exact sampler's 2^-40 grid;
* the noise scale is ``(d / n_j) / epsilon`` per bin, and 0 (exactly the public value) when empty;
* sampler: Kolmogorov-Smirnov against ``scipy.stats.laplace`` (seeded and CSPRNG paths);
* black-box audit: Clopper-Pearson lower bound on epsilon from threshold tests on releases of
  neighbouring datasets (one output per bin moved by d); the correct mechanism passes, an
  under-noised one (scale halved) is caught;
* accounting: one pure-epsilon event; over budget raises before any noise is drawn or any output
  is clipped, and leaves the ledger as it was;
* predictors: bin values on a 2-D grid, the GP on bin centres against a NumPy GP with
  per-observation noise, the integral-kernel GP's data and noise, and its recovery of sin(x).

The grid kernel itself (``dpgp_gpflow.kernels.GridIntegralSE``) is tested in
``tests/kernels/test_grid_integral.py``.
"""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

import dpgp_gpflow
from dpgp_gpflow import BudgetExceededError, ClippingWarning, PrivacyAccountant, ReproducibleNoiseWarning
from dpgp_gpflow import baselines, kernels, sampling
from dpgp_gpflow.kernels import IntegralSE, predict_f_at_points
from dpgp_gpflow.baselines import (
    BinRelease,
    GridIntegralSE,
    IntegralGPR,
    bin_means_nonprivate,
    fit_gp_on_bins,
    fit_integral_gp,
    make_bins,
    predict_bin_value,
    predict_integral_gp,
    release_bin_means,
)

EDGES_2D = (np.array([0.0, 1.0, 2.5, 4.0]), np.array([-1.0, 0.0, 0.5, 2.0, 3.0]))
BOUNDS_Y = (0.0, 10.0)


def zero_noise(size, seed=None):
    """Stand-in sampler: no noise (to compare the noiseless means exactly)."""
    return np.zeros(int(size)), False


@pytest.fixture
def no_noise(monkeypatch):
    monkeypatch.setattr(sampling, "laplace", zero_noise)


def data_2d(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0.0, 2.4, n), rng.uniform(-1.0, 3.0, n)])  # bins x1 >= 2.5 empty
    X[:5] = [[0.0, -1.0], [4.0, 3.0], [1.0, 0.0], [2.5, 0.5], [3.0, 2.0]]  # points on edges
    Y = rng.uniform(-2.0, 12.0, (n, 1))  # some outside the bounds: clipped
    return X, Y


def reference_means(X, Y, edges, bounds, empty):
    """Counts and clipped means per bin by numpy.histogramdd (C order, last edge closed)."""
    y = np.clip(Y[:, 0], *bounds)
    counts, _ = np.histogramdd(X, bins=edges)
    sums, _ = np.histogramdd(X, bins=edges, weights=y)
    counts, sums = counts.ravel(), sums.ravel()
    means = np.where(counts > 0, sums / np.maximum(counts, 1), empty)
    return counts, means


# ---------------------------------------------------------------------------------------------
# the grid


def test_bins_from_counts_and_bounds():
    bins = make_bins(counts=[2, 4], bounds=[(0.0, 1.0), (10.0, 14.0)])
    assert bins.shape == (2, 4) and bins.n_bins == 8 and bins.ndim == 2
    assert_allclose(bins.edges[1], [10.0, 11.0, 12.0, 13.0, 14.0])
    # C order (first axis slowest): bin 5 is (1, 1)
    assert_allclose(bins.boxes[5], [0.5, 11.0, 1.0, 12.0])
    assert_allclose(bins.centres[5], [0.75, 11.5])
    assert_allclose(bins.volumes, np.full(8, 0.5))


def test_counts_without_public_bounds_raise():
    X = np.random.default_rng(0).uniform(size=(20, 2))
    with pytest.raises(ValueError, match="public"):
        make_bins(X, counts=3)
    with pytest.raises(ValueError, match="exactly one"):
        make_bins(X)
    with pytest.raises(ValueError, match="increasing"):
        make_bins(edges=[np.array([0.0, 1.0, 1.0])])
    with pytest.raises(ValueError, match="axes"):
        make_bins(X, edges=[np.array([0.0, 1.0])])  # D = 2 but one axis


def test_make_bins_warns_for_inputs_outside():
    X = np.array([[0.5], [2.0]])
    with pytest.warns(UserWarning, match="1 of 2"):
        make_bins(X, counts=2, bounds=(0.0, 1.0))


def test_locate_matches_histogramdd():
    X, _ = data_2d()
    bins = make_bins(X, edges=EDGES_2D)
    index, inside = bins.locate(X)
    assert inside.all()
    ref, _ = np.histogramdd(X, bins=EDGES_2D)
    assert_array_equal(np.bincount(index, minlength=bins.n_bins), ref.ravel())


# ---------------------------------------------------------------------------------------------
# the release: exact means, noise scale, empty bins, clipping


def test_counts_and_means_exact(no_noise):
    X, Y = data_2d()
    bins = make_bins(X, edges=EDGES_2D)
    with pytest.warns(ClippingWarning) as rec:
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0)
    n_out = int(np.sum((Y < 0.0) | (Y > 10.0)))
    assert any(f"{n_out} of {Y.size}" in str(w.message) for w in rec)
    counts, means = reference_means(X, Y, EDGES_2D, BOUNDS_Y, 5.0)
    assert_array_equal(rel.counts, counts)
    # same sums in the same order; the exact sampler publishes the mean rounded on its 2^-40 grid
    assert_allclose(rel.mean[counts > 0], means[counts > 0], rtol=0, atol=1e-9)
    assert np.all(rel.mean[counts == 0] == 5.0)
    assert (counts == 0).sum() >= 2  # the x1 >= 2.5 column is empty but for the edge points
    assert rel.epsilon == 1.0 and rel.delta == 0.0 and rel.data_sensitivity == 10.0


def test_nonprivate_means_match_reference():
    X, Y = data_2d(seed=3)
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        rel = bin_means_nonprivate(X, Y, bins, y_bounds=BOUNDS_Y, empty_value=1.5)
    counts, means = reference_means(X, Y, EDGES_2D, BOUNDS_Y, 1.5)
    assert_allclose(rel.mean, means, rtol=1e-14)
    assert rel.epsilon == math.inf and np.all(rel.noise_scale == 0.0)


@pytest.mark.parametrize("epsilon, d", [(1.0, None), (0.3, 4.0)])
def test_noise_scale_matches_bound(epsilon, d):
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=epsilon, data_sensitivity=d)
    counts, _ = reference_means(X, Y, EDGES_2D, BOUNDS_Y, 5.0)
    d_ref = 10.0 if d is None else d
    expected = np.where(counts > 0, (d_ref / np.maximum(counts, 1)) / epsilon, 0.0)
    assert_allclose(rel.noise_scale, expected, rtol=1e-15)
    assert_allclose(rel.noise_variance, 2.0 * expected**2, rtol=1e-15)


def test_empty_bins_exactly_public_value():
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.5)  # CSPRNG noise
        rel2 = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.5, empty_value=7.25)
    empty = rel.counts == 0
    assert empty.any()
    assert np.all(rel.mean[empty] == 5.0) and np.all(rel.noise_scale[empty] == 0.0)
    assert np.all(rel2.mean[empty] == 7.25) and rel2.empty_value == 7.25
    assert not rel.reproducible
    counts, means = reference_means(X, Y, EDGES_2D, BOUNDS_Y, 5.0)
    assert np.all(rel.mean[~empty] != means[~empty])  # noise was added to every occupied bin


def test_seed_warns_and_reproduces():
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        with pytest.warns(ReproducibleNoiseWarning):
            a = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, seed=7)
        with pytest.warns(ReproducibleNoiseWarning):
            b = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, seed=7)
    assert a.reproducible and b.reproducible
    assert_array_equal(a.mean, b.mean)


def test_inputs_outside_grid(no_noise):
    X = np.array([[0.5], [1.5], [5.0]])
    Y = np.array([[1.0], [2.0], [4.0]])
    bins = make_bins(edges=[np.array([0.0, 1.0, 2.0])])
    with pytest.raises(ValueError, match="outside the grid"):
        release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0)
    near = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, outside="nearest")
    drop = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, outside="drop")
    assert_array_equal(near.counts, [1, 2])
    assert_allclose(near.mean, [1.0, 3.0], rtol=0, atol=1e-9)  # up to the exact sampler's grid
    assert_array_equal(drop.counts, [1, 1])
    assert_allclose(drop.mean, [1.0, 2.0], rtol=0, atol=1e-9)


def test_invalid_privacy_parameters():
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with pytest.raises(ValueError):
        release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.0)
    with pytest.raises(ValueError):
        release_bin_means(X, Y, bins, y_bounds=(1.0, 1.0), epsilon=1.0)
    with pytest.raises(ValueError):
        release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, data_sensitivity=11.0)


# ---------------------------------------------------------------------------------------------
# accounting


def test_accountant_charged_once_pure():
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    acc = PrivacyAccountant(epsilon=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.75, accountant=acc)
        assert len(acc.ledger) == 1
        event = acc.ledger[0]
        assert (event.epsilon, event.delta, event.kind, event.mu) == (0.75, 0.0, "pure", None)
        with PrivacyAccountant(epsilon=1.0) as ctx:  # the innermost `with` accountant
            release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0)
        assert ctx.spent == (1.0, 0.0) and len(ctx.ledger) == 1
    assert acc.spent == (0.75, 0.0)


def test_over_budget_raises_before_drawing(monkeypatch):
    calls = []

    def recording(size, seed=None):
        calls.append(size)
        return np.zeros(int(size)), False

    monkeypatch.setattr(sampling, "laplace", recording)
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    acc = PrivacyAccountant(epsilon=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.6, accountant=acc)
        assert len(calls) == 1
        with pytest.raises(BudgetExceededError):
            release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.6, accountant=acc)
    assert len(calls) == 1, "noise was drawn although the budget was exceeded"
    assert len(acc.ledger) == 1


@pytest.mark.parametrize("composition", ["basic", "pld"])
def test_refused_budget_draws_nothing_and_leaves_ledger(draws, composition):
    """An accountant with too little epsilon refuses before the outputs are touched: no Laplace draw
    (``draws`` counts the calls of dpgp_gpflow.sampling), no ClippingWarning, no ledger entry."""
    X, Y = data_2d()  # some outputs lie outside the bounds: clipping them would warn
    bins = make_bins(edges=EDGES_2D)
    acc = PrivacyAccountant(epsilon=0.5, delta=1e-6, composition=composition)
    acc.spend(0.2, 0.0, kind="pure", description="earlier release")
    before = tuple(acc.ledger)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingWarning)  # the outputs are not even clipped
        with pytest.raises(BudgetExceededError):
            release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.4, accountant=acc)
        with PrivacyAccountant(epsilon=0.1):  # the innermost `with` accountant refuses too
            with pytest.raises(BudgetExceededError):
                release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.4)
    assert draws == [], "Laplace noise was drawn although the budget was refused"
    assert tuple(acc.ledger) == before and acc.spent[0] == pytest.approx(0.2)


# ---------------------------------------------------------------------------------------------
# the sampler and the black-box audit


def test_release_draws_from_the_sampling_module(draws):
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0)
    assert draws == [int(np.sum(rel.occupied))]  # one draw, one value per occupied bin


def test_laplace_sampler_seeded_ks():
    with pytest.warns(ReproducibleNoiseWarning):
        z, reproducible = sampling.laplace(20000, seed=1234)
    assert reproducible and z.shape == (20000,)
    assert stats.kstest(z, stats.laplace.cdf).pvalue > 0.01
    assert stats.kstest(1.1 * z, stats.laplace.cdf).pvalue < 1e-3  # the test has power


def test_laplace_sampler_csprng_ks():
    z, reproducible = sampling.laplace(20000)
    assert not reproducible
    # OS entropy cannot be seeded: a correct sampler fails this with probability 1e-6.
    assert stats.kstest(z, stats.laplace.cdf).pvalue > 1e-6


def clopper_pearson(k, n, alpha):
    """Two-sided (1 - alpha) Clopper-Pearson interval of a binomial proportion."""
    lo = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return lo, hi


def epsilon_lower_bound(p, q, thresholds, confidence):
    """Largest ``log(Q_lo(E) / P_hi(E))`` over events {t > tau}, {t <= tau} and both orders.

    Each interval holds with the Bonferroni-corrected level, jointly with ``confidence``; an
    epsilon-DP mechanism has ``P[E] <= e^eps Q[E]`` for every event, so the bound is <= eps.
    """
    alpha = (1.0 - confidence) / (4 * len(thresholds))
    n_p, n_q = p.size, q.size
    best = -math.inf
    for tau in thresholds:
        for event in (lambda t: t > tau, lambda t: t <= tau):
            kp, kq = int(np.sum(event(p))), int(np.sum(event(q)))
            p_lo, p_hi = clopper_pearson(kp, n_p, alpha)
            q_lo, q_hi = clopper_pearson(kq, n_q, alpha)
            for num, den in ((q_lo, p_hi), (p_lo, q_hi)):
                if num > 0 and den > 0:
                    best = max(best, math.log(num / den))
    return best


def audit_releases(n_bins=40000, per_bin=4, epsilon=1.0, confidence=1 - 1e-6):
    """Each bin of one release is an independent copy of the single-bin mechanism: on D every
    output is lo; on D' one output per bin is hi (|shift| = d), so each bin mean moves by d / 4."""
    lo, hi = 0.0, 100.0
    edges = [np.arange(n_bins + 1, dtype=np.float64)]
    X = (np.repeat(np.arange(n_bins), per_bin) + 0.5).reshape(-1, 1)
    y = np.full((X.shape[0], 1), lo)
    y_neighbour = y.copy()
    y_neighbour[::per_bin] = hi
    bins = make_bins(edges=edges)
    p = release_bin_means(X, y, bins, y_bounds=(lo, hi), epsilon=epsilon).mean
    q = release_bin_means(X, y_neighbour, bins, y_bounds=(lo, hi), epsilon=epsilon).mean
    b = (hi - lo) / per_bin / epsilon  # the claimed scale (thresholds fixed a priori from it)
    shift = (hi - lo) / per_bin
    thresholds = [0.0, shift, shift + b, -b]
    return epsilon_lower_bound(p, q, thresholds, confidence), epsilon


def test_black_box_audit_passes():
    eps_lb, eps = audit_releases()
    assert eps_lb <= eps, f"empirical lower bound {eps_lb:.3f} exceeds epsilon {eps}"
    assert eps_lb > 0.8 * eps  # the audit is sharp enough to mean something (true value: eps)


def test_black_box_audit_catches_under_noise(monkeypatch):
    real = sampling.laplace

    def halved(size, seed=None):
        z, rep = real(size, seed)
        return 0.5 * z, rep

    monkeypatch.setattr(sampling, "laplace", halved)
    eps_lb, eps = audit_releases()
    assert eps_lb > eps, f"under-noised mechanism not caught (lower bound {eps_lb:.3f})"


# ---------------------------------------------------------------------------------------------
# predictors


def test_predict_bin_value_2d(no_noise):
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0)
    _, means = reference_means(X, Y, EDGES_2D, BOUNDS_Y, 5.0)
    grid = means.reshape(3, 4)
    Xnew = np.array([[0.2, -0.5], [1.0, 0.0], [2.0, 2.9], [3.9, 0.1], [4.0, 3.0], [0.5, 0.7]])
    expected = [grid[0, 0], grid[1, 1], grid[1, 3], grid[2, 1], grid[2, 3], grid[0, 2]]
    assert_allclose(predict_bin_value(rel, Xnew), expected, rtol=0, atol=1e-9)  # up to the exact sampler's grid
    outside = np.array([[-3.0, 1.0], [9.0, 9.0]])
    assert_allclose(predict_bin_value(rel, outside), [grid[0, 2], grid[2, 3]], rtol=0, atol=1e-9)  # nearest bin
    assert_array_equal(predict_bin_value(rel, outside, outside="prior"), [5.0, 5.0])


def numpy_eq(A, B, ell, var):
    sq = np.sum(((A[:, None, :] - B[None, :, :]) / ell) ** 2, axis=-1)
    return var * np.exp(-0.5 * sq)


def test_gp_on_bins_matches_numpy_heteroscedastic_gp():
    X, Y = data_2d(seed=1)
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ClippingWarning, ReproducibleNoiseWarning))
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.8, seed=3)
    ell, var, nv = np.array([0.9, 1.3]), 4.0, 2.0
    model = fit_gp_on_bins(rel, gpflow.kernels.SquaredExponential(lengthscales=ell, variance=var), noise_variance=nv)
    occ = rel.counts > 0
    C, m = rel.centres[occ], rel.mean[occ]
    noise = 2.0 * ((10.0 / rel.counts[occ]) / 0.8) ** 2 + nv / rel.counts[occ]
    Xnew = np.array([[0.3, 0.2], [1.7, 2.2], [3.0, -0.5]])
    K = numpy_eq(C, C, ell, var) + np.diag(noise)
    Ks = numpy_eq(Xnew, C, ell, var)
    mean_ref = 5.0 + Ks @ np.linalg.solve(K, m - 5.0)
    var_ref = var - np.sum(Ks * np.linalg.solve(K, Ks.T).T, axis=1)
    mean, variance = model.predict_f(Xnew)
    assert_allclose(mean.numpy()[:, 0], mean_ref, rtol=1e-9)
    assert_allclose(variance.numpy()[:, 0], var_ref, rtol=1e-8)
    # predict_y adds the noise variance of the bin containing each point
    _, vy = model.predict_y(Xnew)
    idx, _ = bins.locate(Xnew)
    expected_noise = 2.0 * rel.noise_scale[idx] ** 2 + nv / np.maximum(rel.counts[idx], 1)
    assert_allclose(vy.numpy()[:, 0] - variance.numpy()[:, 0], np.maximum(expected_noise, 1e-6 * var), rtol=1e-9)


def test_integral_gp_data_and_noise():
    X, Y = data_2d(seed=2)
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ClippingWarning, ReproducibleNoiseWarning))
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.5, seed=4, empty_value=4.0)
    model = fit_integral_gp(rel, [1.0, 2.0], 9.0, noise_variance=3.0)
    occ = rel.counts > 0
    boxes, integrals = model.data
    lower = np.stack(np.meshgrid(EDGES_2D[0][:-1], EDGES_2D[1][:-1], indexing="ij"), -1).reshape(-1, 2)
    upper = np.stack(np.meshgrid(EDGES_2D[0][1:], EDGES_2D[1][1:], indexing="ij"), -1).reshape(-1, 2)
    vol = np.prod(upper - lower, axis=1)
    assert_allclose(boxes.numpy(), np.hstack([lower, upper])[occ])
    assert_allclose(integrals.numpy()[:, 0], (rel.mean[occ] - 4.0) * vol[occ], rtol=1e-14)
    noise = vol[occ] ** 2 * (2.0 * rel.noise_scale[occ] ** 2 + 3.0 / rel.counts[occ])
    assert_allclose(model.likelihood.variance_at(boxes).numpy()[:, 0], noise, rtol=1e-12)
    assert isinstance(model, IntegralGPR) and model.y_prior_mean == 4.0
    # far from every bin the prediction returns to the public prior mean
    mean, _ = predict_integral_gp(model, np.array([[100.0, 100.0]]))
    assert_allclose(mean, [[4.0]], atol=1e-9)


def test_integral_gp_recovers_sin_from_noiseless_bins():
    x = np.linspace(0.0, 2 * np.pi, 6000).reshape(-1, 1)  # dense: bin means = bin averages of sin
    y = np.sin(x)
    bins = make_bins(x, counts=20, bounds=(0.0, 2 * np.pi))
    rel = bin_means_nonprivate(x, y, bins, y_bounds=(-1.5, 1.5))
    model = fit_integral_gp(rel, 1.0, 1.0, noise_variance=1e-4)
    xt = np.linspace(0.2, 2 * np.pi - 0.2, 40).reshape(-1, 1)
    mean, var = predict_integral_gp(model, xt)
    assert np.max(np.abs(mean[:, 0] - np.sin(xt[:, 0]))) < 0.1
    assert np.all(var > 0)
    # wide bins: the bin average of sin is shrunk by sinc(h); the integral GP undoes it, the bin
    # value does not (max |sin| = 1 vs the average over a width-pi/2 bin, 0.9)
    coarse = bin_means_nonprivate(x, y, make_bins(counts=4, bounds=(0.0, 2 * np.pi)), y_bounds=(-1.5, 1.5))
    m_int, _ = predict_integral_gp(fit_integral_gp(coarse, 1.2, 1.0, noise_variance=1e-4), xt)
    err_int = np.sqrt(np.mean((m_int[:, 0] - np.sin(xt[:, 0])) ** 2))
    err_bin = np.sqrt(np.mean((predict_bin_value(coarse, xt) - np.sin(xt[:, 0])) ** 2))
    assert err_int < 0.6 * err_bin


def test_grid_integral_kernel_takes_bins():
    """The kernel lives in dpgp_gpflow.kernels (tested there); a Bins is a grid like its edges."""
    assert GridIntegralSE is kernels.GridIntegralSE
    bins = make_bins(edges=EDGES_2D)
    a, b = GridIntegralSE(bins, [0.6, 1.7], 2.5), GridIntegralSE(bins.edges, [0.6, 1.7], 2.5)
    assert_array_equal(a.K(bins.boxes).numpy(), b.K(bins.boxes).numpy())
    assert_allclose(a.K(bins.boxes).numpy(), IntegralSE([0.6, 1.7], 2.5).K(bins.boxes).numpy(), rtol=1e-12,
                    atol=1e-14)


def test_integral_gp_prediction_equals_plain_integral_se_model():
    X, Y = data_2d(seed=6)
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ClippingWarning, ReproducibleNoiseWarning))
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, seed=8)
    model = fit_integral_gp(rel, [0.8, 1.1], 6.0, noise_variance=1.0)
    plain = gpflow.models.GPR(model.data, IntegralSE([0.8, 1.1], 6.0), likelihood=model.likelihood)
    Xnew = np.array([[0.1, 0.1], [2.0, 2.5], [3.5, -0.7]])
    mean, var = predict_integral_gp(model, Xnew)
    mean_ref, var_ref = predict_f_at_points(plain, Xnew)
    assert_allclose(mean, mean_ref.numpy() + 5.0, rtol=1e-10)
    assert_allclose(var, var_ref.numpy(), rtol=1e-9)
    # a plain GPR declares no prior mean: it must be given, and then gives the same prediction
    with pytest.raises(ValueError, match="prior_mean"):
        predict_integral_gp(plain, Xnew)
    mean_plain, _ = predict_integral_gp(plain, Xnew, prior_mean=5.0)
    assert_allclose(mean_plain, mean, rtol=1e-10)


def test_integral_gp_is_a_gpr_declaring_its_prior_mean():
    """fit_integral_gp returns an IntegralGPR (a GPR subclass with y_prior_mean in its constructor),
    not a GPR with an attribute set on it afterwards; fit_gp_on_bins sets no attribute at all."""
    X, Y = data_2d(seed=6)
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ClippingWarning, ReproducibleNoiseWarning))
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=1.0, seed=8, empty_value=3.5)
    model = fit_integral_gp(rel, [0.8, 1.1], 6.0, noise_variance=1.0)
    assert type(model) is IntegralGPR and isinstance(model, gpflow.models.GPR)
    assert isinstance(model.kernel, GridIntegralSE) and model.y_prior_mean == 3.5
    assert isinstance(model.mean_function, gpflow.mean_functions.Zero)
    Xnew = np.array([[0.1, 0.1], [2.0, 2.5], [3.5, -0.7]])
    mean, var = model.predict_f_points(Xnew)
    mean_np, var_np = predict_integral_gp(model, Xnew)
    assert_allclose(mean.numpy(), mean_np, rtol=1e-12)
    assert_allclose(var.numpy(), var_np, rtol=1e-12)
    mean_fc, cov = predict_integral_gp(model, Xnew, full_cov=True)
    assert cov.shape == (1, 3, 3)
    assert_allclose(np.diag(cov[0])[:, None], var_np, rtol=1e-10)
    assert_allclose(mean_fc, mean_np, rtol=1e-12)
    # an explicit prior_mean overrides the model's
    assert_allclose(predict_integral_gp(model, Xnew, prior_mean=0.0)[0], mean_np - 3.5, rtol=1e-10, atol=1e-12)
    with pytest.raises(TypeError, match="IntegralSE"):
        IntegralGPR(model.data, gpflow.kernels.SquaredExponential(), model.likelihood, y_prior_mean=0.0)
    with pytest.raises(ValueError):
        IntegralGPR(model.data, model.kernel, model.likelihood, y_prior_mean=float("nan"))
    centre_gp = fit_gp_on_bins(rel)
    assert type(centre_gp) is gpflow.models.GPR and not hasattr(centre_gp, "y_prior_mean")


def test_release_repr_is_short():
    X, Y = data_2d()
    bins = make_bins(edges=EDGES_2D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ClippingWarning, ReproducibleNoiseWarning))
        rel = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.5)
        seeded = release_bin_means(X, Y, bins, y_bounds=BOUNDS_Y, epsilon=0.5, seed=1)
        exact = bin_means_nonprivate(X, Y, bins, y_bounds=BOUNDS_Y)
    text = repr(rel)
    assert text == "BinRelease(mechanism='laplace', epsilon=0.5, delta=0.0, n_bins=12, y_bounds=(0.0, 10.0))"
    assert "[" not in text and "array" not in text and str(rel) == text  # no arrays, no values
    assert repr(seeded).endswith("reproducible=True)")
    assert "mechanism='none'" in repr(exact) and "epsilon=inf" in repr(exact)


def test_predictors_reject_other_objects():
    with pytest.raises(TypeError):
        predict_bin_value(object(), np.zeros((1, 1)))
    with pytest.raises(TypeError):
        fit_gp_on_bins("not a release")
    assert isinstance(dpgp_gpflow.baselines.BinRelease, type) and BinRelease is dpgp_gpflow.baselines.BinRelease


def test_package_reexports_every_public_name():
    """README, notebooks and benchmarks use dpgp_gpflow.baselines.X for these names."""
    names = ["BinNoiseVariance", "BinRelease", "Bins", "GridIntegralSE", "bin_means_nonprivate", "fit_gp_on_bins",
             "fit_integral_gp", "make_bins", "predict_bin_value", "predict_integral_gp",
             "release_bin_means"]
    for name in names:
        assert name in dpgp_gpflow.baselines.__all__ and callable(getattr(dpgp_gpflow.baselines, name)), name


# ---------------------------------------------------------------------------------------------
# FUZZ-BUG-8: make_bins(counts=k, bounds=...) returned non-finite or repeated edges (or raised
# MemoryError) where the grid is not representable.


@pytest.mark.parametrize("counts, bounds", [
    (3, (-1e308, 1e308)),  # the width overflows: edges [nan, inf, inf, 1e308] before the fix
    (3, (-1.7e308, 1.7e308)),
    (2, (1e308, 1.7e308)),  # the centre of a bin overflows
    (2, (0.0, 5e-324)),  # below float resolution: repeated edges
    (4, (1.0, 1.0 + 2.2e-16)),
    ([2, 3], [(0.0, 1.0), (-1e308, 1e308)]),
    (10**12, (0.0, 1.0)),  # MemoryError before the fix
    ([10**4, 10**4], (0.0, 1.0)),
])
def test_make_bins_refuses_unrepresentable_grids(counts, bounds):
    with pytest.raises(ValueError, match="bins"):
        make_bins(counts=counts, bounds=bounds)


def test_make_bins_counts_refuse_bools_and_keep_representable_grids():
    with pytest.raises(TypeError, match="counts"):
        make_bins(counts=True, bounds=(0.0, 1.0))
    bins = make_bins(counts=[4, 2], bounds=[(0.0, 1.0), (-0.8e308, 0.0)])  # wide but representable
    assert_array_equal(bins.edges[0], np.linspace(0.0, 1.0, 5))
    assert_array_equal(bins.edges[1], [-0.8e308, -0.4e308, 0.0])
    assert np.all(np.isfinite(bins.centres))
