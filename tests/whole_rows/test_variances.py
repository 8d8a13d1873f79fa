"""The variance fit on noised statistics (whole_rows/variances.py) against references written here: the mean of a
truncated normal (scipy), the bound in NumPy, and the fit's behaviour when the noise makes the residual sum of
squares negative (before: the noise variance collapsed to the searched range's floor, silently)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats
from whole_rows_reference import features as reference_features
from whole_rows_reference import sgpr_bound as reference_bound

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.whole_rows import variances
from dpgp_gpflow.whole_rows.variances import fit_variances, nonnegative_mean, sgpr_bound, variance_box

BOX, D, LENGTHSCALE = [(0.0, 10.0)], 6.0, 2.0


@pytest.mark.parametrize("z", [-200.0, -31.0, -29.0, -4.0, 0.0, 1.5, 40.0])
def test_nonnegative_mean_is_the_truncated_normal_mean(z):
    std = 3.0
    ours = float(nonnegative_mean(tf.constant(z * std, tf.float64), tf.constant(std, tf.float64)))
    assert ours == pytest.approx(stats.truncnorm(-z, np.inf, loc=z * std, scale=std).mean(), rel=1e-8)
    assert float(nonnegative_mean(tf.constant(z, tf.float64), tf.constant(0.0, tf.float64))) == max(z, 0.0)


def _statistics(n=300, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    y = np.clip(np.sin(X[:, 0]) * 2.0 + 0.3 * rng.normal(size=n), -D / 2, D / 2)
    P = reference_features(X, wr.inducing_grid(BOX, 6), LENGTHSCALE)
    return P.T @ P, P.T @ y, float(y @ y), n


def test_the_bound_with_noise_stds_equals_a_numpy_reference():
    S, b, q, n = _statistics()
    args = (S, b, q - 200.0, float(np.trace(S)) + 2.0, n)  # a negative residual and trace residual
    for kf, nv in [(1.0, 0.1), (4.0, 1e-2)]:
        ours = float(sgpr_bound(tf.constant(S), tf.constant(b), *args[2:], 0.5, kf, nv, q_std=30.0, offdiag_std=0.2))
        assert ours == pytest.approx(reference_bound(*args, 0.5, 30.0, 0.2, kf, nv), rel=1e-9)


def test_a_negative_released_residual_no_longer_collapses_the_noise_variance():
    """q~ below b^T S^{-1} b (the released q's noise, e.g. 2.5 of its stds low): without the noise accounted for,
    the bound grows without limit as sigma^2 -> 0 and the fit ends on the range's floor (warned); with q's noise
    std, the fit stays inside the range and maximises the NumPy bound."""
    S, b, q, n = _statistics()
    q_std = 60.0
    residual = q - b @ np.linalg.solve(S, b)  # about n 0.09 = 27
    q_low = q - residual - 2.5 * q_std
    trace = float(np.trace(S))
    (_, _), (nv_lo, nv_hi) = variance_box(D)
    with pytest.warns(dp.VarianceFitWarning, match="noise variance .* edge"):
        _, nv = fit_variances(tf.constant(S), tf.constant(b), q_low, trace, n, 0.0, D, q_std=0.0, offdiag_std=0.0)
    assert nv == pytest.approx(nv_lo)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.VarianceFitWarning)
        kf, nv = fit_variances(tf.constant(S), tf.constant(b), q_low, trace, n, 0.0, D, q_std=q_std, offdiag_std=0.0)
    assert 100 * nv_lo < nv < nv_hi / 100
    best = reference_bound(S, b, q_low, trace, n, 0.0, q_std, 0.0, kf, nv)
    near = [reference_bound(S, b, q_low, trace, n, 0.0, q_std, 0.0, kf * a, nv * c)
            for a in (0.8, 1.25) for c in (0.8, 1.25)]
    assert best >= max(near)


def test_the_edge_warning_states_the_ranges_variance_box_searches(monkeypatch):
    """The warning's ranges come from variance_box's constants (review V, session 19: a second, hard-coded copy):
    with other ranges searched, the fit ends on the new floor and the warning names it."""
    monkeypatch.setattr(variances, "_KERNEL_RANGE", (2e-3, 30.0))
    monkeypatch.setattr(variances, "_NOISE_RANGE", (3e-5, 0.5))
    S, b, q, n = _statistics()
    q_low = float(b @ np.linalg.solve(S, b)) - 150.0  # a negative residual: the fit without q's noise hits the floor
    (_, _), (nv_lo, _) = variance_box(D)
    assert nv_lo == pytest.approx(3e-5 * (D / 2.0) ** 2)
    with pytest.warns(dp.VarianceFitWarning) as warned:
        _, nv = fit_variances(tf.constant(S), tf.constant(b), q_low, float(np.trace(S)), n, 0.0, D, q_std=0.0,
                              offdiag_std=0.0)
    assert nv == pytest.approx(nv_lo)
    message = str(warned[0].message)
    assert "kernel variance [0.002, 30] (d/2)^2, noise variance [3e-05, 0.5] (d/2)^2" in message
