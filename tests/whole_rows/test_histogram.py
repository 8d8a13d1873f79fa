"""Whole rows private, the histogram first stage: noised cell counts of the rows on the public grid and b, one draw.

Brute force: every row is replaced by each corner of the box, the point of the box with the largest feature norm and
points just either side of every inner cell edge (a row that crosses an edge moves one count out of its cell and one
into the next while its features, so ``b``'s shift, stay nearly the worst), its output by the opposite bound; each
neighbour is released with the same seed, so the released vectors differ by the shift of the query alone. Measured
in units of the noise actually added to each entry, the shift must be within the charge ``mu = 1 / s`` the ledger
records. A broken variant (the counts scaled as if their shift were 1, not sqrt 2) fails the same check. The counts
and b of the pass equal a NumPy reference (np.histogram's cells over the clipped inputs) in memory, over chunks and
on Dask."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
from reference import analytic_delta
from whole_rows_reference import features as reference_features
from whole_rows_reference import widest_point

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.measurement import measure
from dpgp_gpflow.mechanisms.request import release_request
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import histogram as histogram_module
from dpgp_gpflow.whole_rows import residual_bounds
from dpgp_gpflow.whole_rows.features import feature_map
from dpgp_gpflow.whole_rows.statistics import RowStatistics

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
LENGTHSCALE = 6.0  # G = ceil(10 / 3) = 4 cells per column: edges 2.5, 5, 7.5
EDGES = (2.5, 5.0, 7.5)
NEAR = 1e-6
X = np.array([[0.0], [2.5 - NEAR], [5.0], [6.5], [10.0], [7.5 + NEAR]])
Y = np.array([[0.0], [1.0], [0.2], [0.9], [1.0], [0.0]])
Z = wr.inducing_grid(BOX, 3)
EPSILON, DELTA = 1.0, 1e-3
SHARES = (0.30, 0.68, 0.02)


def _kernel(lengthscale=LENGTHSCALE):
    return gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=lengthscale)


def _release(X, Y, seed=11, accountant=None, groups=None, box=BOX, Zs=Z, lengthscale=LENGTHSCALE, chunk=4):
    request = release_request(EPSILON, DELTA, calibration="analytic", objective=None, seed=seed)
    rows = RowStatistics(feature_map(_kernel(lengthscale), Zs, box), box, BOUNDS)
    measurement = histogram_module.histogram_measurement(request, LocalChunks(X, Y, chunk, groups=groups), rows,
                                                         shares=SHARES, then=lambda noised: noised, groups=groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return measure(measurement, accountant)


def _shift(a, b):
    """The L2 norm of two releases' difference in units of each entry's noise std."""
    return float(np.linalg.norm(np.concatenate([(a.counts - b.counts) / a.counts_std, (a.b - b.b) / a.b_std])))


def _points():
    widest = widest_point(0.0, 10.0, Z, LENGTHSCALE)
    return [0.0, 10.0, widest, *[e + s * NEAR for e in EDGES for s in (-1.0, 1.0)]]


def _neighbours(X, Y, rows_of=None):
    """Every neighbour replacing one row (or, with ``rows_of``, every row of one person) by one of the points,
    outputs at the opposite bound."""
    lo, hi = BOUNDS
    persons = rows_of if rows_of is not None else [[i] for i in range(X.shape[0])]
    for rows in persons:
        for x in _points():
            X2, Y2 = X.copy(), Y.copy()
            X2[rows] = x
            Y2[rows] = np.where(Y[rows] >= (lo + hi) / 2, lo, hi)
            yield X2, Y2


def _worst(X=X, Y=Y, groups=None, rows_of=None):
    base = _release(X, Y, groups=groups)
    return base, max(_shift(base, _release(X2, Y2, groups=groups)) for X2, Y2 in _neighbours(X, Y, rows_of))


@pytest.mark.slow
def test_every_extreme_neighbour_moves_the_release_within_its_charge():
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
    base = _release(X, Y, accountant=acc)
    (event,) = acc.history()
    mu = event["mu"]
    assert event["status"] == "committed" and mu == pytest.approx(1.0 / base.multiplier)
    assert analytic_delta(EPSILON, 1.0 / mu) <= DELTA * (1 + 1e-9)  # the charge is (epsilon, delta)-DP
    worst = 0.0
    for X2, Y2 in _neighbours(X, Y):
        other = _release(X2, Y2)
        worst = max(worst, _shift(base, other))
        dn = np.round(other.counts - base.counts, 6)  # same seed: the counts' shift alone, one cell out, one in
        assert set(np.unique(dn)) <= {-1.0, 0.0, 1.0} and np.sum(dn) == 0 and np.linalg.norm(dn) <= math.sqrt(2)
        assert np.linalg.norm(other.b - base.b) <= (BOUNDS[1] - BOUNDS[0]) * (1 + 1e-9)
    assert worst <= mu
    assert worst >= 0.97 * mu  # crossing an edge near the widest point comes close to the worst case


@pytest.mark.slow
def test_counts_charged_as_if_their_shift_were_one_fail_the_same_check(monkeypatch):
    """The broken variant: the counts' part scaled to its share of a unit bound 1 instead of sqrt 2 (the one rule of
    the histogram's noise, :func:`~dpgp_gpflow.whole_rows.residual_bounds.histogram_noise_stds`)."""
    monkeypatch.setattr(residual_bounds, "COUNT_BOUND", 1.0)
    base, worst = _worst()
    assert worst > 1.1 / base.multiplier


def test_a_person_moved_together_is_within_the_persons_charge():
    groups = np.array([7, 7, 3, 3, 3, 9])  # a person of 3 rows at one point, just below an edge, output high
    Xp, Yp = X.copy(), Y.copy()
    Xp[2:5], Yp[2:5] = 2.5 - NEAR, 1.0
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=0.1)
    base = _release(Xp, Yp, groups=groups, accountant=acc)
    one = _release(Xp, Yp)  # the charge is 3 times one row's
    assert base.person_rows == 3
    assert base.sensitivity == pytest.approx(3.0 * one.sensitivity, rel=1e-9)
    assert base.counts_std == pytest.approx(3.0 * one.counts_std, rel=1e-9)
    assert acc.history()[0]["mu"] == pytest.approx(1.0 / base.multiplier)
    _, worst = _worst(Xp, Yp, groups=groups, rows_of=[[0, 1], [2, 3, 4], [5]])
    assert 0.9 / base.multiplier <= worst <= 1.0 / base.multiplier


def test_one_release_is_one_draw_and_one_committed_event(draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    request = release_request(EPSILON, DELTA, calibration="analytic", objective=None, seed=None)
    rows = RowStatistics(feature_map(_kernel(), Z, BOX), BOX, BOUNDS)
    noised = measure(histogram_module.histogram_measurement(request, LocalChunks(X, Y, 2), rows, shares=SHARES,
                                                            then=lambda n: n), acc)
    assert draws == [4 + Z.shape[0]]  # the 4 counts and b, one exact draw
    (event,) = acc.history()
    assert event["status"] == "committed" and event["kind"] == "gaussian"
    assert acc.spent == pytest.approx((EPSILON, DELTA)) and acc.held == (0.0, 0.0)
    assert not noised.reproducible and noised.counts.shape == (4,) and noised.b.shape == (Z.shape[0],)
    w_n2, w_b2 = 0.30 / 0.98, 0.68 / 0.98  # the shares of S and b, normalised (no q released)
    std = noised.multiplier * noised.sensitivity
    assert noised.counts_std == pytest.approx(std * math.sqrt(2.0) / math.sqrt(w_n2), rel=1e-12)
    assert noised.b_std == pytest.approx(std * (BOUNDS[1] - BOUNDS[0]) / math.sqrt(w_b2), rel=1e-12)
    # the charge written out (docs/whole_rows.md, the histogram scheme; docs/exact_sampling.md): one row moves the
    # vector by 1 (1 + (M + 4) u), plus the rounding slack of the C + M sums, 2 sqrt(C + M) t n / (1 - t) with
    # t = (rows per chunk + chunks + 8) u, times SENSITIVITY_SAFETY = 1 + 1e-8, times the exact sampler's grid
    # factor for C + M entries, K / (1 - s K sqrt(C + M) 2^-40) with K = 1 + 2^-50, rounded up by (1 + 4u)
    u, C, M, n = 2.0**-53, 4, Z.shape[0], X.shape[0]
    assert noised.chunking == (2, 3)  # 6 rows in chunks of 2
    assert analytic_delta(EPSILON, noised.multiplier) == pytest.approx(DELTA, rel=1e-6)  # s, the request's
    t = (2 + 3 + 8) * u
    slack = 2.0 * math.sqrt(C + M) * t * n / (1.0 - t)
    K = 1.0 + 2.0**-50
    grid = K / (1.0 - noised.multiplier * K * math.sqrt(C + M) * 2.0**-40) * (1.0 + 4.0 * u)
    expected = (1.0 + (M + 4) * u + slack) * (1.0 + 1e-8) * grid
    assert noised.sensitivity == pytest.approx(expected, rel=4e-16, abs=0.0)
    # leaving out the slack or the grid factor would fail the line above
    for without in ((1.0 + (M + 4) * u) * (1.0 + 1e-8) * grid, (1.0 + (M + 4) * u + slack) * (1.0 + 1e-8)):
        assert abs(without / expected - 1.0) > 20 * 4e-16


def test_a_grid_with_too_many_cells_is_refused_before_anything_is_reserved(draws):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    box = [(0.0, 100.0), (0.0, 100.0)]  # lengthscale 1: 200^2 cells
    X2 = np.random.default_rng(0).uniform(0.0, 100.0, (6, 2))
    with pytest.raises(ValueError, match="200\\^2 cells .*: use residual_fractions='default' .* longer lengthscale"):
        _release(X2, Y, accountant=acc, box=box, Zs=wr.inducing_grid(box, 3), lengthscale=1.0)
    assert draws == [] and acc.history() == [] and acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def test_a_failure_while_reading_the_rows_charges_nothing():
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    Ybad = Y.copy()
    Ybad[3] = np.nan
    with pytest.raises(ValueError, match="not all finite"):
        _release(X, Ybad, accountant=acc)
    assert acc.spent == (0.0, 0.0) and acc.held == (0.0, 0.0)


def _reference(X, Y, box, cells, Zs, lengthscale):
    """Counts on the grid (np.histogramdd over the clipped inputs; the box's upper bound in the last cell) and b."""
    box = np.asarray(box, dtype=float)
    Xc = np.clip(X, box[:, 0], box[:, 1])
    counts, _ = np.histogramdd(Xc, bins=[np.linspace(lo, hi, cells + 1) for lo, hi in box])
    lo, hi = BOUNDS
    yc = np.clip(np.ravel(Y), lo, hi) - (lo + hi) / 2
    return counts.reshape(-1), reference_features(Xc, Zs, lengthscale).T @ yc


def test_the_counts_and_b_equal_a_numpy_reference_in_memory_over_chunks_and_on_dask():
    rng = np.random.default_rng(3)
    box = [(0.0, 10.0), (-5.0, 5.0)]
    X2 = np.concatenate([rng.uniform(-2.0, 12.0, (297, 2)), [[0.0, -5.0], [10.0, 5.0], [2.5, 0.0]]])
    Y2 = rng.uniform(-0.5, 1.5, (300, 1))
    Zs = wr.inducing_grid(box, 3)
    rows = RowStatistics(feature_map(_kernel(), Zs, box), box, BOUNDS)
    cells = histogram_module.histogram_cells(rows.features.kernel, rows.box)
    assert cells == 4
    counting = histogram_module.CellCounts(rows, cells)
    counts, b = _reference(X2, Y2, box, cells, Zs, LENGTHSCALE)
    sources = [LocalChunks(X2, Y2, 300), LocalChunks(X2, Y2, 7)]
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    sources.append(DaskChunks(da.from_array(X2, chunks=(40, 2)), da.from_array(Y2, chunks=(40, 1))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        for source in sources:
            got_counts, got_b = histogram_module.histogram_sums(source, counting)
            np.testing.assert_array_equal(got_counts, counts)
            np.testing.assert_allclose(got_b, b, rtol=1e-6, atol=1e-9)  # reference features: own jitter
    # the cells' centres are radius_points' grid
    np.testing.assert_array_equal(histogram_module.histogram_centres(rows.features.kernel, rows.box),
                                  wr.residual.radius_points(rows.features.kernel, box))
