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


@pytest.fixture
def passes(monkeypatch):
    """Counts the passes of every LocalChunks over its rows (LocalChunks itself patched: a subclass is not held)."""
    count = [0]
    read = LocalChunks.map_reduce

    def counted(self, fn, combine, *args):
        count[0] += 1
        return read(self, fn, combine, *args)

    monkeypatch.setattr(LocalChunks, "map_reduce", counted)
    return count


def _rows():
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)
    return RowStatistics(FeatureMap(kernel, Z, x_bounds=BOX), BOX, BOUNDS)


def _reference_sums(X, Y):
    """NumPy: the clipped residual sums of the rows (X, Y) around U with radius RADIUS."""
    P = reference_features(np.clip(X, 0.0, 10.0), Z, LENGTHSCALE)
    yc = np.clip(Y[:, 0], 0.0, 1.0) - 0.5
    return P.T @ np.clip(yc - P @ U, -RADIUS, RADIUS)


def _held(source, rows):
    """HeldRows of ``rows`` and ``source`` after the first stage's pass over it (which keeps the features)."""
    held = HeldRows(rows, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        sufficient_statistics(source, held)
    return held


def test_the_held_sums_equal_a_numpy_reference_and_a_pass_reading_the_rows(passes):
    rows = _rows()
    source = LocalChunks(X, Y, 3)
    held = _held(source, rows)
    passes[0] = 0
    kept = residual_sums(source, ResidualStatistics(held, U, RADIUS))
    assert passes[0] == 0  # the rows were not read again
    read = residual_sums(LocalChunks(X, Y, 3), ResidualStatistics(rows, U, RADIUS))
    assert passes[0] == 1 and np.array_equal(kept, read)
    np.testing.assert_allclose(kept, _reference_sums(X, Y), rtol=0, atol=1e-12)
    # another LocalChunks over the same X and Y objects in the same chunks reads the same rows: held
    assert np.array_equal(residual_sums(LocalChunks(X, Y, 3), ResidualStatistics(held, U, RADIUS)), kept)
    assert passes[0] == 1
    # other chunks than those kept: read again
    assert np.array_equal(residual_sums(LocalChunks(X, Y, 4), ResidualStatistics(held, U, RADIUS)),
                          residual_sums(LocalChunks(X, Y, 4), ResidualStatistics(rows, U, RADIUS)))
    assert passes[0] == 3


def test_held_rows_are_summed_only_for_the_source_they_came_from(passes):
    """Two sources with the same chunks but other rows (or equal rows in other arrays) each give their own sums."""
    rng = np.random.default_rng(7)
    X2, Y2 = rng.uniform(0.0, 10.0, X.shape), rng.uniform(0.0, 1.0, Y.shape)
    first, second = LocalChunks(X, Y, 3), LocalChunks(X2, Y2, 3)
    assert first.chunk_bounds() == second.chunk_bounds()
    rows = _rows()  # one map for every pass (traced once)
    held = _held(first, rows)
    passes[0] = 0
    theirs = residual_sums(second, ResidualStatistics(held, U, RADIUS))
    assert passes[0] == 1  # read: not the held rows
    np.testing.assert_allclose(theirs, _reference_sums(X2, Y2), rtol=0, atol=1e-12)
    assert not np.allclose(theirs, _reference_sums(X, Y), rtol=0, atol=1e-3)
    copied = residual_sums(LocalChunks(X.copy(), Y.copy(), 3), ResidualStatistics(held, U, RADIUS))
    assert passes[0] == 2  # equal values in other arrays: read again (the identity is the arrays'), same sums
    np.testing.assert_allclose(copied, _reference_sums(X, Y), rtol=0, atol=1e-12)
    own = residual_sums(first, ResidualStatistics(_held(second, rows), U, RADIUS))  # held from the second source
    np.testing.assert_allclose(own, _reference_sums(X, Y), rtol=0, atol=1e-12)
    assert np.array_equal(residual_sums(first, ResidualStatistics(held, U, RADIUS)), residual_sums(
        first, ResidualStatistics(rows, U, RADIUS)))  # its own source: held, as a pass reading the rows
    passes[0] = 0
    unbound = _held(first, rows)
    unbound.rows_of = None  # kept for no source (HeldRows without one): read again
    np.testing.assert_allclose(residual_sums(first, ResidualStatistics(unbound, U, RADIUS)), _reference_sums(X, Y),
                               rtol=0, atol=1e-12)
    assert passes[0] == 2 and HeldRows(rows).rows_of is None


def _release(chunk, **options):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=LENGTHSCALE)  # a fresh map: eager, then compiled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return wr.release_rows(LocalChunks(X, Y, chunk), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=1.0,
                               delta=1e-3, seed=3, noise_variance=0.05, residual_fractions=(0.4, 0.2, 0.2, 0.2),
                               **options)


def test_a_release_reads_the_rows_once_and_equals_one_reading_them_at_every_stage(monkeypatch, passes):
    held = _release(3, lengthscales=[3.0, 6.0])  # 5 chunks: each map compiled at the fifth, during the first pass
    assert passes[0] == 1
    monkeypatch.setattr(residual_module, "MAX_HELD_FEATURES", 0)
    passes[0] = 0
    read = _release(3, lengthscales=[3.0, 6.0])
    assert passes[0] == 4  # the statistics, then each of the three residual stages
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
    own = type("OwnReading", (LocalChunks,), {"map_reduce": lambda self, fn, combine, *args: None})(X, Y, 5)
    assert holding(own, rows) is rows  # a subclass may read its rows its own way: not held


def test_held_features_never_leave_the_process():
    held = HeldRows(_rows())
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(held)
    stage = pickle.loads(pickle.dumps(ResidualStatistics(held, U, RADIUS)))  # a Dask worker's copy: reads its rows
    assert stage.held is None and np.array_equal(stage.u, U)
