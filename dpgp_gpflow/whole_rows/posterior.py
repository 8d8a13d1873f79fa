"""Post-processing of the released whole-row statistics: regularisation, the weights' posterior, predictions.

Everything here reads the released (noised) statistics and public values only, so it costs no privacy.

* **Regularisation** (docs/whole_rows.md#regularisation). The released ``S~ = S + E`` carries symmetric
  Gaussian noise ``E`` with off-diagonal std ``sigma_o`` and diagonal std ``sqrt(2) sigma_o`` (the Gaussian
  orthogonal ensemble's shape). With probability at least ``1 - beta``, ``||E||_2 <= tau = 2 sigma_o (sqrt(M) +
  sqrt(log(2 / beta)))`` (:func:`spectral_noise_bound`). :func:`regularised_statistic` projects ``S~`` in the
  Frobenius norm onto ``{S : S >= rho I}`` with ``rho = FLOOR_SCALE * tau`` (eigenvalues below ``rho`` raised to
  it): positive definite, a PSD projection and a ridge tied to the noise's spectral scale in one step; the
  floor depends on public quantities only (the noise std and M).
* **Posterior** (docs/whole_rows.md#posterior). With weights ``w ~ N(0, I)``, ``f(x) = sigma_f phi(x)^T w``
  and noise variance ``sigma^2``, the weights' posterior mean gives the predictive mean ``c + phi(x)^T u``,
  ``u = (lambda I + S^)^{-1} b~``, ``lambda = sigma^2 / sigma_f^2``, and the model's predictive variance
  ``sigma_f^2 (k1(x, x) - |phi(x)|^2 + lambda |L^{-1} phi(x)|^2)`` (SGPR's, ``L L^T = lambda I + S^``).
* **The DP noise in the predictive variance**: to first order (delta method) the noise of ``b~`` (std
  ``sigma_b``) and of ``S~`` move ``u`` by ``(lambda I + S^)^{-1} (e_b - E u)``, so a prediction's mean has the
  extra variance ``(sigma_b^2 + sigma_o^2 |u|^2) |h|^2 + sigma_o^2 (u . h)^2`` with ``h = (lambda I + S^)^{-1}
  phi(x)`` (``Cov(E u) = sigma_o^2 (|u|^2 I + u u^T)`` for the ensemble above).

Privacy assumption: the inputs of these functions are the released statistics, their public noise stds and
public values (kernel, ``Z``, variances given or fitted on the released statistics): post-processing.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf
from check_shapes import check_shapes

__all__: list[str] = []  # internal: the package imports these names by name

#: The eigenvalue floor as a multiple of the spectral bound ``tau`` of the noise (public design constant,
#: chosen on synthetic data and the !Kung protocol: docs/whole_rows.md#regularisation).
FLOOR_SCALE = 0.75
#: ``beta``: the bound ``tau`` holds with probability at least ``1 - beta`` over the noise.
SPECTRAL_FAILURE = 0.01


def spectral_noise_bound(offdiag_std: float, m: int, failure: float = SPECTRAL_FAILURE) -> float:
    """``tau = 2 sigma_o (sqrt(M) + sqrt(log(2 / beta)))``: with probability at least ``1 - beta`` the spectral
    norm of an M x M symmetric Gaussian matrix with off-diagonal std ``sigma_o`` and diagonal std ``sqrt(2)
    sigma_o`` is at most ``tau`` (``E lambda_max <= 2 sigma_o sqrt(M)`` by Sudakov-Fernique, and
    ``lambda_max`` is ``sqrt(2) sigma_o``-Lipschitz in the underlying standard normals: docs/whole_rows.md).
    Public: from the noise std and M only."""
    if not (0.0 < failure < 1.0):
        raise ValueError(f"failure must be in (0, 1), got {failure}")
    return 2.0 * float(offdiag_std) * (math.sqrt(int(m)) + math.sqrt(math.log(2.0 / failure)))


@check_shapes("S: [M, M]", "return: [M, M]")
def regularised_statistic(S: tf.Tensor, floor: float) -> tf.Tensor:
    """The Frobenius-nearest matrix to the symmetric part of ``S`` whose eigenvalues are all ``>= floor``:
    ``V max(Lambda, floor) V^T`` (post-processing)."""
    S = tf.convert_to_tensor(S, tf.float64)
    eigenvalues, V = tf.linalg.eigh(0.5 * (S + tf.transpose(S)))
    floored = tf.maximum(eigenvalues, tf.constant(floor, tf.float64))
    return tf.linalg.matmul(V * floored[None, :], V, transpose_b=True)


class WeightPosterior(NamedTuple):
    """The weights' posterior from the released statistics (all public: post-processing)."""

    chol: tf.Tensor  #: [M, M] Cholesky of ``lambda I + S^``
    mean: tf.Tensor  #: [M] ``u = (lambda I + S^)^{-1} b~`` (predictive mean ``c + phi(x)^T u``)
    kernel_variance: float  #: sigma_f^2
    noise_variance: float  #: sigma^2
    b_std: float  #: std of the noise of each entry of the released ``b``
    offdiag_std: float  #: std of the noise of each off-diagonal entry of the released ``S``


@check_shapes("S_hat: [M, M]", "b: [M]")
def weight_posterior(S_hat: tf.Tensor, b: tf.Tensor, *, kernel_variance: float, noise_variance: float,
                     b_std: float, offdiag_std: float) -> WeightPosterior:
    """:class:`WeightPosterior` of the regularised ``S^`` and the released ``b~`` at kernel variance
    ``sigma_f^2`` and noise variance ``sigma^2`` (the mean depends on their ratio only)."""
    S_hat = tf.convert_to_tensor(S_hat, tf.float64)
    M = tf.shape(S_hat)[0]
    ratio = float(noise_variance) / float(kernel_variance)
    chol = tf.linalg.cholesky(S_hat + ratio * tf.eye(M, dtype=tf.float64))  # [M, M]
    mean = tf.linalg.cholesky_solve(chol, tf.convert_to_tensor(b, tf.float64)[:, None])[:, 0]  # [M]
    return WeightPosterior(chol, mean, float(kernel_variance), float(noise_variance), float(b_std), float(offdiag_std))


@check_shapes("phi: [N, M]", "prior: [N]", "return[0]: [N]", "return[1]: [N]", "return[2]: [N]")
def predictive_terms(posterior: WeightPosterior, phi: tf.Tensor, prior: tf.Tensor):
    """``(mean - c, model variance, DP noise variance)`` [N] each at features ``phi`` [N, M] (unit scale) with
    ``prior = k(x, x) / k_max`` [N]: the mean ``phi u``; SGPR's variance of f,
    ``sigma_f^2 (prior - |phi|^2 + lambda |L^{-1} phi|^2)``; and the first-order variance the DP noise of the
    released ``b`` and ``S`` adds to the mean, ``(sigma_b^2 + sigma_o^2 |u|^2) |h|^2 + sigma_o^2 (u . h)^2``,
    ``h = (lambda I + S^)^{-1} phi``."""
    phi = tf.convert_to_tensor(phi, tf.float64)
    ratio = posterior.noise_variance / posterior.kernel_variance
    mean = tf.linalg.matvec(phi, posterior.mean)  # [N]
    half = tf.linalg.triangular_solve(posterior.chol, tf.transpose(phi), lower=True)  # [M, N]
    h = tf.linalg.triangular_solve(posterior.chol, half, lower=True, adjoint=True)  # [M, N]
    nystrom = tf.maximum(prior - tf.reduce_sum(tf.square(phi), axis=1), 0.0)  # k(x, x) - Q(x, x) >= 0
    model = posterior.kernel_variance * (nystrom + ratio * tf.reduce_sum(tf.square(half), axis=0))
    u_sq = tf.reduce_sum(tf.square(posterior.mean))
    noise = ((posterior.b_std**2 + posterior.offdiag_std**2 * u_sq) * tf.reduce_sum(tf.square(h), axis=0)
             + posterior.offdiag_std**2 * tf.square(tf.linalg.matvec(h, posterior.mean, transpose_a=True)))
    return mean, model, noise
