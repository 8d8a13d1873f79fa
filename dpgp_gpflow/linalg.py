"""Dense solves with many right-hand sides, a block of columns at a time.

TensorFlow's CPU kernels for ``solve``, ``triangular_solve`` and ``cholesky_solve`` run one thread
per call and slow down once the right-hand side no longer fits in cache: on two cores, an r x r
solve against 10^5 columns runs about 3x faster as eight independent calls on blocks of columns
(in a ``tf.function``, which runs them side by side), and against a few thousand columns about
2x faster as two. Each column is solved exactly as before (the same factorisation, a
backward-stable solve); only the blocking of the arithmetic, and so the last bits, can differ.

Compiled and graph-safe (the split is a ``tf.cond`` on the dynamic shape), float64 only; public and
private data alike pass through unchanged, so nothing here carries a privacy assumption.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
from check_shapes import check_shapes

__all__: list[str] = []  # internal: the package imports these names by name

#: Solves of at least this many r^2 n flops are split into two blocks of columns (below, one call is
#: as fast) ...
SPLIT_FLOPS = 1e8
#: ... of at least MIN_BLOCK_COLUMNS columns each ...
MIN_BLOCK_COLUMNS = 64
#: ... and right-hand sides at least this wide into WIDE_BLOCKS blocks.
WIDE_COLUMNS = 32768
WIDE_BLOCKS = 8


def _blocks(op: Callable[[tf.Tensor], tf.Tensor], rhs: tf.Tensor, count: int) -> tf.Tensor:
    n = tf.shape(rhs)[-1]
    sizes = tf.fill([count], n // count) + tf.cast(tf.range(count) < n % count, tf.int32)
    return tf.concat([op(part) for part in tf.split(rhs, sizes, axis=-1, num=count)], axis=-1)


def _by_columns(op: Callable[[tf.Tensor], tf.Tensor], rhs: tf.Tensor) -> tf.Tensor:
    r, n = tf.shape(rhs)[0], tf.shape(rhs)[1]
    flops = tf.cast(r, tf.float64) ** 2 * tf.cast(n, tf.float64)
    split = (flops >= SPLIT_FLOPS) & (n >= 2 * MIN_BLOCK_COLUMNS)
    return tf.cond(n >= WIDE_COLUMNS, lambda: _blocks(op, rhs, WIDE_BLOCKS),
                   lambda: tf.cond(split, lambda: _blocks(op, rhs, 2), lambda: op(rhs)))


def _compiled(op: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]):
    """``op(matrix, rhs)`` by blocks of columns, compiled (so that eager callers get the blocks run side
    by side too); any shapes, float64, no retracing."""
    spec = tf.TensorSpec([None, None], tf.float64)
    return tf.function(lambda matrix, rhs: _by_columns(lambda part: op(matrix, part), rhs),
                       input_signature=[spec, spec], autograph=False)


_SOLVERS = {
    "solve": _compiled(tf.linalg.solve),
    "lower": _compiled(lambda L, b: tf.linalg.triangular_solve(L, b, lower=True)),
    "lower_adjoint": _compiled(lambda L, b: tf.linalg.triangular_solve(L, b, lower=True, adjoint=True)),
    "upper": _compiled(lambda U, b: tf.linalg.triangular_solve(U, b, lower=False)),
    "upper_adjoint": _compiled(lambda U, b: tf.linalg.triangular_solve(U, b, lower=False, adjoint=True)),
    "cholesky": _compiled(tf.linalg.cholesky_solve),
}


def _f64(x) -> tf.Tensor:
    return tf.convert_to_tensor(x, tf.float64)


@check_shapes("matrix: [r, r]", "rhs: [r, n]", "return: [r, n]")
def solve(matrix: tf.Tensor, rhs: tf.Tensor) -> tf.Tensor:
    """``tf.linalg.solve(matrix, rhs)`` (LU with partial pivoting), a block of columns at a time."""
    return _SOLVERS["solve"](_f64(matrix), _f64(rhs))


@check_shapes("matrix: [r, r]", "rhs: [r, n]", "return: [r, n]")
def triangular_solve(matrix: tf.Tensor, rhs: tf.Tensor, lower: bool = True, adjoint: bool = False) -> tf.Tensor:
    """``tf.linalg.triangular_solve(matrix, rhs, lower, adjoint)``, a block of columns at a time."""
    key = ("lower" if lower else "upper") + ("_adjoint" if adjoint else "")
    return _SOLVERS[key](_f64(matrix), _f64(rhs))


@check_shapes("chol: [r, r]", "rhs: [r, n]", "return: [r, n]")
def cholesky_solve(chol: tf.Tensor, rhs: tf.Tensor) -> tf.Tensor:
    """``tf.linalg.cholesky_solve(chol, rhs)`` (``chol`` lower triangular), a block of columns at a time."""
    return _SOLVERS["cholesky"](_f64(chol), _f64(rhs))
