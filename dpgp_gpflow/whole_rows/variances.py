"""The kernel variance and the noise variance fitted on the released whole-row statistics (post-processing).

The statistics are released at unit kernel scale (``k / k_max``), so a kernel variance ``sigma_f^2`` scales
the features by ``sigma_f`` and the noise variance ``sigma^2`` enters only the solve. Titsias' collapsed bound
(SGPR's ELBO, GPflow's ``SGPR.elbo``) of the clipped, centred outputs is then a function of the released
``S~, b~, q~`` and the public ``n`` (docs/whole_rows.md#variances-as-post-processing):

    ELBO = -n/2 log(2 pi) - (n - M)/2 log sigma^2 - 1/2 log det(sigma^2 I + sigma_f^2 S^)
           - r / (2 sigma^2) - sigma_f^2 t / (2 sigma^2),        A = sigma^2 I + sigma_f^2 S^,
    r = q~ - sigma_f^2 [b~^T A^{-1} b~ - sigma_b^2 tr A^{-1}],   t = n - tr S~,

with ``S^`` the regularised ``S~`` (:func:`~dpgp_gpflow.whole_rows.posterior.regularised_statistic`) and the
quadratic term corrected for the bias the noise of ``b~`` adds (``E[e^T A^{-1} e] = sigma_b^2 tr A^{-1}``).
On exact statistics the residual sum ``r`` and the trace residual ``t`` are >= 0; on released ones their noise
(public stds ``s_r``, ``s_t``) often makes them negative, and the bound then grows without limit as
``sigma^2 -> 0``. Each enters the bound as its mean given its released value and that it is >= 0 (flat prior,
Gaussian noise): ``s h(x / s)``, ``h(z) = z + phi(z) / Phi(z)`` (:func:`nonnegative_mean`); with zero noise,
``max(x, 0)``, the exact bound. :func:`fit_variances` maximises it over a public box of values (L-BFGS-B on the
logarithms) and warns (:class:`~dpgp_gpflow.exceptions.VarianceFitWarning`) when a value ends on the box's edge.

Privacy assumption: reads the released statistics, their public noise stds, the public ``n`` and the public
bounds only.
"""

from __future__ import annotations

import math
import warnings
from typing import Tuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from scipy import optimize

from ..exceptions import VarianceFitWarning

__all__: list[str] = []  # internal: the package imports these names by name

#: Below this ``z``, :func:`nonnegative_mean` uses the asymptotic series of ``z + phi(z) / Phi(z)`` (no cancellation).
_TAIL = -30.0


@check_shapes("value: []", "std: []", "return: []")
def nonnegative_mean(value: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
    """``E[x | x~ = value, x >= 0]`` for ``x~ = x + N(0, std^2)`` and a flat prior on ``x >= 0``: ``std h(value /
    std)``, ``h(z) = z + phi(z) / Phi(z)`` (> 0, ``h(z) ~ z`` for large ``z``); ``max(value, 0)`` when ``std = 0``."""
    value, std = tf.convert_to_tensor(value, tf.float64), tf.convert_to_tensor(std, tf.float64)
    noisy = std > 0.0
    safe_std = tf.where(noisy, std, tf.ones_like(std))
    z = value / safe_std
    z_body = tf.maximum(z, _TAIL)
    body = z_body + tf.exp(-0.5 * tf.square(z_body) - 0.5 * math.log(2.0 * math.pi)
                           - tf.math.log(0.5 * tf.math.erfc(-z_body / math.sqrt(2.0))))
    w = 1.0 / tf.square(tf.minimum(z, _TAIL))  # h(z) = (1 - 2 w + 10 w^2 - 74 w^3 + ...) / |z| for z -> -inf
    tail = (1.0 - 2.0 * w + 10.0 * tf.square(w) - 74.0 * w**3) / tf.abs(tf.minimum(z, _TAIL))
    return tf.where(noisy, safe_std * tf.where(z > _TAIL, body, tail), tf.maximum(value, 0.0))


@check_shapes("S_hat: [M, M]", "b: [M]", "return: []")
def sgpr_bound(S_hat: tf.Tensor, b: tf.Tensor, q: tf.Tensor, trace: tf.Tensor, n: int, b_std: float,
               kernel_variance: tf.Tensor, noise_variance: tf.Tensor, *, q_std: float,
               offdiag_std: float) -> tf.Tensor:
    """The collapsed SGPR bound (module docstring) at unit-scale statistics ``S_hat`` (regularised), ``b``,
    ``q`` and ``trace`` (``tr S~``, the released diagonal's sum), ``n`` rows, and the public noise stds of
    ``b`` (``b_std``), ``q`` (``q_std``) and ``S``'s off-diagonal entries (``offdiag_std``; its diagonal's are
    ``sqrt(2)`` times it). With all three 0 (exact statistics): SGPR's ELBO."""
    S_hat = tf.convert_to_tensor(S_hat, tf.float64)
    # convert_to_tensor, not cast: a Python float is then not rounded to float32 on the way
    q, trace, kernel_variance, noise_variance = (tf.convert_to_tensor(v, tf.float64) for v in (
        q, trace, kernel_variance, noise_variance))
    M = tf.shape(S_hat)[0]
    m = tf.cast(M, tf.float64)
    n = tf.cast(n, tf.float64)
    A = noise_variance * tf.eye(M, dtype=tf.float64) + kernel_variance * S_hat  # [M, M]
    chol = tf.linalg.cholesky(A)
    logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
    b = tf.convert_to_tensor(b, tf.float64)
    half = tf.linalg.triangular_solve(chol, b[:, None], lower=True)  # [M, 1]
    inv_half = tf.linalg.triangular_solve(chol, tf.eye(M, dtype=tf.float64), lower=True)  # L^{-1}
    inv_trace = tf.reduce_sum(tf.square(inv_half))
    quad = kernel_variance * (tf.reduce_sum(tf.square(half)) - b_std**2 * inv_trace)
    # the noise of r = q~ - quad (first order in b~'s and S~'s noise, plus e^T A^{-1} e's): u = sigma_f^2 A^{-1} b~
    u = kernel_variance * tf.linalg.cholesky_solve(chol, b[:, None])[:, 0]
    uu = tf.reduce_sum(tf.square(u))
    inv_sq_trace = tf.reduce_sum(tf.square(tf.linalg.matmul(inv_half, inv_half, transpose_a=True)))  # tr A^{-2}
    r_std = tf.sqrt(q_std**2 + 4.0 * b_std**2 * uu + 2.0 * offdiag_std**2 * tf.square(uu)
                    + 2.0 * b_std**4 * tf.square(kernel_variance) * inv_sq_trace)
    t_std = math.sqrt(2.0) * offdiag_std * tf.sqrt(m)  # the sum of M diagonal entries' noise
    residual = nonnegative_mean(q - quad, r_std)
    trace_residual = nonnegative_mean(n - trace, t_std)  # sum of k(x, x) / k_max - |phi(x)|^2 >= 0
    return (-0.5 * n * math.log(2.0 * math.pi) - 0.5 * (n - m) * tf.math.log(noise_variance) - 0.5 * logdet
            - 0.5 * residual / noise_variance - 0.5 * kernel_variance * trace_residual / noise_variance)


@tf.function(reduce_retracing=True)
def _loss(S_hat: tf.Tensor, b: tf.Tensor, q: tf.Tensor, trace: tf.Tensor, n: tf.Tensor, stds: tf.Tensor,
          log_values: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """``-sgpr_bound / n`` at ``exp(log_values)`` and its gradient in ``log_values`` (compiled once per ``M``)."""
    with tf.GradientTape() as tape:
        tape.watch(log_values)
        value = -sgpr_bound(S_hat, b, q, trace, n, stds[0], tf.exp(log_values[0]), tf.exp(log_values[1]),
                            q_std=stds[1], offdiag_std=stds[2]) / tf.maximum(n, 1.0)
    return value, tape.gradient(value, log_values)


#: The public ranges searched (:func:`variance_box`), in units of ``(d/2)^2``: the kernel variance's, the noise
#: variance's.
_KERNEL_RANGE, _NOISE_RANGE = (1e-4, 10.0), (1e-6, 1.0)


def variance_box(d: float) -> Tuple[Tuple[float, float], Tuple[float, float]]:
    """The public ranges searched for ``(sigma_f^2, sigma^2)`` with outputs of width ``d``: ``_KERNEL_RANGE`` and
    ``_NOISE_RANGE`` times ``(d/2)^2``."""
    half = (float(d) / 2.0) ** 2
    return (_KERNEL_RANGE[0] * half, _KERNEL_RANGE[1] * half), (_NOISE_RANGE[0] * half, _NOISE_RANGE[1] * half)


def _searched() -> str:
    """The searched ranges as the warning states them, from ``_KERNEL_RANGE`` and ``_NOISE_RANGE``."""
    return ", ".join(f"{name} variance [{lo:g}, {hi:g}] (d/2)^2"
                     for name, (lo, hi) in (("kernel", _KERNEL_RANGE), ("noise", _NOISE_RANGE)))


def fit_variances(S_hat: tf.Tensor, b: tf.Tensor, q: float, trace: float, n: int, b_std: float,
                  d: float, *, q_std: float, offdiag_std: float) -> Tuple[float, float]:
    """``(sigma_f^2, sigma^2)`` maximising :func:`sgpr_bound` over :func:`variance_box` (post-processing); a
    :class:`~dpgp_gpflow.exceptions.VarianceFitWarning` when either ends on the box's edge."""
    (kf_lo, kf_hi), (nv_lo, nv_hi) = variance_box(d)
    S_hat = tf.constant(S_hat, tf.float64)
    b = tf.constant(b, tf.float64)
    q_t, trace_t = tf.constant(float(q), tf.float64), tf.constant(float(trace), tf.float64)
    q_std, offdiag_std = float(q_std), float(offdiag_std)

    stds = tf.constant([float(b_std), q_std, offdiag_std], tf.float64)
    n_t = tf.constant(float(n), tf.float64)

    def loss(log_values: np.ndarray) -> Tuple[float, np.ndarray]:
        value, gradient = _loss(S_hat, b, q_t, trace_t, n_t, stds, tf.constant(log_values, tf.float64))
        return float(value), gradient.numpy()

    start = np.log([math.sqrt(kf_lo * kf_hi), math.sqrt(nv_lo * nv_hi)])
    bounds = [(math.log(kf_lo), math.log(kf_hi)), (math.log(nv_lo), math.log(nv_hi))]
    result = optimize.minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    on_edge = [name for name, value, (lo, hi) in zip(("kernel variance", "noise variance"), result.x, bounds)
               if min(value - lo, hi - value) <= 1e-6]
    if on_edge:
        warnings.warn(f"the {' and the '.join(on_edge)} fitted on the released statistics ended on the edge of "
                      f"the searched range ({_searched()}): the predictive "
                      "variance is then unreliable; give the noise variance from public knowledge "
                      "(noise_variance=, or with_variances(...))", VarianceFitWarning, stacklevel=2)
    kernel_variance, noise_variance = np.exp(result.x)
    return float(kernel_variance), float(noise_variance)
