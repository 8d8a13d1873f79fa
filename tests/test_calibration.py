"""Noise calibration against DESIGN 3's reference values and an independent SciPy evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import analytic_delta

from dpgp_gpflow.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_multiplier,
    classical_gaussian_multiplier,
    exponential_mechanism_log_weights,
    gaussian_multiplier,
    laplace_scale,
)

ANALYTIC = [((1.0, 0.01), 1.8779), ((0.5, 0.01), 3.1469), ((0.2, 0.01), 6.0529), ((2.0, 1e-5), 1.9938)]
CLASSICAL = [((1.0, 0.01), 3.2552), ((0.5, 0.01), 6.5105), ((0.2, 0.01), 16.2762)]


@pytest.mark.parametrize("params, expected", ANALYTIC)
def test_analytic_multiplier_reference_values(params, expected):
    assert analytic_gaussian_multiplier(*params) == pytest.approx(expected, rel=1e-4)
    assert gaussian_multiplier(*params, "analytic") == analytic_gaussian_multiplier(*params)


@pytest.mark.parametrize("params, expected", CLASSICAL)
def test_classical_multiplier_reference_values(params, expected):
    eps, delta = params
    assert classical_gaussian_multiplier(eps, delta) == pytest.approx(expected, rel=1e-4)
    assert classical_gaussian_multiplier(eps, delta) == pytest.approx(math.sqrt(2 * math.log(2 / delta)) / eps, rel=1e-14)
    assert gaussian_multiplier(eps, delta, "classical") == classical_gaussian_multiplier(eps, delta)


@pytest.mark.parametrize("params", [p for p, _ in CLASSICAL])
def test_analytic_is_smaller_than_classical(params):
    assert analytic_gaussian_multiplier(*params) < classical_gaussian_multiplier(*params)


@pytest.mark.parametrize("epsilon", [1.0 + 1e-9, 2.0, 50.0])
def test_classical_refuses_epsilon_above_one(epsilon):
    with pytest.raises(ValueError, match="epsilon <= 1"):
        classical_gaussian_multiplier(epsilon, 0.01)
    with pytest.raises(ValueError):
        gaussian_multiplier(epsilon, 0.01, "classical")


def test_classical_at_epsilon_one_is_allowed():
    assert classical_gaussian_multiplier(1.0, 0.01) > 0


@pytest.mark.parametrize(
    "epsilon, delta",
    [(1.0, 0.01), (0.5, 0.01), (0.2, 0.01), (2.0, 1e-5), (0.05, 1e-6), (10.0, 1e-3), (50.0, 0.01), (1.0, 0.5)],
)
def test_analytic_multiplier_is_feasible_and_tight(epsilon, delta):
    s = analytic_gaussian_multiplier(epsilon, delta)
    assert analytic_delta(epsilon, s) <= delta  # independent scipy.stats evaluation: feasible
    assert analytic_delta(epsilon, s * (1.0 - 1e-6)) > delta  # and tight: a hair smaller is not DP


def test_large_epsilon_multiplier_needs_more_than_classical():
    # DESIGN 3: at eps = 50, delta = 0.01 the classical formula gives 0.065 where 0.125 is needed.
    s = analytic_gaussian_multiplier(50.0, 0.01)
    assert s == pytest.approx(0.125, abs=5e-4)
    assert math.sqrt(2 * math.log(2 / 0.01)) / 50.0 == pytest.approx(0.065, abs=5e-4)
    assert analytic_delta(50.0, 0.065) > 0.01


@pytest.mark.parametrize("epsilon, mu", [(1.0, 0.5), (0.3, 1.0), (2.0, 3.0), (40.0, 8.0)])
def test_analytic_delta_matches_scipy(epsilon, mu):
    assert analytic_gaussian_delta(epsilon, mu) == pytest.approx(analytic_delta(epsilon, 1.0 / mu), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("epsilon, mu", [(0.0, 1e-13), (1e-15, 1e-13), (1e-10, 1e-5), (30.0, 1.0), (1.0, 0.5)])
def test_analytic_delta_is_an_upper_bound_without_cancellation(epsilon, mu):
    """Where the two terms of the profile nearly cancel (mu -> 0; the naive difference was 0.2% off at
    mu = 1e-13) the public delta is still within 1e-9 of the 400-digit value, and never below it."""
    exact = float(_mp_delta(epsilon, mu))
    assert exact <= analytic_gaussian_delta(epsilon, mu) <= exact * (1.0 + 1e-9)


@pytest.mark.parametrize("mu, delta", [(0.5, 1e-5), (1.0 / 1.8779, 0.01), (2.0, 1e-3)])
def test_analytic_epsilon_inverts_delta(mu, delta):
    eps = analytic_gaussian_epsilon(mu, delta)
    assert analytic_delta(eps, 1.0 / mu) <= delta
    assert analytic_delta(eps * (1 - 1e-6), 1.0 / mu) > delta


BAD_EPSILON = [
    (0, ValueError),
    (0.0, ValueError),
    (-1.0, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    (True, TypeError),
    ("1", TypeError),
    (None, TypeError),
    ([1.0], TypeError),
]
BAD_DELTA = [
    (0, ValueError),
    (0.0, ValueError),
    (-0.01, ValueError),
    (1.0, ValueError),
    (1.5, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    (False, TypeError),
    ("0.01", TypeError),
    (None, TypeError),
]


@pytest.mark.parametrize("fn", [analytic_gaussian_multiplier, classical_gaussian_multiplier])
@pytest.mark.parametrize("epsilon, error", BAD_EPSILON)
def test_bad_epsilon_raises(fn, epsilon, error):
    with pytest.raises(error, match="epsilon"):
        fn(epsilon, 0.01)


@pytest.mark.parametrize("fn", [analytic_gaussian_multiplier, classical_gaussian_multiplier])
@pytest.mark.parametrize("delta, error", BAD_DELTA)
def test_bad_delta_raises(fn, delta, error):
    with pytest.raises(error, match="delta"):
        fn(0.5, delta)


def test_numpy_scalars_are_accepted():
    assert analytic_gaussian_multiplier(np.float64(1.0), np.float32(0.01)) == pytest.approx(1.8779, rel=1e-4)
    assert classical_gaussian_multiplier(np.int64(1), 0.01) == pytest.approx(3.2552, rel=1e-4)


def test_unknown_calibration_raises():
    with pytest.raises(ValueError, match="calibration"):
        gaussian_multiplier(1.0, 0.01, "laplace")


def test_laplace_scale():
    assert laplace_scale(2.0, 0.5) == pytest.approx(4.0, rel=1e-15)
    assert laplace_scale(100.0 / 7, 1.0) == pytest.approx(100.0 / 7, rel=1e-15)
    assert laplace_scale(0.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(-1.0, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_scale(1.0, 0.0)
    with pytest.raises(ValueError):
        laplace_scale(float("inf"), 1.0)
    with pytest.raises(TypeError):
        laplace_scale("1", 1.0)


def test_exponential_mechanism_log_weights():
    u = np.array([-6.875, 0.0, -1.5, 3.25])
    w = exponential_mechanism_log_weights(u, 1.0, 4.0)
    np.testing.assert_allclose(w, u / 8.0, rtol=1e-15)
    assert w.dtype == np.float64 and w.shape == u.shape
    w2 = exponential_mechanism_log_weights(list(u), 0.3, 0.5)
    np.testing.assert_allclose(w2, 0.3 * u / 1.0, rtol=1e-15)
    # Selection probabilities: softmax of the log-weights, the ratio between neighbours is bounded
    # by exp(eps) when every utility moves by at most the sensitivity.
    p = np.exp(w - w.max())
    p /= p.sum()
    u_nb = u + np.array([4.0, -4.0, 4.0, -4.0])
    wn = exponential_mechanism_log_weights(u_nb, 1.0, 4.0)
    pn = np.exp(wn - wn.max())
    pn /= pn.sum()
    assert np.all(np.abs(np.log(p / pn)) <= 1.0 + 1e-12)


@pytest.mark.parametrize("sensitivity, error", [(0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), ("1", TypeError)])
def test_exponential_mechanism_bad_sensitivity(sensitivity, error):
    with pytest.raises(error, match="sensitivity"):
        exponential_mechanism_log_weights(np.zeros(3), 1.0, sensitivity)


def test_exponential_mechanism_bad_inputs():
    with pytest.raises(ValueError, match="finite"):
        exponential_mechanism_log_weights(np.array([0.0, np.nan]), 1.0, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        exponential_mechanism_log_weights(np.zeros(2), -1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# FUZZ-BUG-3: analytic_gaussian_epsilon at the far ends of mu and delta (it raised OverflowError,
# never returned, undershot for mu >~ 1e10 and overshot below epsilon ~1e-5).


def _scipy_epsilon(mu, delta):
    """Independent reference: SciPy's brentq on tests/reference.py's delta(epsilon)."""
    from scipy import optimize

    f = lambda e: analytic_delta(e, 1.0 / mu) - delta  # noqa: E731
    hi = 1.0
    while f(hi) > 0.0:
        hi *= 2.0
    return optimize.brentq(f, 0.0, hi, xtol=1e-300, rtol=1e-15, maxiter=1000)


@pytest.mark.parametrize("mu, delta", [(0.05, 1e-3), (0.5, 1e-5), (1.0, 1e-10), (2.0, 1e-3), (5.0, 0.1), (20.0, 1e-6)])
def test_analytic_epsilon_matches_scipy_reference(mu, delta):
    assert analytic_gaussian_epsilon(mu, delta) == pytest.approx(_scipy_epsilon(mu, delta), rel=1e-9)


def _mp_delta(epsilon, mu):
    """delta(epsilon) at 400 digits (enough for mu up to 1e154 and down to 1e-300)."""
    import mpmath

    with mpmath.workdps(400):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


@pytest.mark.parametrize("mu", [1e-300, 3.6e-10, 1e-3, 1e3, 1e7, 1e10, 1e100, 1e154])
@pytest.mark.parametrize("delta", [2.3e-308, 1e-10, 0.5, 1.0 - 1e-16])
def test_analytic_epsilon_is_tight_and_sound_at_extremes(mu, delta):
    eps = analytic_gaussian_epsilon(mu, delta)
    assert math.isfinite(eps) and eps >= 0.0
    assert _mp_delta(eps, mu) <= delta  # sound: (eps, delta)-DP
    if eps > 0.0:
        assert _mp_delta(eps * (1.0 - 1e-9), mu) > delta  # tight to 1e-9


def test_analytic_epsilon_overflowing_and_infinite_mu():
    for mu in (1e155, 1e200, 1e308, math.inf):  # mu^2 / 2 overflows: no finite epsilon
        assert analytic_gaussian_epsilon(mu, 0.5) == math.inf
    assert analytic_gaussian_epsilon(0.0, 0.5) == 0.0
    with pytest.raises(ValueError, match="mu"):
        analytic_gaussian_epsilon(math.nan, 0.5)
    with pytest.raises(TypeError, match="mu"):
        analytic_gaussian_epsilon(True, 0.5)


def test_analytic_epsilon_decreases_with_delta_for_huge_mu():
    """Before the fix, (1e10, 1e-10) gave 4.9999999346e19 < (1e10, 0.5)'s 5e19 (cancellation)."""
    eps = [analytic_gaussian_epsilon(1e10, d) for d in (1e-300, 1e-10, 1e-3, 0.5)]
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert eps[1] == pytest.approx(5e19 + 1e10 * 6.361340, rel=1e-15)  # mu^2/2 + mu z, z = 6.36134...


def test_analytic_epsilon_of_a_calibrated_tiny_release():
    """At (1e-10, 1e-10) the old absolute xtol=1e-13 gave 1.00009e-10: 9e-5 too large."""
    mu = 1.0 / analytic_gaussian_multiplier(1e-10, 1e-10)
    assert analytic_gaussian_epsilon(mu, 1e-10) == pytest.approx(1e-10, rel=1e-6)


@pytest.mark.parametrize("epsilon, delta", [
    (1e-300, 2.3e-308), (1e-10, 2.3e-308), (1e-5, 2.3e-308),  # the multiplier was 7% too small at (1e-10, ...)
    (1e20, 1e-10), (1e20, 0.5), (1.0, 1e-5), (1e6, 1.0 - 1e-16), (1.7e308, 0.01),
])
def test_analytic_multiplier_is_sound_and_tight_at_extremes(epsilon, delta):
    """Found beside FUZZ-BUG-3: the multiplier's own profile (analytic_gaussian_delta) lost precision
    at tiny epsilon with tiny delta and at epsilon ~1e20, so the noise was too small there."""
    s = analytic_gaussian_multiplier(epsilon, delta)
    assert _mp_delta(epsilon, 1.0 / s) <= delta
    assert _mp_delta(epsilon, 1.0 / (s * (1.0 - 1e-9))) > delta
