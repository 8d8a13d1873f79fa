"""Whole rows private: the statistics in one pass over chunks (in memory, LocalChunks, Dask) equal a NumPy
reference, the released vector and its sensitivity."""

from __future__ import annotations

import math
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from whole_rows_reference import statistics as reference_statistics

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows.sensitivity import (
    entry_noise_std,
    joint_bound,
    packed,
    rounding_factor,
    statistic_dimension,
    statistic_scales,
    unpack,
)

BOX = [(0.0, 10.0), (-5.0, 5.0)]
BOUNDS = (-2.0, 4.0)
LENGTHSCALE = 3.0


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform([-1.0, -6.0], [11.0, 6.0], (n, 2))  # some outside the box
    Y = rng.uniform(-3.0, 5.0, (n, 1))  # some outside the bounds
    return X, Y


def _rows_statistics():
    Z = wr.inducing_grid(BOX, 3)
    kernel = gpflow.kernels.SquaredExponential(variance=5.0, lengthscales=LENGTHSCALE)
    return Z, wr.RowStatistics(wr.FeatureMap(kernel, Z), BOX, BOUNDS)


@pytest.mark.parametrize("chunk_size", [1, 7, 50, 1000])
def test_chunked_statistics_equal_the_numpy_reference(chunk_size):
    X, Y = _rows(173)
    Z, rows = _rows_statistics()
    with pytest.warns(dp.ClippingWarning, match=r"of 173 private rows had inputs outside"):
        stats = wr.sufficient_statistics(LocalChunks(X, Y, chunk_size), rows)
    S, b, q = reference_statistics(X, Y, Z, LENGTHSCALE, BOX, BOUNDS)
    np.testing.assert_allclose(stats.S, S, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(stats.b, b, rtol=1e-10, atol=1e-10)
    assert stats.q == pytest.approx(q, rel=1e-12)
    assert stats.n == 173
    assert stats.clipped_inputs == int(np.sum(np.any((X < [0, -5]) | (X > [10, 5]), axis=1)))
    assert stats.clipped_outputs == int(np.sum((Y < -2) | (Y > 4)))


def test_passes_over_several_chunk_sizes_trace_the_chunk_sums_once(monkeypatch):
    """The chunk sums run eagerly for the first ``compile_after`` chunks, then through one compiled trace for
    every chunk length (each pass here ends in a chunk of another length: 173 = 3 * 50 + 23 = 24 * 7 + 5 =
    13 * 13 + 4), reused by later passes: the sums' Python body runs in a graph exactly once over all passes
    (counted by a wrapper of the module's ``chunk_sums``, so a retrace per shape would fail), and every pass's
    sums equal the NumPy reference."""
    from dpgp_gpflow.whole_rows import statistics as statistics_module

    original = statistics_module.chunk_sums
    modes = []

    def counted(*args):
        modes.append(tf.executing_eagerly())  # Python: once per eager call, once per trace
        return original(*args)

    monkeypatch.setattr(statistics_module, "chunk_sums", counted)
    X, Y = _rows(173)
    Z, rows = _rows_statistics()
    S, b, q = reference_statistics(X, Y, Z, LENGTHSCALE, BOX, BOUNDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        one = wr.sufficient_statistics(LocalChunks(X, Y, 173), rows)
        assert not rows.features.compiled and modes == [True]  # one chunk: eager, nothing traced
        passes = [wr.sufficient_statistics(LocalChunks(X, Y, chunk_size), rows) for chunk_size in (50, 7, 13)]
    assert rows.features.compiled
    assert modes.count(False) == 1  # one trace for every chunk length and every pass
    assert 1 <= modes.count(True) <= rows.compile_after  # eager only until compiled
    for got in (one, *passes):
        np.testing.assert_allclose(got.S, S, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got.b, b, rtol=1e-10, atol=1e-10)
        assert got.q == pytest.approx(q, rel=1e-12) and got.n == 173


def test_a_chunk_longer_than_a_slice_is_summed_slice_by_slice_to_the_same_statistics(monkeypatch):
    from dpgp_gpflow.whole_rows import statistics as statistics_module

    X, Y = _rows(173)
    Z, rows = _rows_statistics()
    monkeypatch.setattr(statistics_module, "SLICE_ROWS", 40)  # 173 rows in one chunk: 5 slices
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        stats = wr.sufficient_statistics(LocalChunks(X, Y, 173), rows)
    S, b, q = reference_statistics(X, Y, Z, LENGTHSCALE, BOX, BOUNDS)
    np.testing.assert_allclose(stats.S, S, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(stats.b, b, rtol=1e-10, atol=1e-10)
    assert stats.q == pytest.approx(q, rel=1e-12) and stats.n == 173


def test_dask_reduction_equals_the_in_memory_statistics():
    da = pytest.importorskip("dask.array")
    from dpgp_gpflow.distributed import DaskChunks

    X, Y = _rows(301, seed=1)
    Z, rows = _rows_statistics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ClippingWarning)
        local = wr.sufficient_statistics(LocalChunks(X, Y, 301), rows)
        on_dask = wr.sufficient_statistics(DaskChunks(da.from_array(X, chunks=(40, 2)), da.from_array(Y, chunks=(40, 1))),
                                           rows)
    np.testing.assert_allclose(on_dask.S, local.S, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(on_dask.b, local.b, rtol=1e-12, atol=1e-12)
    assert on_dask.q == pytest.approx(local.q, rel=1e-13)
    assert (on_dask.n, on_dask.clipped_inputs, on_dask.clipped_outputs) == (local.n, local.clipped_inputs,
                                                                            local.clipped_outputs)


def test_inputs_outside_the_box_are_refused_where_clipping_is_off():
    X, Y = _rows(20)
    Z = wr.inducing_grid(BOX, 2)
    rows = wr.RowStatistics(wr.FeatureMap(gpflow.kernels.SquaredExponential(), Z), BOX, BOUNDS, clip_inputs=False)
    with pytest.raises(ValueError, match="outside the public box"):
        wr.sufficient_statistics(LocalChunks(X, Y, 5), rows)


def test_pack_is_the_frobenius_norm_and_unpack_inverts_it():
    rng = np.random.default_rng(3)
    m, d = 4, 6.0
    A = rng.normal(size=(m, m))
    S, b, q = A + A.T, rng.normal(size=m), 2.5
    scales = statistic_scales(d, (1.0, 2.0, 0.5))  # normalised to squares summing to 1
    v = packed(S, b, q, scales)
    assert v.size == statistic_dimension(m) == m * (m + 1) // 2 + m + 1
    w_S2, w_b2, w_q2 = 1 / 3.5, 2 / 3.5, 0.5 / 3.5
    expected = (w_S2 / 2 * np.sum(S**2) + w_b2 / d**2 * np.sum(b**2) + w_q2 * 16 / d**4 * q**2)
    assert np.sum(v**2) == pytest.approx(expected, rel=1e-12)
    back = unpack(v, scales, m)
    np.testing.assert_allclose(back["S"], S, rtol=1e-12)
    np.testing.assert_allclose(back["b"], b, rtol=1e-12)
    assert float(back["q"]) == pytest.approx(q)
    std = entry_noise_std(0.7, scales, m)  # each packed entry's noise std 0.7, mapped to the statistics
    rows, cols = np.triu_indices(m)
    weight = np.where(rows == cols, 1.0, math.sqrt(2.0)) * math.sqrt(w_S2) / math.sqrt(2.0)
    np.testing.assert_allclose(std["S"][rows, cols], 0.7 / weight, rtol=1e-12)
    np.testing.assert_allclose(std["S"], std["S"].T)
    np.testing.assert_allclose(std["b"], 0.7 * d / math.sqrt(w_b2), rtol=1e-12)
    assert float(std["q"]) == pytest.approx(0.7 * d**2 / 4 / math.sqrt(w_q2))


@pytest.mark.parametrize("shares, reached", [(wr.DEFAULT_SHARES, 0.96), ((0.1, 0.85, 0.05), 0.9), ((0.5, 0.3, 0.2), 0.85),
                                             ((1, 1, 1), 0.85)])
def test_joint_bound_bounds_every_neighbour_and_is_nearly_reached(shares, reached):
    """Brute force over features of norm <= 1 and outputs in the bounds: the squared shift of the packed vector
    (its norm: test_pack_is_the_frobenius_norm...) never exceeds J; the worst found reaches close to it,
    and packed itself gives the worst one's shift. (The bound's slack is its ``w_q^2``: loosest for large shares of
    ``q``.)"""
    rng = np.random.default_rng(4)
    d = 2.0
    total = sum(shares)
    w_S2, w_b2, w_q2 = (w / total for w in shares)
    J = joint_bound(shares)
    m, count = 3, 200_000
    u = rng.normal(size=(count, m))
    v = rng.normal(size=(count, m))
    u *= rng.uniform(0.5, 1.0, (count, 1)) ** 0.2 / np.linalg.norm(u, axis=1, keepdims=True)
    v *= rng.uniform(0.5, 1.0, (count, 1)) ** 0.2 / np.linalg.norm(v, axis=1, keepdims=True)
    t, tp = (np.clip(rng.uniform(-1.4, 1.4, count), -1, 1) * d / 2 for _ in range(2))
    uu, vv, uv = (np.sum(a * b, axis=1) for a, b in ((u, u), (v, v), (u, v)))
    dS2 = uu**2 + vv**2 - 2 * uv**2  # ||u u^T - v v^T||_F^2
    db2 = uu * t**2 + vv * tp**2 - 2 * uv * t * tp  # ||u t - v t'||^2
    dq = t**2 - tp**2
    shift2 = w_S2 / 2 * dS2 + w_b2 / d**2 * db2 + 16 * w_q2 / d**4 * dq**2
    i = int(np.argmax(shift2))
    assert shift2[i] <= J + 1e-12
    assert shift2[i] >= reached * J
    assert J <= 1.0
    vector = packed(np.outer(u[i], u[i]) - np.outer(v[i], v[i]), u[i] * t[i] - v[i] * tp[i], dq[i],
                    statistic_scales(d, shares))
    assert np.sum(vector**2) == pytest.approx(shift2[i], rel=1e-10)


def test_rounding_factor_is_tiny_for_chunked_sums_and_refuses_one_huge_chunk():
    assert 1.0 < rounding_factor(10**6, 20_000, 50, 49) < 1.0 + 2e-4
    with pytest.raises(FloatingPointError, match="smaller chunks"):
        rounding_factor(10**7, 10**7, 1, 49)
