"""Residual releases over an in-process source read the rows once: the first stage's pass keeps every row's features
(``residual.HeldRows``, at most ``MAX_HELD_FEATURES`` entries) and each residual stage sums from them. The sums equal a
NumPy reference and, bit for bit, a pass that reads the rows again; larger sources are read again by every stage."""

from __future__ import annotations

import pickle
import warnings

import gpflow
import numpy as np
import pytest
from whole_rows_reference import features as reference_features

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows import residual as residual_module
from dpgp_gpflow.whole_rows.features import FeatureMap
from dpgp_gpflow.whole_rows.residual import HeldRows, ResidualStatistics, holding, residual_sums
from dpgp_gpflow.whole_rows.statistics import GridStatistics, RowStatistics, sufficient_statistics

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
LENGTHSCALE = 6.0
RNG = np.random.default_rng(0)
X = RNG.uniform(-1.0, 11.0, (13, 1))  # a few outside the box: clipped
Y = RNG.uniform(-0.2, 1.2, (13, 1))  # a few outside the bounds: clipped
Z = wr.inducing_grid(BOX, 3)
U = np.array([0.4, -0.3, 0.2])
RADIUS = 0.15


class CountingChunks(LocalChunks):
    """A LocalChunks that counts its passes over the rows."""

    passes = 0

    def map_reduce(self, fn, combine, *args):
        type(self).passes += 1
        return super().map_reduce(fn, combine, *args)

    def between_persons(self, starts):
        return self


def _rows():
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)
    return RowStatistics(FeatureMap(kernel, Z, x_bounds=BOX), BOX, BOUNDS)


def test_the_held_sums_equal_a_numpy_reference_and_a_pass_reading_the_rows():
    rows = _rows()
    held = HeldRows(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        sufficient_statistics(LocalChunks(X, Y, 3), held)  # the first stage's pass: keeps the features
    CountingChunks.passes = 0
    kept = residual_sums(CountingChunks(X, Y, 3), ResidualStatistics(held, U, RADIUS))
    assert CountingChunks.passes == 0  # the rows were not read again
    read = residual_sums(LocalChunks(X, Y, 3), ResidualStatistics(rows, U, RADIUS))
    assert np.array_equal(kept, read)
    P = reference_features(np.clip(X, 0.0, 10.0), Z, LENGTHSCALE)
    yc = np.clip(Y[:, 0], 0.0, 1.0) - 0.5
    np.testing.assert_allclose(kept, P.T @ np.clip(yc - P @ U, -RADIUS, RADIUS), rtol=0, atol=1e-12)
    # other chunks than those kept: read again
    CountingChunks.passes = 0
    assert np.array_equal(residual_sums(CountingChunks(X, Y, 4), ResidualStatistics(held, U, RADIUS)),
                          residual_sums(LocalChunks(X, Y, 4), ResidualStatistics(rows, U, RADIUS)))
    assert CountingChunks.passes == 1


def _release(chunk, **options):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)  # a fresh map: eager, then compiled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return wr.release_rows(CountingChunks(X, Y, chunk), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=1.0,
                               delta=1e-3, seed=3, noise_variance=0.05, residual_fractions=(0.4, 0.2, 0.2, 0.2),
                               **options)


def test_a_release_reads_the_rows_once_and_equals_one_reading_them_at_every_stage(monkeypatch):
    CountingChunks.passes = 0
    held = _release(3, lengthscales=[3.0, 6.0])  # 5 chunks: each map compiled at the fifth, during the first pass
    assert CountingChunks.passes == 1
    monkeypatch.setattr(residual_module, "MAX_HELD_FEATURES", 0)
    CountingChunks.passes = 0
    read = _release(3, lengthscales=[3.0, 6.0])
    assert CountingChunks.passes == 4  # the statistics, then each of the three residual stages
    for key, value in held.statistics.items():
        assert np.array_equal(value, read.statistics[key]), key
    assert np.array_equal(held.estimates, read.estimates) and np.array_equal(held.radii, read.radii)
    assert np.array_equal(held.noise_covariance, read.noise_covariance)


def test_only_in_process_sources_within_the_cap_are_held(monkeypatch):
    rows = _rows()
    source = LocalChunks(X, Y, 5)
    assert isinstance(holding(source, rows), HeldRows)
    grid = holding(source, GridStatistics([rows, _rows()]))
    assert all(isinstance(r, HeldRows) for r in grid.rows)
    monkeypatch.setattr(residual_module, "MAX_HELD_FEATURES", 13 * 3 * 2)  # n M per candidate, two candidates
    assert isinstance(holding(source, GridStatistics([rows, _rows()])).rows[0], HeldRows)
    monkeypatch.setattr(residual_module, "MAX_HELD_FEATURES", 13 * 3 * 2 - 1)
    assert holding(source, GridStatistics([rows, _rows()])).rows[0] is rows
    assert isinstance(holding(source, rows), HeldRows)  # one candidate: 39 entries
    other = type("Elsewhere", (dp.streaming.ChunkSource,), {"n": 13})()  # not read in this process (e.g. Dask)
    assert holding(other, rows) is rows


def test_held_features_never_leave_the_process():
    held = HeldRows(_rows())
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(held)
    stage = pickle.loads(pickle.dumps(ResidualStatistics(held, U, RADIUS)))  # a Dask worker's copy: reads its rows
    assert stage.held is None and np.array_equal(stage.u, U)
