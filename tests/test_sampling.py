"""Exact noise (docs/exact_sampling.md): the samplers' distributions, the grid, the exact addition,
the privacy bound the Gaussian calibration relies on, and exact-sampled releases under the exact audit.

The OS-entropy samplers cannot be seeded: each statistical test below fails for a correct sampler
with probability about 1e-6 or less (the thresholds say so where they are set)."""

from __future__ import annotations

import math
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from scipy import special, stats

from dpgp_gpflow import PrivacyLeakWarning, ReproducibleNoiseWarning, sampling
from dpgp_gpflow.calibration import analytic_gaussian_multiplier
from dpgp_gpflow.mechanisms import cloaking_release, standard_release
from dpgp_gpflow.selection import exponential_mechanism, gumbel_max

sys.path.insert(0, str(Path(__file__).resolve().parent / "audits"))
from auditing import audit_exact  # noqa: E402

GRID = 2.0**sampling.GRID_EXPONENT


def on_grid(z, grid=GRID):
    scaled = np.asarray(z) / grid
    return bool(np.all(scaled == np.rint(scaled)))


def gaussian_delta(epsilon, mu):
    """The analytic-Gaussian profile (Balle & Wang 2018), written here from its definition."""
    if mu <= 0.0:
        return 0.0
    return float(special.ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * special.ndtr(-epsilon / mu - mu / 2))


# ---------------------------------------------------------------------------------------------
# The samplers


def test_exact_gaussian_moments_ks_and_grid():
    n = 100_000
    z, reproducible = sampling.standard_normal(n)
    assert not reproducible and z.shape == (n,) and z.dtype == np.float64
    assert on_grid(z)  # every draw is an exact multiple of 2^-40
    assert np.unique(z).size > 0.999 * n  # a grid this fine shows (almost) no ties
    assert abs(z.mean()) < 5.0 / math.sqrt(n)
    assert abs(z.var() - 1.0) < 5.0 * math.sqrt(2.0 / n)
    assert abs(stats.kurtosis(z, fisher=False) - 3.0) < 5.0 * math.sqrt(24.0 / n)
    assert stats.kstest(z, stats.norm.cdf).pvalue > 1e-6
    assert stats.kstest(1.08 * z, stats.norm.cdf).pvalue < 1e-6  # the test has power


def test_exact_laplace_distribution_and_grid():
    n = 50_000
    z, reproducible = sampling.laplace(n)
    assert not reproducible and on_grid(z)
    assert abs(z.var() - 2.0) < 5.0 * math.sqrt(20.0 / n)  # Var = 2, fourth moment 24
    assert stats.kstest(z, stats.laplace.cdf).pvalue > 1e-6
    assert stats.kstest(1.1 * z, stats.laplace.cdf).pvalue < 1e-6


def test_exact_exponential_mechanism_frequencies():
    log_w = np.array([0.0, -0.4, -1.0, -2.5, 0.3])
    p = np.exp(log_w) / np.exp(log_w).sum()
    draws = 4000
    counts = np.bincount([sampling.gumbel_argmax(log_w)[0] for _ in range(draws)], minlength=p.size)
    assert stats.chisquare(counts, draws * p).pvalue > 1e-6
    # the package entry points use it by default, and report it as not reproducible
    index, reproducible = gumbel_max(log_w)
    assert 0 <= index < p.size and not reproducible
    idx, probs = exponential_mechanism(np.array([0.0, -1.0]), 1.0, 0.5)
    assert idx in (0, 1) and np.allclose(probs.sum(), 1.0)


def test_seeds_fall_back_to_numpy_and_warn():
    for draw in (sampling.standard_normal, sampling.laplace):
        with pytest.warns(ReproducibleNoiseWarning):
            a, rep_a = draw(5, seed=11)
        with pytest.warns(ReproducibleNoiseWarning):
            b, _ = draw(5, seed=11)
        assert rep_a and np.array_equal(a, b)
    with pytest.warns(ReproducibleNoiseWarning):
        assert sampling.gumbel_argmax([0.0, 1.0, 2.0], seed=3)[1]


# ---------------------------------------------------------------------------------------------
# The exact addition


def test_grid_sum_is_exact():
    rng = np.random.default_rng(0)
    values = rng.standard_normal(200) * 10.0 ** rng.uniform(-3, 6, 200)
    noise = np.rint(rng.standard_normal(200) * 2**40) * GRID
    got = sampling.grid_sum(values, noise)
    step = Fraction(2) ** sampling.GRID_EXPONENT
    for v, e, g in zip(values, noise, got):
        grid_point = round(Fraction(float(v)) / step) * step  # nearest grid point, ties to even
        assert abs(Fraction(float(v)) - grid_point) <= step / 2
        assert g == float(grid_point + Fraction(float(e)))  # the exact sum, rounded once
    # off-grid noise (a substituted sampler) and huge values take the rational path, still exact
    assert sampling.grid_sum([1.0], [0.1])[0] == float(Fraction(1) + Fraction(0.1))
    assert sampling.grid_sum([2.0**70], [GRID])[0] == 2.0**70
    with pytest.raises(ValueError):
        sampling.grid_sum([np.nan], [0.0])


def test_add_laplace_is_exact_and_covers_the_rounding(monkeypatch):
    rng = np.random.default_rng(1)
    epsilon, scale = 0.7, 0.25
    values = rng.uniform(-50.0, 50.0, 500)
    noise = np.rint(rng.laplace(0.0, 1.0, 500) * 2**40) * GRID
    monkeypatch.setattr(sampling, "laplace", lambda size, seed=None: (noise[:size].copy(), False))
    out, reproducible = sampling.add_laplace(values, scale, epsilon)
    assert not reproducible
    shrink = 1.0 - GRID / epsilon - 8.0 * 2.0**-53
    b = Fraction(scale) / Fraction(shrink)
    up = 2**40
    for v, e, o in zip(values, noise, out):
        a = round(Fraction(float(v)) / b * up)
        assert o == float((a + Fraction(float(e)) * up) / up * b)
    # the worst neighbour (a value moved by its full sensitivity, scale * epsilon) moves the
    # rounded whitened value by at most epsilon: the discrete Laplace's privacy loss
    moved = values + scale * epsilon
    for v, w in zip(values, moved):
        shift = abs(round(Fraction(float(v)) / b * up) - round(Fraction(float(w)) / b * up))
        assert Fraction(shift, up) <= Fraction(epsilon)
    monkeypatch.undo()
    z, _ = sampling.add_laplace(np.zeros(20_000), 2.0, 1.0)
    assert stats.kstest(z / 2.0, stats.laplace.cdf).pvalue > 1e-6


# ---------------------------------------------------------------------------------------------
# The bound relied on


def lattice_pmf(grid, centre=0.0, width=16.0):
    k = np.arange(-int(width / grid) - 2, int(width / grid) + 3)
    x = k * grid
    w = np.exp(-0.5 * (x - centre) ** 2)
    return x, w / w.sum()


def theta_tail(a):
    return 2.0 * sum(math.exp(-a * j * j) for j in range(1, 40))


def smoothed_to_discrete_ratios(grid, t, c, continuous_var):
    """D_{grid Z, c, 1}(y) / P[Y = y] at the grid points within 4 of c, where X ~ N(c, continuous_var)
    and Y | X ~ D_{grid Z, X, t} (P[Y = y] by quadrature over X)."""
    sc = math.sqrt(continuous_var)
    xs = np.linspace(c - 12 * sc, c + 12 * sc, 120_001)
    px = stats.norm.pdf(xs, c, sc)
    ks = np.arange(-int(20 / grid), int(20 / grid) + 1) * grid
    norm = np.exp(-0.5 * ((ks[:, None] - xs[None, :]) / t) ** 2).sum(axis=0)  # sum over the grid
    points, dg = lattice_pmf(grid, centre=c)
    keep = np.abs(points - c) <= 4.0
    return np.array([mass / np.trapz(px * np.exp(-0.5 * ((y - xs) / t) ** 2) / norm, xs)
                     for y, mass in zip(points[keep], dg[keep])])


def test_smoothing_lemma_pointwise():
    """Y = D_{grid Z, X, t} with X ~ N(c, 1 - t^2) has, at every grid point, mass within the lemma's
    factor of the discrete Gaussian D_{grid Z, c, 1} (by quadrature, on a coarse grid where the
    factor is visible); with the wrong continuous variance (1 instead of 1 - t^2) it does not."""
    grid, t, c = 0.5, 0.3, 0.2
    e1, e2 = theta_tail(2 * math.pi**2 * (t / grid) ** 2), theta_tail(2 * math.pi**2 / grid**2)
    lo, hi = (1 - e1) / (1 + e2), (1 + e1) / (1 - e2)
    ratios = smoothed_to_discrete_ratios(grid, t, c, 1 - t * t)
    assert np.all(ratios >= lo * (1 - 1e-9)) and np.all(ratios <= hi * (1 + 1e-9)), (ratios.min(), ratios.max(), lo, hi)
    assert np.max(np.abs(ratios - 1.0)) > 1e-7  # the quadrature resolves the (small) difference
    wrong = smoothed_to_discrete_ratios(grid, t, c, 1.0)
    assert np.any(wrong < lo) or np.any(wrong > hi)  # the check has teeth


def exact_delta(epsilon, steps, grid, dims):
    """delta(epsilon) of D_{grid Z^r, 0, 1} vs the same shifted by ``steps`` grid points, both orders."""
    x, p = lattice_pmf(grid, width=13.0)
    P = p
    for _ in range(dims - 1):
        P = np.multiply.outer(P, p)
    Q = P
    for axis, s in enumerate(steps):
        Q = np.roll(Q, s, axis=axis)
    return max(np.maximum(P - math.exp(epsilon) * Q, 0).sum(), np.maximum(Q - math.exp(epsilon) * P, 0).sum())


@pytest.mark.parametrize("grid, steps", [(0.1, (5,)), (0.25, (4,)), (0.25, (2, 3)), (0.5, (1, 2))])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0])
def test_discrete_gaussian_delta_bound_holds(grid, steps, epsilon):
    mu = grid * math.hypot(*steps)
    t = min(0.6, 1.5 * grid)  # a coarse grid needs a coarse smoothing step for a meaningful bound
    exact = exact_delta(epsilon, steps, grid, len(steps))
    bound = sampling.discrete_gaussian_delta_bound(epsilon, mu, len(steps), grid=grid, smoothing=t)
    assert exact <= bound * (1 + 1e-9), (exact, bound)


def test_same_scale_is_not_always_as_good_at_a_coarse_grid():
    """The shortcut "discrete is at least as private as continuous at the same scale" is false on a
    coarse grid (which is why the lemma above is what the package relies on)."""
    exact = exact_delta(2.0, (5,), 0.1, 1)
    assert exact > gaussian_delta(2.0, 0.5) * 1.005  # 9.51e-6 > 9.44e-6


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-5), (1.0, 0.01), (4.0, 1e-6), (20.0, 1e-3)])
@pytest.mark.parametrize("r", [1, 50, 10_000])
def test_calibration_holds_for_the_exact_sampler(epsilon, delta, r):
    """A release whitened to shift <= 1/(s K) on the package's grid is (epsilon, delta)-DP by the
    lemma; the shift the release allows before rounding is 1/(s factor), after it 1/(s K)."""
    s = analytic_gaussian_multiplier(epsilon, delta)
    factor = sampling.gaussian_grid_factor(s, r)
    K = sampling.DISCRETE_GAUSSIAN_FACTOR
    assert 1.0 < factor < 1.0 + 1e-8
    after_rounding = 1.0 / (s * factor) + math.sqrt(r) * GRID
    assert after_rounding * K <= 1.0 / s
    bound = sampling.discrete_gaussian_delta_bound(epsilon, after_rounding, r)
    assert bound <= delta
    assert bound == pytest.approx(gaussian_delta(epsilon, after_rounding), rel=1e-12)  # eta < 2^-1000


def test_opendp_accounts_for_the_rounding_the_same_way():
    """OpenDP's own privacy map for the sampler the package calls adds the same rounding term
    (sqrt(r) 2^-40 in L2; 2^-40 per coordinate for the Laplace)."""
    import opendp.prelude as odp

    odp.enable_features("contrib")
    r = 400
    g = odp.m.make_gaussian(odp.vector_domain(odp.atom_domain(T=float, nan=False), size=r), odp.l2_distance(T=float),
                            scale=1.0, k=sampling.GRID_EXPONENT)
    assert g.map(0.5) == pytest.approx((0.5 + math.sqrt(r) * GRID) ** 2 / 2, rel=1e-12)
    lap = odp.m.make_laplace(odp.atom_domain(T=float, nan=False), odp.absolute_distance(T=float), scale=1.0,
                             k=sampling.GRID_EXPONENT)
    assert lap.map(0.5) == pytest.approx(0.5 + GRID, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Exact-sampled releases


def gp_problem(n=25, k=15, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 6.0, n))
    Xs = np.linspace(-0.5, 6.5, k)

    def se(a, b):
        return np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2 / 1.2**2)

    C = se(Xs, X) @ np.linalg.inv(se(X, X) + 0.1 * np.eye(n))
    prior = se(Xs, Xs)
    y = rng.uniform(-1.0, 1.0, n)  # centred outputs within b = 1 of 0; d = 2
    return C, prior, y


def range_projector(F):
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    U = U[:, s > 1e-12 * s[0]]
    return U @ U.T


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_exact_cloaking_release_passes_the_exact_audit(objective):
    C, _, y = gp_problem()
    k = C.shape[0]
    kw = dict(data_sensitivity=2.0, output_bound=1.0, epsilon=1.0, delta=0.01, objective=objective)
    rel = cloaking_release(tf.constant(C), tf.constant(y), np.zeros(k), np.zeros(k), **kw)
    assert not rel.reproducible
    result = audit_exact(rel, 2.0 * (range_projector(rel.noise_factor) @ C).T, C_ref=C, data_sensitivity=2.0)
    assert result.passed, result.failures
    np.testing.assert_allclose(rel.noise_std[:, 0], np.linalg.norm(rel.noise_factor, axis=1), rtol=1e-12)
    # the recorded sensitivity includes the (tiny) inflation for the query's rounding and the grid
    with pytest.warns(PrivacyLeakWarning, match="sampler='float'"):
        flt = cloaking_release(tf.constant(C), tf.constant(y), np.zeros(k), np.zeros(k), sampler="float", **kw)
    assert flt.sensitivity <= rel.sensitivity <= flt.sensitivity * (1 + 1e-9)
    # the released mean is the projected mean plus noise of the recorded covariance
    P = range_projector(rel.noise_factor)
    w = np.linalg.lstsq(rel.noise_factor, rel.mean[:, 0] - P @ C @ y, rcond=None)[0]
    assert np.linalg.norm((np.eye(k) - P) @ rel.mean) < 1e-8 * max(1.0, np.linalg.norm(rel.mean))
    assert np.all(np.abs(w) < 6.0)


def test_exact_standard_release_passes_the_exact_audit():
    C, prior, y = gp_problem(seed=2)
    k = C.shape[0]
    L = np.linalg.cholesky(prior + 1e-10 * np.eye(k))
    unit = float(np.max(np.linalg.norm(np.linalg.solve(L, C), axis=0)))  # Mahalanobis norm of each column
    kw = dict(sensitivity=2.0 * unit, data_sensitivity=2.0, epsilon=1.0, delta=0.01)
    rel = standard_release(C @ y, np.zeros(k), prior, **kw)
    result = audit_exact(rel, 2.0 * C.T, C_ref=C, data_sensitivity=2.0)
    assert result.passed, result.failures
    with pytest.warns(PrivacyLeakWarning):
        flt = standard_release(C @ y, np.zeros(k), prior, sampler="float", **kw)
    assert flt.sensitivity <= rel.sensitivity <= flt.sensitivity * (1 + 1e-9)


def test_seeded_exact_release_is_reproducible_and_adds_noise_factor_times_xi():
    C, _, y = gp_problem(seed=3)
    k = C.shape[0]
    kw = dict(data_sensitivity=2.0, output_bound=1.0, epsilon=1.0, delta=0.01, seed=9)
    with pytest.warns(ReproducibleNoiseWarning):
        a = cloaking_release(tf.constant(C), tf.constant(y), np.zeros(k), np.zeros(k), **kw)
    with pytest.warns(ReproducibleNoiseWarning):
        b = cloaking_release(tf.constant(C), tf.constant(y), np.zeros(k), np.zeros(k), **kw)
    assert a.reproducible and np.array_equal(a.mean, b.mean)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xi, _ = sampling.standard_normal(a.rank, 9)
    P = range_projector(a.noise_factor)
    np.testing.assert_allclose(a.mean[:, 0] - P @ C @ y, a.noise_factor @ xi, atol=1e-9 * np.abs(a.noise_factor).max())


def test_float_sampler_warns_and_unknown_sampler_raises():
    C, prior, y = gp_problem(seed=4)
    k = C.shape[0]
    with pytest.raises(ValueError, match="sampler"):
        cloaking_release(tf.constant(C), tf.constant(y), np.zeros(k), np.zeros(k), data_sensitivity=2.0,
                         output_bound=1.0, epsilon=1.0, delta=0.01, sampler="fast")
    with pytest.raises(ValueError, match="sampler"):
        standard_release(C @ y, np.zeros(k), prior, sensitivity=1.0, data_sensitivity=2.0, epsilon=1.0,
                         delta=0.01, sampler="fast")
    with pytest.warns(PrivacyLeakWarning, match="sampler='float'"):
        index, reproducible = gumbel_max([0.0, 1.0], sampler="float")
    assert index in (0, 1) and not reproducible
    with pytest.raises(ValueError, match="sampler"):
        gumbel_max([0.0, 1.0], sampler="fast")
    z, reproducible = sampling.float_standard_normal(1000)
    assert not reproducible and not on_grid(z)  # the float sampler is not on the grid
