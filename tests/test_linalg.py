"""Column-blocked solves (dpgp_gpflow.linalg) against SciPy, in each of their blockings."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from dpgp_gpflow import linalg

# (r, n): one call; two blocks (r^2 n >= SPLIT_FLOPS, n odd: unequal blocks); eight blocks (n >= WIDE_COLUMNS)
SHAPES = [(5, 3), (300, 1201), (4, linalg.WIDE_COLUMNS + 5)]


def _problem(r, n, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((r, r)) + 3.0 * np.sqrt(r) * np.eye(r)
    L = np.linalg.cholesky(A @ A.T)
    return A, L, rng.standard_normal((r, n))


def test_shapes_cover_every_blocking():
    assert SHAPES[0][0] ** 2 * SHAPES[0][1] < linalg.SPLIT_FLOPS
    assert SHAPES[1][0] ** 2 * SHAPES[1][1] >= linalg.SPLIT_FLOPS and SHAPES[1][1] < linalg.WIDE_COLUMNS
    assert SHAPES[2][1] >= linalg.WIDE_COLUMNS


@pytest.mark.parametrize("r, n", SHAPES)
def test_solves_match_scipy(r, n):
    A, L, B = _problem(r, n)
    np.testing.assert_allclose(linalg.solve(A, B).numpy(), scipy.linalg.solve(A, B), rtol=1e-9, atol=1e-12)
    for lower in (True, False):
        T = L if lower else L.T
        for adjoint in (False, True):
            expected = scipy.linalg.solve_triangular(T, B, lower=lower, trans="T" if adjoint else "N")
            got = linalg.triangular_solve(T, B, lower=lower, adjoint=adjoint).numpy()
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    expected = scipy.linalg.cho_solve((L, True), B)
    np.testing.assert_allclose(linalg.cholesky_solve(L, B).numpy(), expected, rtol=1e-9, atol=1e-12)


def test_blocks_agree_with_one_call_to_rounding():
    """Blocking changes only the order of the arithmetic: each column is the one-call solve's to rounding."""
    A, L, B = _problem(*SHAPES[2], seed=1)
    one = tf.linalg.triangular_solve(tf.constant(L), tf.constant(B)).numpy()
    np.testing.assert_allclose(linalg.triangular_solve(L, B).numpy(), one, rtol=1e-13, atol=1e-15)


def test_inside_a_users_tf_function_with_unknown_shapes():
    spec = tf.TensorSpec([None, None], tf.float64)
    f = tf.function(lambda A, B: linalg.solve(A, B), input_signature=[spec, spec])
    for r, n in SHAPES[:2]:
        A, _, B = _problem(r, n, seed=2)
        np.testing.assert_allclose(f(tf.constant(A), tf.constant(B)).numpy(), scipy.linalg.solve(A, B), rtol=1e-9,
                                   atol=1e-12)
    assert f.experimental_get_tracing_count() == 1


def test_eager_calls_of_new_shapes_do_not_retrace():
    for r, n in SHAPES[:2]:
        A, L, B = _problem(r, n, seed=3)
        linalg.solve(A, B), linalg.cholesky_solve(L, B)
    before = [f.experimental_get_tracing_count() for f in linalg._SOLVERS.values()]
    for r, n in [(7, 2), (310, 1100)]:
        A, L, B = _problem(r, n, seed=4)
        linalg.solve(A, B), linalg.cholesky_solve(L, B)
    assert [f.experimental_get_tracing_count() for f in linalg._SOLVERS.values()] == before
