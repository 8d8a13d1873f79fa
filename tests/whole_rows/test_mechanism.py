"""Whole rows private: brute force over every row's extreme neighbours, the one event, the one draw.

Every row is replaced by each corner of the box and by the point of the box with the largest feature norm,
its output by the opposite bound; each neighbour is released with the same seed, so the released statistics
differ by the shift of the (whitened) query alone. Measured in units of the noise actually added to each
entry (``statistics_noise_std``), the shift must be within the charge ``mu = 1 / s`` the ledger records, whose
(epsilon, delta) is checked against the analytic Gaussian (tests/reference.py). A broken variant (raw,
unwhitened features released with the whitened bound) must fail the same check."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from reference import analytic_delta
from whole_rows_reference import extreme_neighbours, widest_point
from whole_rows_reference import shift_in_noise_units as _shift

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import features as features_module

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
LENGTHSCALE = 6.0
X = np.array([[0.0], [2.0], [5.0], [6.5], [10.0], [4.0]])
Y = np.array([[0.0], [1.0], [0.2], [0.9], [1.0], [0.0]])
Z = wr.inducing_grid(BOX, 3)
EPSILON, DELTA = 1.0, 1e-3


def _release(X, Y, seed=11, accountant=None):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return wr.release_rows(LocalChunks(X, Y, 4), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON,
                               delta=DELTA, seed=seed, noise_variance=0.1, accountant=accountant)




def _neighbours():  # the box's corners and the widest point, each row, outputs at the opposite bound
    return extreme_neighbours(X, Y, [0.0, 10.0, widest_point(0.0, 10.0, Z, LENGTHSCALE)], BOUNDS)


def _worst_shift():
    base = _release(X, Y)
    return base, max(_shift(base, _release(X2, Y2)) for X2, Y2 in _neighbours())


def test_every_extreme_neighbour_moves_the_release_within_its_charge():
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
    base = _release(X, Y, accountant=acc)
    (event,) = acc.history()
    mu = event["mu"]
    assert mu == pytest.approx(1.0 / base.noise_multiplier)
    assert analytic_delta(EPSILON, 1.0 / mu) <= DELTA * (1 + 1e-9)  # the charge is (epsilon, delta)-DP
    _, worst = _worst_shift()
    assert worst <= mu
    assert worst >= 0.9 * mu  # the corners and the widest point come close to the worst case (0.99 here)


def test_raw_features_with_the_whitened_bound_fail_the_same_check(monkeypatch):
    """The broken variant: k(Z, x) / k_max without the whitening (norms up to ~1.4 here), same sensitivity."""

    def raw(kernel, Z, L, X, k_max):
        return tf.transpose(kernel(Z, X)) / k_max

    monkeypatch.setattr(features_module, "whitened_features", raw)
    base, worst = _worst_shift()
    assert worst > 1.2 / base.noise_multiplier  # 1.36 here


def test_one_release_is_one_draw_and_one_committed_event(draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE)
    released = wr.release_rows(LocalChunks(X, Y, 2), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=EPSILON,
                               delta=DELTA, noise_variance=0.1, accountant=acc)
    m = Z.shape[0]
    assert draws == [m * (m + 1) // 2 + m + 1]  # one exact draw of the whole vector
    history = acc.history()
    assert len(history) == 1 and history[0]["status"] == "committed" and history[0]["kind"] == "gaussian"
    assert acc.spent == pytest.approx((EPSILON, DELTA)) and acc.held == (0.0, 0.0)
    assert not released.reproducible
    card = released.privacy_card()
    assert card["neighbours"] == "row (inputs and outputs)" == wr.RELATION
    assert (card["epsilon"], card["delta"], card["x_bounds"], card["y_bounds"]) == (EPSILON, DELTA, [[0.0, 10.0]],
                                                                                    [0.0, 1.0])
    assert "row (inputs and outputs)" in repr(released)


def test_a_failure_while_reading_the_rows_charges_nothing():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    Ybad = Y.copy()
    Ybad[3] = np.nan
    with pytest.raises(ValueError, match="not all finite"):
        wr.release_rows(LocalChunks(X, Ybad), gpflow.kernels.SquaredExponential(), Z, x_bounds=BOX, y_bounds=BOUNDS,
                        epsilon=EPSILON, delta=DELTA, noise_variance=0.1, accountant=acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)
