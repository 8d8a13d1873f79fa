"""The sensitivity of a release against the noise actually used, and the floor no noise can go below.

:func:`mahalanobis_sensitivity` is the privacy-critical number of a cloaking release: computed from
the factor ``F`` that draws the noise, never from what the optimiser meant it to be.
Privacy assumption: the vectors and ``C`` are functions of public inputs and hyperparameters only.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import linalg
from .space import row_blocks


@check_shapes("factor: [r, r]", "vectors: [r, n]")
def mahalanobis_sensitivity(factor: tf.Tensor, vectors: tf.Tensor, data_sensitivity: float) -> float:
    """``d * sqrt(max_i v_i^T (F F^T)^{-1} v_i)``: the sensitivity of ``v = vectors y`` against noise
    with covariance ``F F^T``, for outputs that move by at most ``d`` (the square root included).

    This is the privacy-critical number: it is computed from the factor actually used to draw noise.
    """
    qmax = float(max_mahalanobis_norm2(tf.convert_to_tensor(factor, tf.float64), tf.convert_to_tensor(vectors, tf.float64)))
    if not math.isfinite(qmax):
        raise FloatingPointError("the sensitivity is not finite: the noise covariance is singular")
    return float(data_sensitivity) * math.sqrt(qmax)


@check_shapes("factor: [r, r]", "vectors: [r, n]", "return[0]: [r, n]", "return[1]: []")
def mahalanobis_terms(factor: tf.Tensor, vectors: tf.Tensor):
    """``z = F^{-1} v`` ([r, n], an LU solve with the factor itself) and ``max_i ||z_i||^2``: the one
    formula of the sensitivity."""
    z = linalg.solve(factor, vectors)  # [r, n]
    return z, tf.reduce_max(tf.reduce_sum(z * z, axis=0))


@check_shapes("factor: [r, r]", "vectors: [r, n]", "return: []")
def max_mahalanobis_norm2(factor: tf.Tensor, vectors: tf.Tensor) -> tf.Tensor:
    """``max_i ||F^{-1} v_i||^2`` (:func:`mahalanobis_terms`)."""
    return mahalanobis_terms(factor, vectors)[1]




def noise_std_lower_bound(C, data_sensitivity: float, noise_multiplier: float) -> np.ndarray:
    """``s d max_i |C_ji|`` per prediction j: no Gaussian noise, of any covariance, can be smaller.

    A release ``C y + N(0, Sigma)`` whose outputs move by up to ``d`` is (epsilon, delta)-DP with the
    analytic multiplier ``s`` only if ``s^2 d^2 c_i^T Sigma^{-1} c_i <= 1`` for every column ``c_i``
    (the privacy loss of a Gaussian shift depends on its Mahalanobis norm alone; for a singular
    ``Sigma`` read its pseudo-inverse, and ``c_i`` must lie in its range), and Cauchy-Schwarz,
    ``C_ji^2 <= Sigma_jj c_i^T Sigma^{-1} c_i``, then gives ``Sigma_jj >= s^2 d^2 C_ji^2``. Optimal
    for a single prediction (k = 1); a yardstick for the optimiser and for utility targets otherwise.

    ``C`` is the k x n cloaking matrix or a factored pair ``(A, B)`` (formed a block of rows at a
    time). Public: depends on ``C`` (public inputs and hyperparameters) only.
    """
    d, s = float(data_sensitivity), float(noise_multiplier)
    if not (math.isfinite(d) and d > 0.0 and math.isfinite(s) and s > 0.0):
        raise ValueError(f"data_sensitivity and noise_multiplier must be finite and > 0, got {d!r}, {s!r}")
    largest = tf.concat([tf.reduce_max(tf.abs(rows), axis=1) for _, rows in row_blocks(C)], axis=0)
    return s * d * largest.numpy()



@check_shapes("F: [k, r]", "return: [k]")
def row_norms(F: tf.Tensor) -> tf.Tensor:
    """Euclidean norm of each row of ``F``, scaled so that tiny rows (a prediction far from all data)
    do not underflow to 0 where their noise is not 0."""
    scale = tf.reduce_max(tf.abs(F), axis=1, keepdims=True)  # [k, 1]
    safe = tf.where(scale > 0.0, scale, tf.ones_like(scale))
    return scale[:, 0] * tf.norm(F / safe, axis=1)


