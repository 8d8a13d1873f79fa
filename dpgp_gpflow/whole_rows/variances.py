"""The kernel variance and the noise variance fitted on the released whole-row statistics (post-processing).

The statistics are released at unit kernel scale (``k / k_max``), so a kernel variance ``sigma_f^2`` scales
the features by ``sigma_f`` and the noise variance ``sigma^2`` enters only the solve. Titsias' collapsed bound
(SGPR's ELBO, GPflow's ``SGPR.elbo``) of the clipped, centred outputs is then a function of the released
``S~, b~, q~`` and the public ``n`` (docs/whole_rows.md#variances-as-post-processing):

    ELBO = -n/2 log(2 pi) - (n - M)/2 log sigma^2 - 1/2 log det(sigma^2 I + sigma_f^2 S^)
           - (q~ - sigma_f^2 [b~^T A^{-1} b~ - sigma_b^2 tr A^{-1}]) / (2 sigma^2)
           - sigma_f^2 (n - tr S~) / (2 sigma^2),        A = sigma^2 I + sigma_f^2 S^,

with ``S^`` the regularised ``S~`` (:func:`~dpgp_gpflow.whole_rows.posterior.regularised_statistic`) and the
quadratic term corrected for the bias the noise of ``b~`` adds (``E[e^T A^{-1} e] = sigma_b^2 tr A^{-1}``).
:func:`fit_variances` maximises it over a public box of values (L-BFGS-B on the logarithms).

Privacy assumption: reads the released statistics, their public noise stds, the public ``n`` and the public
bounds only.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from scipy import optimize

__all__: list[str] = []  # internal: the package imports these names by name


@check_shapes("S_hat: [M, M]", "b: [M]", "return: []")
def sgpr_bound(S_hat: tf.Tensor, b: tf.Tensor, q: tf.Tensor, trace: tf.Tensor, n: int, b_std: float,
               kernel_variance: tf.Tensor, noise_variance: tf.Tensor) -> tf.Tensor:
    """The collapsed SGPR bound (module docstring) at unit-scale statistics ``S_hat`` (regularised), ``b``,
    ``q`` and ``trace`` (``tr S~``, the released diagonal's sum), ``n`` rows, and ``b``'s noise std ``b_std``."""
    S_hat = tf.convert_to_tensor(S_hat, tf.float64)
    q, trace, kernel_variance, noise_variance = (tf.cast(v, tf.float64) for v in (q, trace, kernel_variance,
                                                                                  noise_variance))
    M = tf.shape(S_hat)[0]
    m = tf.cast(M, tf.float64)
    n = tf.cast(n, tf.float64)
    A = noise_variance * tf.eye(M, dtype=tf.float64) + kernel_variance * S_hat  # [M, M]
    chol = tf.linalg.cholesky(A)
    logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
    half = tf.linalg.triangular_solve(chol, tf.convert_to_tensor(b, tf.float64)[:, None], lower=True)  # [M, 1]
    inv_trace = tf.reduce_sum(tf.square(tf.linalg.triangular_solve(chol, tf.eye(M, dtype=tf.float64), lower=True)))
    quad = kernel_variance * (tf.reduce_sum(tf.square(half)) - b_std**2 * inv_trace)
    residual = tf.maximum(n - trace, 0.0)  # sum of k(x, x) / k_max - |phi(x)|^2 >= 0
    return (-0.5 * n * math.log(2.0 * math.pi) - 0.5 * (n - m) * tf.math.log(noise_variance) - 0.5 * logdet
            - 0.5 * (q - quad) / noise_variance - 0.5 * kernel_variance * residual / noise_variance)


def variance_box(d: float) -> Tuple[Tuple[float, float], Tuple[float, float]]:
    """The public ranges searched for ``(sigma_f^2, sigma^2)`` with outputs of width ``d``: kernel variance in
    ``[1e-4, 10] (d/2)^2``, noise variance in ``[1e-6, 1] (d/2)^2``."""
    half = (float(d) / 2.0) ** 2
    return (1e-4 * half, 10.0 * half), (1e-6 * half, half)


def fit_variances(S_hat: tf.Tensor, b: tf.Tensor, q: float, trace: float, n: int, b_std: float,
                  d: float) -> Tuple[float, float]:
    """``(sigma_f^2, sigma^2)`` maximising :func:`sgpr_bound` over :func:`variance_box` (post-processing)."""
    (kf_lo, kf_hi), (nv_lo, nv_hi) = variance_box(d)
    S_hat = tf.constant(S_hat, tf.float64)
    b = tf.constant(b, tf.float64)
    q_t, trace_t = tf.constant(float(q), tf.float64), tf.constant(float(trace), tf.float64)

    def loss(log_values: np.ndarray) -> Tuple[float, np.ndarray]:
        x = tf.Variable(log_values, dtype=tf.float64)
        with tf.GradientTape() as tape:
            value = -sgpr_bound(S_hat, b, q_t, trace_t, n, b_std, tf.exp(x[0]), tf.exp(x[1])) / max(int(n), 1)
        return float(value), tape.gradient(value, x).numpy()

    start = np.log([math.sqrt(kf_lo * kf_hi), math.sqrt(nv_lo * nv_hi)])
    bounds = [(math.log(kf_lo), math.log(kf_hi)), (math.log(nv_lo), math.log(nv_hi))]
    result = optimize.minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    kernel_variance, noise_variance = np.exp(result.x)
    return float(kernel_variance), float(noise_variance)
